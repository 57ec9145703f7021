"""What the trained model itself answers, for comparing what the images serve and predict."""

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
