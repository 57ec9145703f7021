"""Checkpoints kept after training, under the job's checkpoint folder (`--checkpoint-dir`, `AIP_CHECKPOINT_DIR` on
Vertex AI), beside the `backup/` that `BackupAndRestore` removes after a successful run:

- `last/`: the last completed epoch's; a restarted training whose backup is gone or incomplete resumes from it;
- `best/`: the epoch with the best `--hypertune-metric-tag` value, by that metric's goal (`flags.METRIC_GOALS`);
  `--warm-start-from <checkpoint_dir>/best` starts another training from its weights.

Each holds one TensorFlow checkpoint, `epoch-NNNN.index` and `epoch-NNNN.data-*` (the model's weights and its
optimizer's state), and `checkpoint.json`, its record: `{"epoch", "prefix", "metric", "goal", "metrics"}`. The
record is written after the checkpoint it names and older checkpoints are removed after it, so a record always names
a complete checkpoint, also after an interrupted save. Every worker of a MultiWorkerMirroredStrategy cluster saves
(saves are collective); only the chief's files land (`distribute.write_location`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import tensorflow as tf
import tf_keras as keras

from trainer import distribute
from trainer.environment import BEST_CHECKPOINT as BEST, CHECKPOINT_RECORD as RECORD
from trainer.flags import METRIC_GOALS

LAST = "last"
BACKUP = "backup"
# Where BackupAndRestore's CheckpointManager keeps its checkpoints under the backup folder (tf-keras's
# WorkerTrainingState) and the variable holding the index of the epoch each backup was saved at.
BACKUP_CHECKPOINTS = "chief"
BACKUP_EPOCH = "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointError(ValueError):
    """A kept checkpoint cannot start this model: `last` on a resume, or `--warm-start-from`'s (user-facing
    message)."""


@dataclass(frozen=True)
class Kept:
    """A kept checkpoint: its folder, the number of epochs completed when it was saved, its file prefix (in the
    folder) and the epoch's metrics."""

    directory: str
    epoch: int
    prefix: str
    metric: str
    goal: str
    metrics: dict

    @property
    def path(self) -> str:
        """The checkpoint's path prefix, as `tf.train.Checkpoint.read` takes it."""
        return f"{self.directory}/{self.prefix}"

    @property
    def value(self) -> float | None:
        return self.metrics.get(self.metric)


def read(directory: str) -> Kept | None:
    """The checkpoint kept in `directory` (its record's), None when it has none."""
    path = f"{directory.rstrip('/')}/{RECORD}"
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        record = json.load(f)
    return Kept(directory.rstrip("/"), **record)


@dataclass(frozen=True)
class Resume:
    """Where a training starts: `source` "backup" (BackupAndRestore restores the state itself), "last" (the kept
    checkpoint `last`, loaded by `restore_last`) or "" (from scratch), after `epochs` completed epochs."""

    source: str
    epochs: int
    last: Kept | None = None

    @property
    def described(self) -> str:
        """What training resumes from, in the progress line's words."""
        return f"the last checkpoint ({self.last.path})" if self.last else "the backup"


def backup_epochs(backup_dir: str) -> int | None:
    """The epochs completed at the newest complete backup in `backup_dir`, None when there is none (no backup, or
    only an incomplete one: its CheckpointManager names a checkpoint only once it is written)."""
    latest = tf.train.latest_checkpoint(f"{backup_dir}/{BACKUP_CHECKPOINTS}")
    if latest is None:
        return None
    return int(tf.train.load_checkpoint(latest).get_tensor(BACKUP_EPOCH)) + 1


def resume_point(checkpoint_dir: str) -> Resume:
    """Where a training with this checkpoint folder starts: from a complete backup when there is one (an attempt
    interrupted mid-training); else after the epochs of `last` (an attempt whose backup is gone: removed after its
    last epoch, or never completed); else from scratch."""
    epochs = backup_epochs(f"{checkpoint_dir}/{BACKUP}")
    if epochs is not None:
        return Resume("backup", epochs)
    last = read(f"{checkpoint_dir}/{LAST}")
    return Resume("last", last.epoch, last) if last else Resume("", 0)


def restore_last(model, resume: Resume) -> None:
    """Load `last`'s weights and optimizer state into the compiled `model` (every worker reads the same files).
    Raises CheckpointError when they do not fit the model."""
    if resume.source == "last" and resume.last is not None:
        try:
            tf.train.Checkpoint(model=model).read(resume.last.path).assert_existing_objects_matched()
        except (AssertionError, ValueError) as e:
            raise CheckpointError(
                f"cannot resume from {resume.last.path}: its weights do not fit this model ({_first_line(e)}); "
                "resume with the same --model and architecture hyperparameters, or give a new --job-dir"
            ) from None


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__


def warm_start(model, path: str) -> Kept:
    """Set the compiled `model`'s weights to those of the kept checkpoint in folder `path` (e.g. a trial's
    `<checkpoint_dir>/best`), leaving its optimizer as compiled. Raises CheckpointError when the folder holds no kept
    checkpoint or its weights do not fit the model's layers."""
    kept = read(path)
    if kept is None:
        raise CheckpointError(f"--warm-start-from {path}: no {RECORD} there; give a kept checkpoint folder (…/best)")
    clone = keras.models.clone_model(model)  # uncompiled: the checkpoint's optimizer state stays unread
    try:
        tf.train.Checkpoint(model=clone).read(kept.path).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise CheckpointError(
            f"--warm-start-from {path}: its weights do not fit this model ({_first_line(e)}); warm-start the same "
            "--model with the same architecture hyperparameters"
        ) from None
    model.set_weights(clone.get_weights())
    return kept


def _better(value: float, than: float | None, goal: str) -> bool:
    return than is None or (value < than if goal == "minimize" else value > than)


class KeptCheckpoints(keras.callbacks.Callback):
    """At each epoch's end, save `last` and, when the epoch's `metric` beats the best so far by its goal, `best`
    (see the module's docstring). `resume`: where training started; a resumed training's best so far is the kept
    `best` of its earlier epochs."""

    def __init__(self, checkpoint_dir: str, metric: str, cluster: distribute.Cluster, resume: Resume):
        super().__init__()
        self.dir, self.metric, self.goal, self.cluster = checkpoint_dir, metric, METRIC_GOALS[metric], cluster
        best = read(f"{checkpoint_dir}/{BEST}") if resume.epochs else None
        self.best = best.value if best and best.epoch <= resume.epochs else None

    def on_epoch_end(self, epoch, logs=None):
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        self._save(LAST, epoch + 1, metrics)
        value = metrics.get(self.metric)
        if value is not None and _better(value, self.best, self.goal):
            self.best = value
            self._save(BEST, epoch + 1, metrics)

    def _save(self, name: str, epoch: int, metrics: dict) -> None:
        final = f"{self.dir}/{name}"
        where = distribute.write_location(final, self.cluster)
        prefix = f"epoch-{epoch:04d}"
        tf.train.Checkpoint(model=self.model).write(f"{where}/{prefix}")  # collective: every worker writes
        distribute.discard(where, final)
        if not self.cluster.is_chief:
            return
        record = {"epoch": epoch, "prefix": prefix, "metric": self.metric, "goal": self.goal, "metrics": metrics}
        with tf.io.gfile.GFile(f"{final}/{RECORD}", "w") as f:
            json.dump(record, f, indent=2)
        for old in tf.io.gfile.glob(f"{final}/epoch-*"):
            if not old.rsplit("/", 1)[-1].startswith(f"{prefix}."):
                tf.io.gfile.remove(old)
