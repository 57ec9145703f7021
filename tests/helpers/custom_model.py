"""A model builder outside the trainer package, for the tests of `trainer.model: tests.helpers.custom_model:build_small_cnn`
(the contract: docs/guides/model.md)."""

import tf_keras as keras


def build_small_cnn(stats: dict, hparams) -> keras.Model:
    """One conv block over images of exactly the prepared size, its input named `pixels`."""
    inputs = keras.Input(shape=tuple(stats["input_shape"]), name="pixels")
    x = keras.layers.Rescaling(1.0 / 255, name="custom_rescale")(inputs)
    x = keras.layers.Conv2D(hparams.filters, 3, padding="same", activation="relu", name="custom_conv")(x)
    x = keras.layers.Flatten(name="custom_flatten")(x)
    x = keras.layers.Dropout(hparams.dropout, name="custom_dropout")(x)
    outputs = keras.layers.Dense(len(stats["labels"]), activation="softmax", name="custom_probabilities")(x)
    return keras.Model(inputs, outputs, name="custom_cnn")
