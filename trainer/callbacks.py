"""Training callbacks: per-epoch history (survives restarts), hypertune metric reports and progress lines."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

import hypertune
import tensorflow as tf
import tf_keras as keras

from core import progress


class EpochLog(keras.callbacks.Callback):
    """Records one JSON line per completed epoch in `path` (chief only; the whole file is rewritten, as GCS has no
    append) and reports the epoch's `metric_tag` metric (a name of Keras's logs, e.g. val_loss) to hypertune under
    that name, so the trainer can serve as a tuning trial.

    `resume`: the epochs an earlier attempt completed that this one resumes after (`checkpoints.resume_point`);
    its lines of those epochs are kept, so a restarted training continues them (0: none kept).
    """

    def __init__(self, path: str | None, metric_tag: str, resume: int):
        super().__init__()
        self.path, self.metric_tag = path, metric_tag
        self.hypertune = hypertune.HyperTune() if path else None
        self.lines: list[str] = []
        if path and resume and tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                lines = [line for line in f.read().splitlines() if line.strip()]
            self.lines = [line for line in lines if json.loads(line)["epoch"] <= resume]
        self.last: dict = {}

    @property
    def previous(self) -> dict:
        """Metrics of the last recorded epoch (from this or an earlier attempt)."""
        return json.loads(self.lines[-1]) if self.lines else {}

    def on_epoch_end(self, epoch, logs=None):
        self.last = {k: float(v) for k, v in (logs or {}).items()}
        if not self.path:
            return
        self.lines.append(json.dumps({"epoch": epoch + 1, "time": time.time(), **self.last}))
        with tf.io.gfile.GFile(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\n")
        if self.metric_tag in self.last:
            self.hypertune.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=self.metric_tag,
                metric_value=self.last[self.metric_tag],
                global_step=epoch + 1,
            )


class ProgressLog(keras.callbacks.Callback):
    """Progress lines (`core.progress`, stage `train`) of the chief: where training starts (epoch 1, or
    where a restarted group resumes), the running epoch's step and loss at most every `interval` seconds, and each
    completed epoch with its metrics, examples/s and an estimate of the time left."""

    def __init__(self, global_batch: int, interval: float = 2.0, clock=time.monotonic):
        super().__init__()
        self.global_batch, self.interval, self.clock = global_batch, interval, clock
        self._supports_tf_logs = True  # batch logs stay tensors: read only when a line is due
        self.epoch_seconds: list[float] = []
        self.epoch = 0
        self.started = self.epoch_started = self.last = self.batch_ended = 0.0

    def _left(self, epochs_after: int, steps_left: int, step_seconds: float) -> float:
        """Seconds left: the running epoch's steps, then `epochs_after` epochs as long as the completed ones."""
        per_epoch = sum(self.epoch_seconds) / len(self.epoch_seconds) if self.epoch_seconds else None
        return steps_left * step_seconds + epochs_after * (per_epoch or step_seconds * self.params["steps"])

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.epoch_started = epoch, self.clock()
        self.last = self.epoch_started
        epochs, steps = self.params["epochs"], self.params["steps"]
        if not self.started:
            self.started = self.epoch_started
            where = "starting" if epoch == 0 else "resuming from the last checkpoint at"
            progress.emit(
                "train",
                "start",
                f"{where} epoch {epoch + 1}/{epochs}: {steps} steps of {self.global_batch} examples",
                epoch=epoch + 1,
                epochs=epochs,
                steps=steps,
                global_batch=self.global_batch,
            )

    def on_train_batch_end(self, batch, logs=None):
        self.batch_ended = self.clock()
        if self.batch_ended - self.last < self.interval:
            return
        self.last = self.batch_ended
        epochs, steps = self.params["epochs"], self.params["steps"]
        step_seconds = (self.batch_ended - self.epoch_started) / (batch + 1)
        left = self._left(epochs - self.epoch - 1, steps - batch - 1, step_seconds)
        figures = {k: float(v) for k, v in (logs or {}).items() if k in ("loss", "accuracy")}
        progress.emit(
            "train",
            "step",
            f"epoch {self.epoch + 1}/{epochs}, step {batch + 1}/{steps}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in figures.items())
            + f", ~{progress.duration(left)} left",
            epoch=self.epoch + 1,
            epochs=epochs,
            done=batch + 1,
            total=steps,
            unit="steps",
            eta_seconds=round(left, 1),
            **figures,
        )

    def on_epoch_end(self, epoch, logs=None):
        now = self.clock()
        self.epoch_seconds.append(now - self.epoch_started)
        epochs, steps = self.params["epochs"], self.params["steps"]
        rate = steps * self.global_batch / max(self.batch_ended - self.epoch_started, 1e-9)
        left = self._left(epochs - epoch - 1, 0, 0.0)
        figures = {
            k: float(v) for k, v in (logs or {}).items() if k in ("loss", "accuracy", "val_loss", "val_accuracy")
        }
        progress.emit(
            "train",
            "epoch",
            f"epoch {epoch + 1}/{epochs}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in figures.items() if k != "val_loss")
            + f", {rate:.0f} examples/s"
            + (f", ~{progress.duration(left)} left" if epoch + 1 < epochs else ""),
            done=epoch + 1,
            total=epochs,
            unit="epochs",
            examples_per_second=round(rate, 1),
            eta_seconds=round(left, 1),
            seconds=round(self.epoch_seconds[-1], 2),
            **figures,
        )


class FinishAndExit(keras.callbacks.Callback):
    """The last of `fit`'s callbacks: when training ends, `finish()` writes the trainer's outputs, then the process
    ends at once with status 0 (`exit_process`, `os._exit`), its output flushed. Whatever `fit` does after its
    callbacks is skipped: TensorFlow 2.21 destroys fit's tf.data iterators there and each waits, idle, for its
    autotuning thread's current period to run out (seconds to a minute at the end of a long fit). `finish` must close
    what it writes; an error in it propagates as from `fit`."""

    def __init__(self, finish: Callable[[], None], exit_process: Callable[[int], None] | None = os._exit):
        super().__init__()
        self.finish, self.exit_process = finish, exit_process

    def on_train_end(self, logs=None):
        self.finish()
        sys.stdout.flush()
        sys.stderr.flush()
        if self.exit_process is not None:  # None: the process runs on (a warm trial runner), `fit` returns
            self.exit_process(0)
