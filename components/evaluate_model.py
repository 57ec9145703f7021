"""Evaluation gate: test-split metrics of the exported SavedModel and the blessing decision.

Blessed when test accuracy clears an absolute threshold and is no worse than the champion's minus a tolerance. The
champion is found by a separate, never-cached step of each target (`find_champion`: the model repository's newest
version on kubeflow/local, the registry version holding the champion alias on Vertex) and re-evaluated here on this
run's test split with the same code as the candidate, so the two accuracies are comparable. A champion with other
labels or another serving input (its `serving_default` inputs, or a signature its clients may call that the
candidate lacks or takes differently, e.g. `serving_image_bytes`) is a different model: the gate fails instead of
comparing. Progress lines (`core.progress`, stage `evaluate`) say which model is being evaluated.

The gate also saves the candidate's smoke checks (`components.lib.deploy.smoke.serving_checks`: the test split's
first examples and the candidate's class ids per signature) for the Vertex AI deploy's check through the endpoint,
which thus needs neither TensorFlow nor the SavedModel (a candidate whose `serving_default` has no `class_id` output
fails the gate); a cache hit returns the checks of the same candidate.
"""

from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components.lib.deploy.smoke import serving_checks, write_checks
from components.lib.evaluation import ModelError, check_compatible, evaluate_signature, load_serving
from core import progress, storage


def decide(
    accuracy: float,
    threshold: float,
    champion_accuracy: float | None,
    tolerance: float,
    champion_name: str = "champion",
) -> tuple[bool, str]:
    if accuracy < threshold:
        return False, f"test accuracy {accuracy:.4f} is below the threshold {threshold:.4f}"
    if champion_accuracy is None:
        return True, f"test accuracy {accuracy:.4f} clears the threshold {threshold:.4f}; no champion yet"
    if accuracy < champion_accuracy - tolerance:
        return False, (
            f"test accuracy {accuracy:.4f} is worse than {champion_name}'s {champion_accuracy:.4f} "
            f"minus the tolerance {tolerance:.4f}"
        )
    return True, (
        f"test accuracy {accuracy:.4f} clears the threshold {threshold:.4f} and {champion_name}'s "
        f"{champion_accuracy:.4f} minus the tolerance {tolerance:.4f}"
    )


def same_artifacts(a: str, b: str) -> bool:
    """Whether two model URIs name the same folder (`/gcs/BUCKET/...` is Vertex's FUSE path of `gs://BUCKET/...`)."""

    def norm(uri: str) -> str:
        uri = uri.rstrip("/")
        return "gs://" + uri[len("/gcs/") :] if uri.startswith("/gcs/") else uri

    return bool(a and b) and norm(a) == norm(b)


def evaluate(
    model_dir: str,
    data_dir: str,
    accuracy_threshold: float,
    champion_path: str = "",
    champion_name: str = "",
    champion_tolerance: float = 0.01,
    model_uri: str = "",
    champion_model_uri: str = "",
    smoke_checks: str = "",
) -> dict:
    """Evaluate the candidate, compare with the champion (`champion_path`: its SavedModel, local or gs://; "" when
    there is none), return the step's report: the candidate's `Evaluation` fields, then `blessed`, `reason`,
    `champion`, `threshold` and `tolerance`. `model_uri` / `champion_model_uri`: the
    artifacts each was trained into; equal when the candidate already is the champion (a cached training).
    `smoke_checks`: where to save the candidate's smoke checks (`smoke.write_checks`; "": nowhere)."""
    if not 0 <= accuracy_threshold <= 1:
        raise ModelError(f"accuracy_threshold must be in [0, 1], got {accuracy_threshold}")
    if champion_tolerance < 0:
        raise ModelError(f"champion_tolerance must be >= 0, got {champion_tolerance}")
    comparisons = 2 if champion_path else 1
    progress.emit(
        "evaluate", "candidate", "evaluating the candidate on the test split", done=0, total=comparisons, unit="models"
    )
    serving = load_serving(model_dir)
    candidate = evaluate_signature(serving.default, data_dir, "test", 256)
    if smoke_checks:
        write_checks(serving_checks(serving.signatures, data_dir), smoke_checks)
    champion_info, champion_accuracy = None, None
    name = champion_name or "the champion"
    if champion_path:
        progress.emit(
            "evaluate",
            "champion",
            f"candidate test accuracy {candidate.accuracy:.4f}; re-evaluating {name} on this test split",
            done=1,
            total=comparisons,
            unit="models",
            accuracy=candidate.accuracy,
        )
        with storage.staged(champion_path) as local_copy:  # gs://: through google-cloud-storage, like the rest
            champion = load_serving(local_copy)
            check_compatible(serving.identity, champion.identity, name)
            champion_accuracy = evaluate_signature(champion.default, data_dir, "test", 256).accuracy
        champion_info = {
            "name": name,
            "path": champion_path,
            "accuracy": champion_accuracy,
            "source": "re-evaluated on this test split",
        }
    if champion_path and same_artifacts(model_uri, champion_model_uri):
        blessed, reason = (
            False,
            (
                f"the candidate is {name} itself (same artifacts {model_uri}: the training was "
                "a cache hit on unchanged data); nothing new to publish"
            ),
        )
    else:
        blessed, reason = decide(candidate.accuracy, accuracy_threshold, champion_accuracy, champion_tolerance, name)
    return {
        **candidate.as_json(),
        "blessed": blessed,
        "reason": reason,
        "champion": champion_info,
        "threshold": accuracy_threshold,
        "tolerance": champion_tolerance,
    }


def evaluate_model(
    model: Input[Model],
    dataset: Input[Dataset],
    accuracy_threshold: float,
    champion_tolerance: float,
    champion_path: str,
    champion_name: str,
    champion_model_uri: str,
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    evaluation: Output[Artifact],
    smoke_checks: Output[Artifact],
) -> bool:
    """KFP step: evaluate on the test split against the champion (from the target's `find_champion` step), log
    Metrics/ClassificationMetrics, save the candidate's smoke checks in `smoke_checks` (`smoke.write_checks`: the
    Vertex AI deploy's check); returns the blessing (the reason is in the `evaluation` artifact and its metadata).

    Args:
        model: The trained SavedModel.
        dataset: The prepared data (shards per split, stats.json).
        accuracy_threshold: The test accuracy the model must reach to be blessed.
        champion_tolerance: How far below the champion's test accuracy the model may be.
        champion_path: The champion's SavedModel (empty: no champion).
        champion_name: The champion's name in the gate's reason.
        champion_model_uri: The champion's model URI (a candidate with the same artifacts is not blessed).
    """
    from core.fast_exit import skip_exit_collection

    skip_exit_collection()
    import json

    from components.evaluate_model import evaluate

    report = evaluate(
        model.path,
        dataset.path,
        accuracy_threshold,
        champion_path,
        champion_name,
        champion_tolerance,
        model.uri,
        champion_model_uri,
        smoke_checks.path,
    )
    metrics.log_metric("accuracy", report["accuracy"])
    metrics.log_metric("loss", report["loss"])
    metrics.log_metric("blessed", float(report["blessed"]))
    classification_metrics.log_confusion_matrix(report["labels"], report["confusion_matrix"])
    with open(evaluation.path, "w") as f:
        json.dump(report, f, indent=2)
    evaluation.metadata.update(blessed=report["blessed"], reason=report["reason"], accuracy=report["accuracy"])
    print(("BLESSED: " if report["blessed"] else "NOT BLESSED: ") + report["reason"])
    return report["blessed"]
