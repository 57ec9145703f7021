"""Evaluation gate: test-split metrics of the exported SavedModel and the blessing decision.

Blessed when test accuracy clears an absolute threshold and is no worse than the champion's (the newest version
in the model repository, re-evaluated on the same test split) minus a tolerance.
"""
import numpy as np
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components import model_repository, storage


class ModelError(ValueError):
    """The model cannot be evaluated (user-facing message)."""


def evaluate_saved_model(model_dir: str, data_dir: str, split: str = "test", batch_size: int = 256) -> dict:
    """Accuracy, cross-entropy loss and confusion matrix of a SavedModel's `serving_default` on a split."""
    import tensorflow as tf

    from trainer import data

    if not tf.io.gfile.exists(f"{model_dir}/saved_model.pb"):
        raise ModelError(f"no SavedModel at {model_dir} (saved_model.pb missing)")
    stats = data.load_stats(data_dir)
    signature = tf.saved_model.load(model_dir).signatures.get("serving_default")
    if signature is None:
        raise ModelError(f"the SavedModel at {model_dir} has no serving_default signature")
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
    per_class = {label: float(matrix[i, i] / row) if (row := matrix[i].sum()) else None
                 for i, label in enumerate(stats["labels"])}
    return {
        "split": split,
        "examples": count,
        "accuracy": float(np.trace(matrix) / count),
        "loss": loss_sum / count,
        "labels": stats["labels"],
        "confusion_matrix": matrix.tolist(),
        "per_class_accuracy": per_class,
    }


def decide(accuracy: float, threshold: float, champion_accuracy: float | None, tolerance: float,
           champion_name: str = "champion") -> tuple[bool, str]:
    if accuracy < threshold:
        return False, f"test accuracy {accuracy:.4f} is below the threshold {threshold:.4f}"
    if champion_accuracy is None:
        return True, f"test accuracy {accuracy:.4f} clears the threshold {threshold:.4f}; no champion yet"
    if accuracy < champion_accuracy - tolerance:
        return False, (f"test accuracy {accuracy:.4f} is worse than {champion_name}'s {champion_accuracy:.4f} "
                       f"minus the tolerance {tolerance:.4f}")
    return True, (f"test accuracy {accuracy:.4f} clears the threshold {threshold:.4f} and {champion_name}'s "
                  f"{champion_accuracy:.4f} minus the tolerance {tolerance:.4f}")


def evaluate(model_dir: str, data_dir: str, accuracy_threshold: float, model_repository_path: str = "",
             model_name: str = "model", champion_tolerance: float = 0.01) -> dict:
    """Evaluate the candidate, compare with the champion, return the report with `blessed` and `reason`."""
    if not 0 <= accuracy_threshold <= 1:
        raise ModelError(f"accuracy_threshold must be in [0, 1], got {accuracy_threshold}")
    if champion_tolerance < 0:
        raise ModelError(f"champion_tolerance must be >= 0, got {champion_tolerance}")
    report = evaluate_saved_model(model_dir, data_dir)
    champ = model_repository.champion(model_repository_path, model_name)
    champion_info, champion_accuracy = None, None
    if champ is not None:
        try:
            with storage.staged(champ.path) as local_copy:  # gs://: through google-cloud-storage, like the rest
                champion_accuracy = evaluate_saved_model(local_copy, data_dir)["accuracy"]
            source = "re-evaluated on this test split"
        except Exception as e:  # incompatible champion: fall back to its recorded metric
            champion_accuracy = champ.metadata.get("metrics", {}).get("test_accuracy")
            source = f"recorded metric (re-evaluation failed: {e})"
        champion_info = {"version": champ.number, "path": champ.path, "accuracy": champion_accuracy,
                         "source": source}
    blessed, reason = decide(report["accuracy"], accuracy_threshold, champion_accuracy, champion_tolerance,
                             f"champion v{champ.number}" if champ else "champion")
    report.update(blessed=blessed, reason=reason, champion=champion_info, threshold=accuracy_threshold,
                  tolerance=champion_tolerance)
    return report


def evaluate_model(
    model: Input[Model],
    dataset: Input[Dataset],
    accuracy_threshold: float,
    champion_tolerance: float,
    model_repository: str,
    model_name: str,
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    evaluation: Output[Artifact],
) -> bool:
    """KFP step: evaluate on the test split, log Metrics/ClassificationMetrics; returns the blessing (the reason
    is in the `evaluation` artifact and its metadata)."""
    import json

    from components.evaluate_model import evaluate

    report = evaluate(model.path, dataset.path, accuracy_threshold, model_repository, model_name, champion_tolerance)
    metrics.log_metric("accuracy", report["accuracy"])
    metrics.log_metric("loss", report["loss"])
    metrics.log_metric("blessed", float(report["blessed"]))
    classification_metrics.log_confusion_matrix(report["labels"], report["confusion_matrix"])
    with open(evaluation.path, "w") as f:
        json.dump(report, f, indent=2)
    evaluation.metadata.update(blessed=report["blessed"], reason=report["reason"], accuracy=report["accuracy"])
    print(("BLESSED: " if report["blessed"] else "NOT BLESSED: ") + report["reason"])
    return report["blessed"]
