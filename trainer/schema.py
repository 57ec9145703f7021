"""Names shared by data prep and the trainer (importable without TensorFlow)."""

SPLITS = ("train", "val", "test")
IMAGE, TABULAR = "image", "tabular"


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"
