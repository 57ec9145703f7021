"""Self-hosted model upload: publish the blessed SavedModel as the next version of the model repository."""

from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output


def version_metadata(
    evaluation: dict, stats: dict, training: dict, run_id: str, source_commit: str, source_model_uri: str = ""
) -> dict:
    """What is recorded beside a version: metrics, data stats, parameters, pipeline run id, source commit and the
    artifact the version was copied from (the gate recognises a cached training of the champion by it)."""
    return {
        "metrics": {
            "test_accuracy": evaluation["accuracy"],
            "test_loss": evaluation["loss"],
            "val_accuracy": training.get("val_accuracy"),
        },
        "gate": {"blessed": evaluation["blessed"], "reason": evaluation["reason"]},
        "data": {
            "source": stats["source"],
            "examples": stats["examples"],
            "labels": stats["labels"],
            "input_shape": stats["input_shape"],
            "splits": {s: v["examples"] for s, v in stats["splits"].items()},
        },
        "parameters": training.get("hyperparameters", {}),
        "pipeline_run_id": run_id,
        "source_commit": source_commit,
        "source_model_uri": source_model_uri,
    }


def publish_model(
    model: Input[Model],
    dataset: Input[Dataset],
    training: Input[Artifact],
    evaluation: Input[Artifact],
    model_repository: str,
    model_name: str,
    run_id: str,
    source_commit: str,
    published: Output[Model],
) -> NamedTuple("Outputs", [("version", int), ("version_path", str)]):
    """KFP step (self-hosted): write the next repository version with its metadata.

    Args:
        model: The blessed SavedModel.
        dataset: The prepared data (its stats and fingerprint go into the version's metadata).
        training: The training step's output (metrics.json, history.jsonl).
        evaluation: The evaluation gate's report.
        model_repository: The versioned model repository.
        model_name: The model's name in the repository.
        run_id: The pipeline run's name, recorded with the version.
        source_commit: Commit of the code that trained the model, recorded with the version.
    """
    import json
    from collections import namedtuple

    from components.lib.deploy.model_repository import publish
    from components.publish_model import version_metadata
    from core import names

    names.model_name(model_name)  # run parameters can be set without the CLI (the KFP UI, a recurring run)
    if model_repository:
        names.location(model_repository, "model_repository")

    def load(path):
        with open(path) as f:
            return json.load(f)

    metadata = version_metadata(
        load(evaluation.path),
        load(f"{dataset.path}/stats.json"),
        load(f"{training.path}/metrics.json"),
        run_id,
        source_commit,
        model.uri,
    )
    version = publish(model.path, model_repository, model_name, metadata)
    published.metadata.update(version=version.number, path=version.path, model_name=model_name)
    with open(published.path, "w") as f:
        json.dump({"version": version.number, "path": version.path, "metadata": version.metadata}, f, indent=2)
    print(f"published {model_name} version {version.number} at {version.path}")
    Outputs = namedtuple("Outputs", ["version", "version_path"])
    return Outputs(version.number, version.path)
