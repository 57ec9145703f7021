"""The study's progress lines while it runs: trial k of N started and finished, the best so far, and each running
trial's epoch, read from the trainer's own progress lines in the trial's log."""

import os
import threading

from components.lib.study.spec import StudySpec
from components.lib.study.trials import Trial
from core import progress
from core.units import assignments


class StudyProgress:
    """The study's progress lines (`core.progress`, stage `study`, written with `out`): each trial as it starts
    and finishes (its metric, the best so far, the trials running) and, every `interval` seconds while trials run and
    something changed, each running trial's latest epoch or step, read from the progress lines of its log."""

    def __init__(self, spec: StudySpec, base_dir: str, out, interval: float = 2.0):
        self.spec, self.base_dir, self.out, self.interval = spec, base_dir, out, interval
        self.running: dict[str, dict] = {}  # trial id -> its latest `train` event ({} before the first)
        self.finished = 0
        self.best: Trial | None = None
        self._read: dict[str, tuple[int, str]] = {}  # trial id -> bytes of its log read, an unfinished last line
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "StudyProgress":
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._watcher.join()

    def started(self, trial: Trial) -> None:
        with self._lock:
            self.running[trial.trial_id] = {}
            self._emit(
                "trial_started",
                f"trial {trial.trial_id}/{self.spec.max_trial_count} started ({assignments(trial.parameters)})",
                trial=trial.trial_id,
                parameters=trial.parameters,
            )

    def finished_trial(self, trial: Trial, best: Trial | None) -> None:
        with self._lock:
            self.running.pop(trial.trial_id, None)
            self.finished += 1
            self.best = best
            outcome = (
                f"{self.spec.metric_id} {trial.metric:.4f}"
                if trial.status == "SUCCEEDED" and trial.metric is not None
                else f"failed ({trial.error})"
            )
            self._emit(
                "trial_finished",
                f"trial {trial.trial_id}/{self.spec.max_trial_count}: {outcome}",
                trial=trial.trial_id,
                status=trial.status,
                metric=trial.metric,
                seconds=trial.seconds,
                parameters=trial.parameters,
            )

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if self._read_logs():
                    self._emit("trials", "")

    def _read_logs(self) -> bool:
        """Read what the running trials' logs gained; whether a trial's latest `train` event changed."""
        changed = False
        for trial_id in self.running:
            offset, partial = self._read.get(trial_id, (0, ""))
            try:
                with open(os.path.join(self.base_dir, trial_id, "trial.log"), "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:  # not started yet
                continue
            *lines, partial = (partial + data.decode(errors="replace")).split("\n")
            self._read[trial_id] = (offset + len(data), partial)
            for line in lines:
                event = progress.parse(line)
                if event and event["stage"] == "train" and event["event"] in ("start", "step", "epoch"):
                    self.running[trial_id] = event
                    changed = True
        return changed

    def _trial_state(self, trial_id: str) -> str:
        event = self.running[trial_id]
        if event.get("event") == "epoch":
            val = f" val_accuracy {event['val_accuracy']:.4f}" if "val_accuracy" in event else ""
            return f"trial {trial_id} epoch {event['done']}/{event['total']}{val}"
        if event.get("event") == "step":
            accuracy = f" accuracy {event['accuracy']:.4f}" if "accuracy" in event else ""
            return (
                f"trial {trial_id} epoch {event['epoch']}/{event['epochs']} step {event['done']}/{event['total']}"
                + accuracy
            )
        if event.get("event") == "start":
            return f"trial {trial_id} epoch {event['epoch']}/{event['epochs']}"
        return f"trial {trial_id} starting"

    def _emit(self, event: str, news: str, **fields) -> None:
        """A line: `news`, then the trials running, how many finished, the best so far."""
        state = [
            "running: " + ", ".join(self._trial_state(t) for t in sorted(self.running, key=int))
            if self.running
            else "",
            f"{self.finished}/{self.spec.max_trial_count} finished",
            f"best {self.spec.metric_id} {self.best.metric:.4f} (trial {self.best.trial_id})"
            if self.best and self.best.metric is not None
            else "",
        ]
        self.out(
            progress.line(
                "study",
                event,
                "; ".join(part for part in (news, *state) if part),
                done=self.finished,
                total=self.spec.max_trial_count,
                unit="trials",
                running={
                    t: {k: e[k] for k in ("event", "epoch", "done", "total", "accuracy", "val_accuracy") if k in e}
                    for t, e in self.running.items()
                },
                best=self.best.metric if self.best else None,
                best_trial=self.best.trial_id if self.best else None,
                metric_id=self.spec.metric_id,
                **fields,
            )
        )
