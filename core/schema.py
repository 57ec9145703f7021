"""Names shared by data prep and the trainer (importable without TensorFlow)."""

SPLITS = ("train", "val", "test")
IMAGE, TABULAR = "image", "tabular"
# written by the trainer next to the SavedModel (TF Serving and Vertex ignore assets.extra/)
LABELS_FILE = "assets.extra/labels.txt"  # the label vocabulary, one a line, in class-id order
FEATURES_FILE = "assets.extra/features.txt"  # tabular models: the feature column names, one a line, in input order
PROFILE_FILE = (
    "assets.extra/data_profile.json"  # the training data's profile (stats.json's `profile`), for drift checks
)
# image models' second signature: encoded images (PNG, JPEG, GIF, BMP bytes; `{"b64": ...}` in JSON) -> the same
# outputs as `serving_default`, which takes the decoded pixel arrays
IMAGE_BYTES_SIGNATURE, IMAGE_BYTES_INPUT = "serving_image_bytes", "image_bytes"


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"
