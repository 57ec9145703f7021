"""Training callbacks: per-epoch history (survives restarts) and hypertune metric reports."""

from __future__ import annotations

import json
import time

import hypertune
import tensorflow as tf
import tf_keras as keras

HPARAMS = ("learning_rate", "batch_size", "dropout", "hidden_units", "filters", "image_size", "seed")


class EpochLog(keras.callbacks.Callback):
    """Records one JSON line per completed epoch in `path` (chief only; the whole file is rewritten, as GCS has no
    append) and reports validation accuracy to hypertune, so the trainer can serve as a tuning trial.

    With `resume=True` the lines of an interrupted earlier attempt are kept, so a restarted group continues them.
    """

    def __init__(self, path: str | None, metric_tag: str, resume: bool):
        super().__init__()
        self.path, self.metric_tag = path, metric_tag
        self.hypertune = hypertune.HyperTune() if path else None
        self.lines: list[str] = []
        if path and resume and tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                self.lines = [line for line in f.read().splitlines() if line.strip()]
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
        if "val_accuracy" in self.last:
            self.hypertune.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=self.metric_tag, metric_value=self.last["val_accuracy"], global_step=epoch + 1
            )
