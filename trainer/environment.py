"""The environment the trainer runs in, defined once for every launcher: local worker processes and trials, the
Katib trials, the TFJob, the Vertex AI worker pools and the local runs."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# Set by a process that runs trainings one after another in itself (the study's warm trial runner): the trainer then
# returns from `main` when training ends instead of ending the process (callbacks.FinishAndExit).
IN_PROCESS_ENV = "TFPIPE_TRAINER_IN_PROCESS"

# Keras 3 cannot fit under MultiWorkerMirroredStrategy (keras#20585): tf-keras, chosen before TensorFlow loads.
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}


def use_legacy_keras(environ: MutableMapping[str, str] = os.environ) -> None:
    """Choose tf-keras in this process and the ones it starts, unless the environment chose already."""
    for name, value in LEGACY_KERAS.items():
        environ.setdefault(name, value)


# The folder of the best epoch's checkpoint under a job's checkpoint folder (`trainer.checkpoints`).
BEST_CHECKPOINT = "best"
CHECKPOINT_RECORD = "checkpoint.json"  # a kept checkpoint folder's record, written after its checkpoint


def best_checkpoint(base: str) -> str:
    """The kept best checkpoint of a job or trial writing under `base` (see `output_dirs`)."""
    return f"{output_dirs(base)['AIP_CHECKPOINT_DIR']}/{BEST_CHECKPOINT}"


def output_dirs(base: str, model_dir: str = "") -> dict[str, str]:
    """Vertex AI's output variables of a job or trial writing under `base` (`model_dir`: the model elsewhere)."""
    return {
        "AIP_MODEL_DIR": model_dir or f"{base}/model",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs",
    }
