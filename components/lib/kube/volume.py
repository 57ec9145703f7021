"""The run folders of the shared volume (the claim every Kubeflow step mounts): a run's copy of its data set, which
the tuning and training steps share, the Katib study's folder (its trials', then the best trial's kept checkpoint the
training warm-starts from), and their release once the job's outputs are in the step's artifacts."""

import contextlib
import os
import shutil

from components.lib.kube.api import on_volume

STAGED_DATASET, STAGED_SOURCE = "dataset", ".dataset-source"  # a run folder's copy of the data set, and its source
STUDY_FOLDER, KEPT_CHECKPOINT = "tune-hyperparameters", "best-checkpoint"  # a run folder's Katib study, its kept folder


def study_folder(run_dir: str) -> str:
    """The Katib study's folder in a run's folder: its trials' folders (`trials/<trial>`) while it runs."""
    return os.path.join(run_dir, STUDY_FOLDER)


def kept_checkpoint(run_dir: str) -> str:
    """Where a warm-started Katib study keeps its best trial's best checkpoint for the run's training."""
    return os.path.join(study_folder(run_dir), KEPT_CHECKPOINT)


def stage_dataset(data_path: str, run_dir: str, mount_path: str) -> str:
    """The data set's directory on the shared volume: `data_path` itself when it is on the volume, else a copy in
    `<run_dir>/dataset` (made once per run and source: the tuning and training steps share it; a partial copy of
    an interrupted step is made again)."""
    if on_volume(data_path, mount_path):
        return data_path
    target = os.path.join(run_dir, STAGED_DATASET)
    marker = os.path.join(run_dir, STAGED_SOURCE)
    if os.path.isdir(target) and os.path.isfile(marker) and open(marker).read() == data_path:
        return target
    if os.path.isdir(target):
        shutil.rmtree(target)
    staging = f"{target}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(data_path, staging)
    os.rename(staging, target)
    with open(marker, "w") as f:
        f.write(data_path)
    return target


def release_run_folder(run_dir: str, staged: bool) -> None:
    """After the job's outputs are in the step's artifacts: its folder on the volume, the study's folder (the kept
    checkpoint the job started from) and, when the step copied the data set there (`staged`), that copy go, so that
    run after run the volume does not fill up."""
    shutil.rmtree(os.path.join(run_dir, "train-model"), ignore_errors=True)
    shutil.rmtree(study_folder(run_dir), ignore_errors=True)
    if staged:
        shutil.rmtree(os.path.join(run_dir, STAGED_DATASET), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(run_dir, STAGED_SOURCE))
    with contextlib.suppress(OSError):
        os.rmdir(run_dir)  # only when nothing else is left in it
