"""The Vertex custom job's trained model as a `Model` artifact, after GCPC's `CustomTrainingJobOp`."""

from typing import NamedTuple

from kfp.dsl import Artifact, Input, Metrics, Model, Output


def import_trained_model(
    job_dir: Input[Artifact],
    gcp_resources: str,
    model: Output[Model],
    metrics: Output[Metrics],
    training: Output[Artifact],
) -> NamedTuple("Outputs", [("model_uri", str)]):
    """KFP step (Vertex): expose the chief's SavedModel (`<job_dir>/model`) and its training metrics.

    Args:
        job_dir: The training job's base output directory.
        gcp_resources: The custom job's resource record (GCPC's `gcp_resources`).
    """
    import json
    import os
    import shutil
    from collections import namedtuple

    if not os.path.isfile(os.path.join(job_dir.path, "model", "saved_model.pb")):
        raise FileNotFoundError(f"the training job {gcp_resources} left no SavedModel in {job_dir.uri}/model")
    model.uri = f"{job_dir.uri.rstrip('/')}/model"
    os.makedirs(training.path, exist_ok=True)
    for name in ("metrics.json", "history.jsonl"):
        shutil.copy(os.path.join(job_dir.path, name), os.path.join(training.path, name))
    with open(os.path.join(job_dir.path, "metrics.json")) as f:
        summary = json.load(f)
    for key in ("val_accuracy", "val_loss", "train_accuracy", "train_loss"):
        metrics.log_metric(key, summary[key])
    model.metadata.update(framework="tensorflow", format="saved_model", val_accuracy=summary["val_accuracy"])
    Outputs = namedtuple("Outputs", ["model_uri"])
    return Outputs(model.uri)
