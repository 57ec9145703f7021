"""A SavedModel's evaluation on a prepared split, and what makes two models comparable, shared by the evaluation gate,
the champion check and quantization."""

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from core.schema import LABELS_FILE  # written by the trainer next to the SavedModel


class ModelError(ValueError):
    """The model cannot be evaluated or compared (user-facing message)."""


@dataclass(frozen=True)
class ServingIdentity:
    """What identifies a model to its clients: its labels (None when the model carries no labels file), its serving
    inputs ({name: "dtype[shape]"}) and those of every other signature ({signature: inputs})."""

    labels: list[str] | None
    inputs: dict[str, str]
    signatures: dict[str, dict[str, str]]


@dataclass(frozen=True)
class Evaluation:
    """A model's metrics on a split: accuracy, mean cross-entropy loss, the confusion matrix (rows: true labels,
    columns: predicted) and each label's accuracy (None for a label without examples)."""

    split: str
    examples: int
    accuracy: float
    loss: float
    labels: list[str]
    confusion_matrix: list[list[int]]
    per_class_accuracy: dict[str, float | None]

    def as_json(self) -> dict:
        """The evaluation report's fields, in this order."""
        return asdict(self)


class Serving(NamedTuple):
    """A loaded SavedModel's signatures (by name, `serving_default` among them) and its `ServingIdentity`."""

    signatures: Any
    identity: ServingIdentity

    @property
    def default(self) -> Any:
        """The `serving_default` signature."""
        return self.signatures["serving_default"]


def load_serving(model_dir: str) -> Serving:
    """The SavedModel's signatures (ModelError without `serving_default`) and its `ServingIdentity`."""
    import tensorflow as tf

    if not tf.io.gfile.exists(f"{model_dir}/saved_model.pb"):
        raise ModelError(f"no SavedModel at {model_dir} (saved_model.pb missing)")
    signatures = tf.saved_model.load(model_dir).signatures
    signature = signatures.get("serving_default")
    if signature is None:
        raise ModelError(f"the SavedModel at {model_dir} has no serving_default signature")
    labels = None
    if tf.io.gfile.exists(f"{model_dir}/{LABELS_FILE}"):
        with tf.io.gfile.GFile(f"{model_dir}/{LABELS_FILE}") as f:
            labels = [line for line in f.read().splitlines() if line]

    def inputs(fn) -> dict:
        return {
            name: f"{spec.dtype.name}{[d for d in spec.shape.as_list()]}"
            for name, spec in fn.structured_input_signature[1].items()
        }

    others = {name: inputs(fn) for name, fn in signatures.items() if name != "serving_default"}
    return Serving(signatures, ServingIdentity(labels, inputs(signature), others))


def evaluate_signature(signature, data_dir: str, split: str, batch_size: int) -> Evaluation:
    import tensorflow as tf

    from trainer import data

    stats = data.load_stats(data_dir)
    input_name = next(iter(signature.structured_input_signature[1]))
    num_classes = len(stats["labels"])
    matrix = np.zeros((num_classes, num_classes), np.int64)
    loss_sum, count = 0.0, 0
    for inputs, labels in data.make_dataset(data_dir, split, stats, batch_size, training=False):
        probabilities = signature(**{input_name: tf.cast(inputs, tf.float32)})["probabilities"].numpy()
        if probabilities.shape[-1] != num_classes:
            raise ModelError(f"model outputs {probabilities.shape[-1]} classes, the data has {num_classes}")
        labels = labels.numpy()
        predicted = probabilities.argmax(-1)
        np.add.at(matrix, (labels, predicted), 1)
        loss_sum += float(-np.log(np.clip(probabilities[np.arange(len(labels)), labels], 1e-12, 1.0)).sum())
        count += len(labels)
    per_class = {
        label: float(matrix[i, i] / row) if (row := matrix[i].sum()) else None
        for i, label in enumerate(stats["labels"])
    }
    return Evaluation(
        split=split,
        examples=count,
        accuracy=float(np.trace(matrix) / count),
        loss=loss_sum / count,
        labels=stats["labels"],
        confusion_matrix=matrix.tolist(),
        per_class_accuracy=per_class,
    )


def evaluate_saved_model(model_dir: str, data_dir: str, split: str = "test", batch_size: int = 256) -> Evaluation:
    """Accuracy, cross-entropy loss and confusion matrix of a SavedModel's `serving_default` on a split."""
    return evaluate_signature(load_serving(model_dir).default, data_dir, split, batch_size)


def check_compatible(candidate: ServingIdentity, champion: ServingIdentity, champion_name: str) -> None:
    """Fail when the champion answers with other labels or takes another serving input than the candidate."""
    problems = []
    if champion.labels is not None and candidate.labels is not None and champion.labels != candidate.labels:
        problems.append(f"labels {champion.labels} (this model: {candidate.labels})")
    if champion.inputs != candidate.inputs:
        problems.append(f"serving input {champion.inputs} (this model: {candidate.inputs})")
    for name, inputs in champion.signatures.items():  # extra signatures of the candidate are fine
        theirs = candidate.signatures.get(name)
        if theirs != inputs:
            problems.append(
                f"signature {name!r} with input {inputs} (this model: "
                f"{'no such signature' if theirs is None else theirs})"
            )
    if problems:
        raise different_model(champion_name, problems)


def different_model(champion_name: str, problems: list[str]) -> ModelError:
    """The error of a champion that is another model than the candidate (`problems`: what it has instead)."""
    return ModelError(
        f"{champion_name} is a different model: it has {' and '.join(problems)}. Publishing this model as its "
        "next version would change what its clients get: use another model name for this data (the model_name "
        "parameter; on Vertex AI platform.model_display_name)"
    )
