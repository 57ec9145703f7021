"""Quantization-aware training (tensorflow-model-optimization) of a trained tf-keras SavedModel, for int8 TFLite.

The model is loaded from the SavedModel as tf-keras saved it; every layer tfmot's default 8-bit scheme supports
(Conv2D, Dense, pooling, Flatten, Dropout, ...) is wrapped with fake quantization of its weights and outputs, and
the model is fine-tuned on the train split. Layers the scheme does not support stay float while fine-tuning (the
preprocessing layers Resizing, Rescaling and Normalization among them); the int8 converter then quantizes those
from the representative examples, as post-training int8 does. The result is written as a SavedModel with the
trainer's `serving_default` signature, so it converts and evaluates exactly as the trained model does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

BATCH_SIZE = 32  # fine-tuning batch (examples a step)
SEED = 0  # weights' fake-quantization state and the train split's shuffle: a rerun fine-tunes the same way
KERAS_METADATA = "keras_metadata.pb"  # tf-keras writes it next to saved_model.pb; it lets the model load as Keras


class QatError(ValueError):
    """The model cannot be fine-tuned with fake quantization (user-facing message)."""


@dataclass(frozen=True)
class QatOptions:
    """How long and how fast the fine-tuning runs."""

    epochs: int = 2
    learning_rate: float = 1e-4

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise QatError(f"quantization-aware training needs at least 1 epoch, got {self.epochs}")
        if not self.learning_rate > 0:
            raise QatError(f"quantization-aware training needs a learning rate > 0, got {self.learning_rate}")


@dataclass(frozen=True)
class QatModel:
    """The fine-tuned model: its SavedModel folder, the layers trained with fake quantization and those left
    float, and the validation accuracy after the last epoch."""

    model_dir: str
    quantized_layers: tuple[str, ...]
    float_layers: tuple[str, ...]
    val_accuracy: float


def annotate(model):
    """`model` with every layer the default 8-bit scheme supports annotated for quantization; (annotated model,
    quantized layer names, float layer names). Input layers are in neither list."""
    import tensorflow_model_optimization as tfmot
    import tf_keras as keras

    registry = tfmot.quantization.keras.default_8bit.Default8BitQuantizeScheme().get_quantize_registry()
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    quantized = tuple(layer.name for layer in layers if registry.supports(layer))
    kept = tuple(layer.name for layer in layers if layer.name not in quantized)
    if not quantized:
        raise QatError(
            f"no layer of the model is one the 8-bit scheme quantizes (its layers: {', '.join(kept)}); "
            "quantization-aware training needs Conv2D, Dense or the like"
        )

    def wrap(layer):
        return tfmot.quantization.keras.quantize_annotate_layer(layer) if layer.name in quantized else layer

    return keras.models.clone_model(model, clone_function=wrap), quantized, kept


def fine_tune(
    model_dir: str,
    data_dir: str,
    output_dir: str,
    options: QatOptions,
    on_epoch: Callable[[int, dict], None] = lambda epoch, logs: None,
) -> QatModel:
    """Fine-tune the SavedModel at `model_dir` with fake quantization on `data_dir`'s train split (validation: its
    val split) and write it to `output_dir`; `on_epoch(epoch, logs)` after each epoch (1-based)."""
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot
    import tf_keras as keras

    from trainer import data
    from trainer.model import serving_signature

    if not tf.io.gfile.exists(f"{model_dir}/{KERAS_METADATA}"):
        raise QatError(
            f"the SavedModel at {model_dir} holds no tf-keras model ({KERAS_METADATA} missing): quantization-aware "
            "training fine-tunes a model the trainer saved"
        )
    try:
        model = keras.models.load_model(model_dir, compile=False)
    except (OSError, ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise QatError(f"the SavedModel at {model_dir} does not load as a tf-keras model: {first}") from None
    annotated, quantized, kept = annotate(model)
    try:
        with tfmot.quantization.keras.quantize_scope():
            qat_model = tfmot.quantization.keras.quantize_apply(annotated)
    except (RuntimeError, ValueError) as e:
        raise QatError(f"tfmot cannot apply quantization to the model: {str(e).strip().splitlines()[0]}") from None
    stats = data.load_stats(data_dir)
    keras.utils.set_random_seed(SEED)
    qat_model.compile(
        optimizer=keras.optimizers.Adam(options.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    history = qat_model.fit(
        data.make_dataset(data_dir, "train", stats, BATCH_SIZE, training=True, seed=SEED),
        epochs=options.epochs,
        steps_per_epoch=data.steps_per_epoch(stats, "train", BATCH_SIZE),
        validation_data=data.make_dataset(data_dir, "val", stats, BATCH_SIZE, training=False),
        verbose=0,
        callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: on_epoch(epoch + 1, logs))],
    )
    tf.saved_model.save(qat_model, output_dir, signatures={"serving_default": serving_signature(qat_model)})
    return QatModel(output_dir, quantized, kept, float(history.history["val_accuracy"][-1]))
