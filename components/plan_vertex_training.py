"""The Vertex AI training plan for GCPC's `CustomTrainingJobOp`.

`plan_vertex_training` turns the runtime parameters into worker pool specs (pool 0: 1 chief; pool 1: N−1 workers,
all running `python -m trainer.task` from the trainer image) and a base output directory; after the job,
the `import_trained_model` step checks the chief's SavedModel and exposes it as a `Model` artifact.
"""

from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Output

from trainer.environment import LEGACY_KERAS
from trainer.flags import TRAINER_COMMAND, command_line


def worker_pool_specs(
    image: str,
    data_uri: str,
    workers: int,
    machine_type: str,
    hyperparameters: dict,
    accelerator_type: str = "",
    accelerator_count: int = 0,
) -> list[dict]:
    """CustomJob worker pools for `workers` training processes (chief + workers-1)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    machine_spec: dict[str, str | int] = {"machine_type": machine_type}
    if accelerator_type and accelerator_count:
        machine_spec.update(accelerator_type=accelerator_type, accelerator_count=accelerator_count)
    container = {
        "image_uri": image,
        "command": list(TRAINER_COMMAND),
        "args": command_line(hyperparameters, data_dir=data_uri),
        "env": [{"name": name, "value": value} for name, value in LEGACY_KERAS.items()],
    }
    pool = {
        "machine_spec": machine_spec,
        "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 100},
        "container_spec": container,
    }
    specs = [{**pool, "replica_count": 1}]
    if workers > 1:
        specs.append({**pool, "replica_count": workers - 1})
    return specs


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
    batch_workers: int,
    trainer: dict,
    pipeline_name: str,
    purpose: str,
    job_settings: dict,
    job_dir: Output[Artifact],
) -> NamedTuple("Outputs", [("worker_pool_specs", list), ("base_output_directory", str), ("display_name", str)]):
    """KFP step (Vertex): worker pool specs, the root of the job's output folders and its display name
    (`<pipeline_name>-<purpose>`). The trainer trains `trainer`'s model; `tuned_parameters` are left out of
    the flags (the fixed values included): a tuning job appends each trial's values itself. Nothing here is unique to a run (the run's name
    would be): on unchanged inputs and `job_settings` Vertex serves this step from its cache, with the same root,
    so that the job after it, in the folder `claim_output_directory` gives it there, is served from the cache too.

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
        batch_workers: Workers whose global batch it trains at (a tuning job's: the final training's; 0: its own).
        pipeline_name: The pipeline's name, part of the job's display name.
        purpose: train or tune: the display name's suffix.
        job_settings: What the job gets besides the plan (identity, labels, study...): read by nothing here, part
            of this step's cache key, so that a job with other settings gets a root of its own.
        trainer: What the trainer trains: `TrainerSetup` as a dict (the config's trainer section: the model builder,
            mixed precision, fixed hyperparameter values).
    """
    from collections import namedtuple

    from components.plan_vertex_training import worker_pool_specs
    from core.names import job_display_name
    from trainer.flags import TrainerSetup

    fixed = {k: v for k, v in hyperparameters.items() if k not in tuned_parameters}
    flags = {
        **TrainerSetup.from_dict(trainer).flags(leave_out=tuned_parameters),
        **fixed,
        "epochs": epochs,
        **({"batch_workers": batch_workers} if batch_workers else {}),
    }
    specs = worker_pool_specs(
        trainer_image, dataset.uri, workers, machine_type, flags, accelerator_type, accelerator_count
    )
    Outputs = namedtuple("Outputs", ["worker_pool_specs", "base_output_directory", "display_name"])
    return Outputs(specs, job_dir.uri, job_display_name(pipeline_name, purpose))
