"""Small SavedModels for the serving tests (built in a second, unlike a trained model)."""

from __future__ import annotations

import os
import shutil

import tensorflow as tf

from core.warmup import write_warmup_requests


def toy_model(path: str, k: int, single_output: bool = False, warmup_inputs: dict | None = None) -> str:
    """`x` float32 [None, 3] → `y` = x·k and `version` = k per example (or only `y`)."""

    class Toy(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            y = x * float(k)
            return {"y": y} if single_output else {"y": y, "version": tf.fill(tf.shape(x)[:1], k)}

    module = Toy()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    if warmup_inputs is not None:
        write_warmup_requests(path, [warmup_inputs])
    return path


def image_bytes_model(path: str) -> str:
    """`image_bytes` string [None] of encoded RGB images (any size) → `mean` float32: each image's mean pixel."""

    class Images(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve(self, image_bytes):
            def mean(encoded):
                return tf.reduce_mean(
                    tf.cast(tf.io.decode_image(encoded, channels=3, expand_animations=False), tf.float32)
                )

            return {"mean": tf.map_fn(mean, image_bytes, fn_output_signature=tf.float32)}

    module = Images()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def publish(staging: str, base: str, name: str, version: str) -> str:
    """Move a built SavedModel into place atomically, as the model repository does."""
    target = os.path.join(base, name, version)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.rename(staging, target)
    return target


def remove(path: str) -> None:
    shutil.rmtree(path)
