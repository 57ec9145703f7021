"""Keras model builders (tf-keras). Preprocessing lives inside the model so it serves raw inputs; the output layer
computes in float32 under a mixed-precision policy (`--mixed-precision`)."""

from __future__ import annotations

import math

from trainer.environment import use_legacy_keras

use_legacy_keras()

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from core.schema import IMAGE_BYTES_INPUT, IMAGE_BYTES_SIGNATURE  # noqa: E402
from trainer.data import IMAGE  # noqa: E402


def conv_blocks_for(size: int) -> int:
    """Conv+pool blocks that keep the feature map at least 2×2 (3 for the codelab's 180×180 input)."""
    return max(1, min(3, int(math.log2(max(size, 2) / 2))))


def build_image_model(input_shape, num_classes, model_size: int, filters: int, hidden_units: int, dropout: float):
    """Codelab-style CNN accepting raw pixel arrays (0..255) of any height and width."""
    channels = input_shape[-1]
    inputs = keras.Input(shape=(None, None, channels), name="image")
    x = keras.layers.Resizing(model_size, model_size, name="resize")(inputs)
    x = keras.layers.Rescaling(1.0 / 255, name="rescale")(x)
    for block in range(conv_blocks_for(model_size)):
        x = keras.layers.Conv2D(filters * 2**block, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(hidden_units, activation="relu")(x)
    x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="probabilities", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="cnn")


def build_tabular_model(num_features, num_classes, mean, variance, hidden_units: int, dropout: float):
    """MLP with feature normalization (statistics from the training split) inside the model."""
    inputs = keras.Input(shape=(num_features,), name="features")
    x = keras.layers.Normalization(mean=mean, variance=variance, name="normalize")(inputs)
    x = keras.layers.Dense(hidden_units, activation="relu")(x)
    x = keras.layers.Dropout(dropout)(x)
    x = keras.layers.Dense(max(8, hidden_units // 2), activation="relu")(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="probabilities", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="mlp")


def build_model(
    stats: dict, *, dropout: float = 0.2, hidden_units: int = 128, filters: int = 16, image_size: int = 0
) -> keras.Model:
    """The default builder (`trainer.model:build_model`): the CNN for images, the MLP for tabular data. Its
    hyperparameters: the dropout before the output layer, the units of the (first) hidden dense layer, the filters
    of the first conv block (doubling per block) and the CNN's input size (0: the prepared image size)."""
    num_classes = len(stats["labels"])
    if stats["kind"] == IMAGE:
        size = image_size or max(stats["input_shape"][:2])
        return build_image_model(stats["input_shape"], num_classes, size, filters, hidden_units, dropout)
    variance = [max(v, 1e-12) for v in stats["feature_variance"]]
    return build_tabular_model(
        stats["input_shape"][0], num_classes, stats["feature_mean"], variance, hidden_units, dropout
    )


def serving_signature(model: keras.Model):
    """`serving_default`: raw inputs → `probabilities` [N, classes] and `class_id` [N]."""
    input_name = model.inputs[0].name.split(":")[0]
    shape = [None, *model.inputs[0].shape[1:]]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name=input_name)])
    def serve(inputs):
        probabilities = model(inputs, training=False)
        return {"probabilities": probabilities, "class_id": tf.argmax(probabilities, axis=-1)}

    return serve


def decode_images(image_bytes, image_shape):
    """Encoded images (PNG, JPEG, GIF's first frame, BMP; any size, gray or color) → float32 pixels [N, H, W, C]
    prepared as data prep prepares training images: converted to the training channel count, resized to the
    prepared size with an antialiased bilinear filter (PIL's BILINEAR) and rounded to whole 0..255 values (prep
    stores uint8)."""
    height, width, channels = image_shape

    def decode(data):
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        image = tf.image.resize(image, [height, width], method="bilinear", antialias=True)
        return tf.clip_by_value(tf.round(image), 0.0, 255.0)

    return tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([height, width, channels], tf.float32))


def image_bytes_signature(model: keras.Model, image_shape):
    """`serving_image_bytes` (image models): `image_bytes` string [N] of encoded images → the outputs of
    `serving_default` for the decoded images (`decode_images`, then the same model)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=IMAGE_BYTES_INPUT)])
    def serve_bytes(image_bytes):
        probabilities = model(decode_images(image_bytes, image_shape), training=False)
        return {"probabilities": probabilities, "class_id": tf.argmax(probabilities, axis=-1)}

    return serve_bytes


def serving_signatures(model: keras.Model, stats: dict) -> dict:
    """The exported signatures: `serving_default` (pixel arrays / feature vectors) and, for image models,
    `serving_image_bytes` (encoded images)."""
    signatures = {"serving_default": serving_signature(model)}
    if stats["kind"] == IMAGE:
        signatures[IMAGE_BYTES_SIGNATURE] = image_bytes_signature(model, stats["input_shape"])
    return signatures
