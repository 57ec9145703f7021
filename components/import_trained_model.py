"""The Vertex custom job's trained model as a `Model` artifact, after GCPC's `CustomTrainingJobOp`."""

from typing import NamedTuple

from kfp.dsl import Artifact, Input, Metrics, Model, Output


def import_trained_model(
    job_dir: Input[Artifact],
    directory: str,
    gcp_resources: str,
    model: Output[Model],
    metrics: Output[Metrics],
    training: Output[Artifact],
) -> NamedTuple("Outputs", [("model_uri", str)]):
    """KFP step (Vertex): expose the chief's SavedModel (`<directory>/model`) and its training metrics, and record
    the job's folder as completed under the plan's `job_dir` (later runs reuse it with the cached job).

    Args:
        job_dir: The plan's base output directory (the job's `directory` lies under it).
        directory: The training job's base output directory.
        gcp_resources: The custom job's resource record (GCPC's `gcp_resources`).
    """
    import json
    import os
    import shutil
    from collections import namedtuple

    from components.lib.vertex.output_dirs import record

    root = job_dir.uri.rstrip("/")
    if not directory.startswith(f"{root}/"):
        raise ValueError(f"the job's folder {directory} is not under its plan's {root}")
    local = os.path.join(job_dir.path, directory[len(root) + 1 :])
    if not os.path.isfile(os.path.join(local, "model", "saved_model.pb")):
        raise FileNotFoundError(f"the training job {gcp_resources} left no SavedModel in {directory}/model")
    model.uri = f"{directory}/model"
    os.makedirs(training.path, exist_ok=True)
    for name in ("metrics.json", "history.jsonl"):
        shutil.copy(os.path.join(local, name), os.path.join(training.path, name))
    with open(os.path.join(local, "metrics.json")) as f:
        summary = json.load(f)
    record(root, directory, gcp_resources)
    for key in ("val_accuracy", "val_loss", "train_accuracy", "train_loss"):
        metrics.log_metric(key, summary[key])
    model.metadata.update(framework="tensorflow", format="saved_model", val_accuracy=summary["val_accuracy"])
    Outputs = namedtuple("Outputs", ["model_uri"])
    return Outputs(model.uri)
