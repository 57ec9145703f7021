"""Checkpoints kept under the job's checkpoint folder (`--checkpoint-dir`, `AIP_CHECKPOINT_DIR` on Vertex AI):

- `last/`: the last completed epoch's; a restarted training (a replica preempted or lost, the job retried) resumes
  after it, with the model's weights and the optimizer's state;
- `best/`: the epoch with the best `--hypertune-metric-tag` value, by that metric's goal (`flags.METRIC_GOALS`);
  `--warm-start-from <checkpoint_dir>/best` starts another training from its weights.

Each holds one TensorFlow checkpoint, `epoch-NNNN.index` and `epoch-NNNN.data-*` (the model's weights and its
optimizer's state), and `checkpoint.json`, its record: `{"epoch", "prefix", "metric", "goal", "metrics"}`. The
record is written after the checkpoint it names and older checkpoints are removed after it, so a record always names
a complete checkpoint, also after an interrupted save. Every worker of a MultiWorkerMirroredStrategy cluster saves
`last` (saves are collective); only the chief's files land (`distribute.write_location`). An epoch that improves on
the best is copied from `last` into `best` by the chief (a copy, not a second save: one checkpoint written an epoch).
On object storage (gs://) the chief saves on local disk first and uploads the checkpoint's files: a request a file,
where TensorFlow's save in place makes dozens (temporary shards, renames as copies and deletes).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass

import tensorflow as tf
import tf_keras as keras

from trainer import distribute
from trainer.environment import BEST_CHECKPOINT as BEST, CHECKPOINT_RECORD as RECORD
from trainer.flags import METRIC_GOALS

LAST = "last"


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
    """Where a training starts: after the epochs of the kept checkpoint `last` (loaded by `restore_last`), or from
    scratch (`last` None)."""

    last: Kept | None

    @property
    def epochs(self) -> int:
        """The epochs completed before this training starts."""
        return self.last.epoch if self.last else 0


def resume_point(checkpoint_dir: str) -> Resume:
    """Where a training with this checkpoint folder starts: after the epochs of its `last` (an earlier attempt's
    last completed epoch), else from scratch."""
    return Resume(read(f"{checkpoint_dir}/{LAST}"))


def restore_last(model, resume: Resume) -> None:
    """Load `last`'s weights and optimizer state into the compiled `model` (every worker reads the same files).
    Raises CheckpointError when they do not fit the model."""
    if resume.last is not None:
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
    """At each epoch's end, save `last` and, when the epoch's `metric` beats the best so far by its goal, copy it to
    `best` (see the module's docstring). `resume`: where training started; a resumed training's best so far is the
    kept `best` of its earlier epochs."""

    def __init__(self, checkpoint_dir: str, metric: str, cluster: distribute.Cluster, resume: Resume):
        super().__init__()
        self.dir, self.metric, self.goal, self.cluster = checkpoint_dir, metric, METRIC_GOALS[metric], cluster
        best = read(f"{checkpoint_dir}/{BEST}") if resume.epochs else None
        self.best = best.value if best and best.epoch <= resume.epochs else None

    def on_epoch_end(self, epoch, logs=None):
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        prefix = f"epoch-{epoch + 1:04d}"
        final = f"{self.dir}/{LAST}"
        staged = self.cluster.is_chief and "://" in final
        where = (
            tempfile.mkdtemp(prefix="tfpipe-checkpoint-") if staged else distribute.write_location(final, self.cluster)
        )
        try:
            tf.train.Checkpoint(model=self.model).write(f"{where}/{prefix}")  # collective: every worker writes
            if staged:
                _copy(where, final, prefix)
        finally:
            if where != final:
                shutil.rmtree(where, ignore_errors=True)
        value = metrics.get(self.metric)
        better = value is not None and _better(value, self.best, self.goal)
        if better:
            self.best = value
        if not self.cluster.is_chief:
            return
        record = {"epoch": epoch + 1, "prefix": prefix, "metric": self.metric, "goal": self.goal, "metrics": metrics}
        _land(final, prefix, record)
        if better:
            _copy(final, f"{self.dir}/{BEST}", prefix)
            _land(f"{self.dir}/{BEST}", prefix, record)


def _copy(source: str, folder: str, prefix: str) -> None:
    """Copy the checkpoint `prefix`'s files from the folder `source` into `folder`."""
    tf.io.gfile.makedirs(folder)
    for path in sorted(tf.io.gfile.glob(f"{source}/{prefix}.*")):
        tf.io.gfile.copy(path, f"{folder}/{path.rsplit('/', 1)[-1]}", overwrite=True)


def _land(folder: str, prefix: str, record: dict) -> None:
    """Name the checkpoint `prefix` (complete in `folder`) in the folder's record, then remove the folder's older
    checkpoints."""
    with tf.io.gfile.GFile(f"{folder}/{RECORD}", "w") as f:
        json.dump(record, f, indent=2)
    for old in tf.io.gfile.glob(f"{folder}/epoch-*"):
        if not old.rsplit("/", 1)[-1].startswith(f"{prefix}."):
            tf.io.gfile.remove(old)
