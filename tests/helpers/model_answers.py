"""What a trained model itself answers, run by TensorFlow in the test's process, for comparing what the server, the
batch predictor and the images answer."""

from __future__ import annotations

from functools import cache

import numpy as np


@cache
def split_examples(data_dir: str, count: int) -> np.ndarray:
    """The first `count` examples of the prepared test split, as the model's float inputs."""
    import tensorflow as tf

    from trainer import data

    stats = data.load_stats(data_dir)
    inputs, _ = next(iter(data.make_dataset(data_dir, "test", stats, count, training=False)))
    return tf.cast(inputs, tf.float32).numpy()


def model_outputs(model_dir: str, examples: np.ndarray) -> dict[str, np.ndarray]:
    """serving_default's outputs for `examples`, run by TensorFlow here."""
    import tensorflow as tf

    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    (name,) = signature.structured_input_signature[1]
    return {k: v.numpy() for k, v in signature(**{name: tf.constant(examples)}).items()}


def prepared_class_ids(model_dir, data_dir) -> dict[str, int]:
    """{image path relative to the folder: class id} of `serving_default` on the prepared pixels of every split."""
    import tensorflow as tf

    from trainer import data

    stats = data.load_stats(str(data_dir))
    signature = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    answers = {}
    for split in ("train", "val", "test"):
        for path in data.split_files(str(data_dir), split):
            for record in tf.data.TFRecordDataset(path):
                example = tf.train.Example.FromString(record.numpy()).features.feature
                pixels = np.frombuffer(example["image"].bytes_list.value[0], np.uint8).reshape(stats["input_shape"])
                answers[example["key"].bytes_list.value[0].decode()] = int(
                    signature(image=tf.constant(pixels[None], tf.float32))["class_id"][0]
                )
    return answers
