"""Vertex AI training step helpers around GCPC's `CustomTrainingJobOp`.

`plan_vertex_training` turns the runtime parameters into worker pool specs (pool 0: 1 chief; pool 1: N−1 workers,
all running `python -m trainer.task` from the trainer image) and a base output directory; after the job,
`import_trained_model` checks the chief's SavedModel and exposes it as a `Model` artifact.
"""
from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.train_model import trainer_flags


def worker_pool_specs(image: str, data_uri: str, workers: int, machine_type: str, hyperparameters: dict,
                      accelerator_type: str = "", accelerator_count: int = 0) -> list[dict]:
    """CustomJob worker pools for `workers` training processes (chief + workers-1)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    machine_spec: dict[str, str | int] = {"machine_type": machine_type}
    if accelerator_type and accelerator_count:
        machine_spec.update(accelerator_type=accelerator_type, accelerator_count=accelerator_count)
    container = {
        "image_uri": image,
        "command": ["python", "-m", "trainer.task"],
        "args": ["--data-dir", data_uri, *trainer_flags(hyperparameters)],
        "env": [{"name": "TF_USE_LEGACY_KERAS", "value": "1"}],
    }
    pool = {"machine_spec": machine_spec, "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 100},
            "container_spec": container}
    specs = [{**pool, "replica_count": 1}]
    if workers > 1:
        specs.append({**pool, "replica_count": workers - 1})
    return specs


def job_display_name(run_name: str, purpose: str) -> str:
    """`<run_name>-<purpose>`, the run's name shortened to fit Vertex's 128-character display names."""
    suffix = f"-{purpose}"
    return run_name[:128 - len(suffix)] + suffix


def plan_vertex_training(
    dataset: Input[Dataset],
    trainer_image: str,
    machine_type: str,
    accelerator_type: str,
    accelerator_count: int,
    workers: int,
    epochs: int,
    hyperparameters: dict,
    tuned_parameters: list,
    model_builder: str,
    run_name: str,
    purpose: str,
    job_dir: Output[Artifact],
) -> NamedTuple("Outputs", [("worker_pool_specs", list), ("base_output_directory", str), ("display_name", str)]):
    """KFP step (Vertex): worker pool specs, the job's base output directory (AIP_MODEL_DIR = <it>/model) and its
    display name (`<run_name>-<purpose>`). The trainer trains `model_builder`'s model; `tuned_parameters` are left
    out of the flags: a tuning job appends each trial's values itself.

    Args:
        dataset: The prepared data (shards per split, stats.json).
        trainer_image: The trainer image the worker pools run.
        machine_type: Machine type of every worker.
        accelerator_type: Accelerator of every worker (empty: none).
        accelerator_count: Accelerators per worker.
        workers: Workers: pool 0 holds the chief, pool 1 the others.
        epochs: Training epochs.
        hyperparameters: Trainer flags by name with underscores.
        tuned_parameters: Parameters a tuning job sets per trial (left out of the flags).
        run_name: The pipeline run's name, part of the job's display name.
        purpose: train or tune: the display name's suffix.
        model_builder: The network to train: `package.module:function` (the config's trainer.model).
    """
    from collections import namedtuple

    from components.vertex_training import job_display_name, worker_pool_specs

    fixed = {k: v for k, v in hyperparameters.items() if k not in tuned_parameters}
    flags = {"model": model_builder, **fixed, "epochs": epochs}
    specs = worker_pool_specs(trainer_image, dataset.uri, workers, machine_type, flags,
                              accelerator_type, accelerator_count)
    Outputs = namedtuple("Outputs", ["worker_pool_specs", "base_output_directory", "display_name"])
    return Outputs(
        specs, job_dir.uri, job_display_name(run_name, purpose))


def default_hyperparameters(batch_size: int, learning_rate: float) -> dict:
    """KFP step (Vertex): the pipeline's own hyperparameters (used as they are when tuning is off).

    Args:
        batch_size: The pipeline's batch size per replica.
        learning_rate: The pipeline's learning rate.
    """
    return {"batch_size": batch_size, "learning_rate": learning_rate}


def merge_hyperparameters(defaults: dict, best: dict) -> dict:
    """KFP step (Vertex): the pipeline's hyperparameters overridden by the best trial's values.

    Args:
        defaults: The pipeline's hyperparameters.
        best: The best trial's parameter values.
    """
    return {**defaults, **best}


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
