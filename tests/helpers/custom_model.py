"""A model builder outside the trainer package, for the tests of `trainer.model: tests.helpers.custom_model:build_small_cnn`
(the contract: docs/guides/model.md)."""

import tf_keras as keras


def build_small_cnn(stats: dict, *, filters: int = 16, dropout: float = 0.2, conv_blocks: int = 1) -> keras.Model:
    """`conv_blocks` conv blocks over images of exactly the prepared size, its input named `pixels`."""
    inputs = keras.Input(shape=tuple(stats["input_shape"]), name="pixels")
    x = keras.layers.Rescaling(1.0 / 255, name="custom_rescale")(inputs)
    for block in range(conv_blocks):
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"custom_conv{block or ''}")(x)
    x = keras.layers.Flatten(name="custom_flatten")(x)
    x = keras.layers.Dropout(dropout, name="custom_dropout")(x)
    outputs = keras.layers.Dense(
        len(stats["labels"]), activation="softmax", name="custom_probabilities", dtype="float32"
    )(x)
    return keras.Model(inputs, outputs, name="custom_cnn")
