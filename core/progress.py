"""Progress lines of the long steps, the same on every target: `TFPIPE_PROGRESS {json}` on stdout, one an event.

The JSON object always has `stage` (prepare, study, train, evaluate, tflite, batch), `event` (what happened: epoch,
trial_finished, records, ...) and `message` (the line a person reads); where they apply, `done`, `total` and `unit`
(epochs, trials, records, instances), `rate` (units a second), `eta_seconds`, and the stage's own figures (loss,
val_accuracy, best, errors, ...). The local runner shows `message` under the running step (`pipelines.local_run`);
Vertex AI and Kubeflow logs carry the lines as they are. It imports no TensorFlow: every step and the trainer import
it cheaply.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import typing

PREFIX = "TFPIPE_PROGRESS"


def line(stage: str, event: str, message: str, **fields) -> str:
    """The progress line of one event (without the newline)."""
    return f"{PREFIX} " + json.dumps({"stage": stage, "event": event, "message": message, **fields})


def write(text: str) -> None:
    """Write a progress line to stdout at once (flushed: stdout is a pipe in a step)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def emit(stage: str, event: str, message: str, **fields) -> None:
    """Write one event's line to stdout."""
    write(line(stage, event, message, **fields))


def parse(text: str) -> dict | None:
    """The event of a progress line (surrounding whitespace allowed); None for any other or a malformed one."""
    text = text.strip()
    if not text.startswith(PREFIX + " "):
        return None
    try:
        event = json.loads(text[len(PREFIX) + 1 :])
    except ValueError:
        return None
    return event if isinstance(event, dict) and {"stage", "event", "message"} <= event.keys() else None


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Counter:
    """A fast count (records, instances) as progress lines: at most one every `interval` seconds (the first after
    `interval`), and a last one from `finish`. Thread-safe; counts are kept per part (an input file, ...) and summed.
    Each line has `done` (the summed `done` count), `total` when known, `unit`, `rate`, `eta_seconds` (with a
    total), the other summed counts, and `describe(counts)` + rate + time left as its message; `out` writes a line.
    Without a total, `fraction(counts)` (what share of the work is done, e.g. of the input's bytes) gives the time
    left."""

    def __init__(
        self,
        stage: str,
        unit: str,
        describe: typing.Callable[[dict], str],
        total: int | None = None,
        interval: float = 2.0,
        out: typing.Callable[[str], None] = write,
        clock: typing.Callable[[], float] = time.monotonic,
        fraction: typing.Callable[[dict], float] | None = None,
    ):
        self.stage, self.unit, self.describe, self.total, self.interval = stage, unit, describe, total, interval
        self.fraction = fraction
        self.out = out
        self.clock = clock
        self.started = self.last = clock()
        self.parts: dict[typing.Hashable, dict] = {}
        self._lock = threading.Lock()

    def update(self, part: typing.Hashable = 0, /, **counts: int) -> None:
        """Set `part`'s counts (`done` among them); a line when `interval` has passed since the last one."""
        with self._lock:
            self.parts[part] = counts
            now = self.clock()
            if now - self.last >= self.interval:
                self.last = now
                self._write(self.unit, now)

    def finish(self, part: typing.Hashable = 0, /, **counts: int) -> None:
        """The last line, with `part`'s final counts (none: as they are)."""
        with self._lock:
            if counts:
                self.parts[part] = counts
            self._write("done", self.clock())

    def _write(self, event: str, now: float) -> None:
        counts: dict[str, int] = {}
        for part in self.parts.values():
            for name, value in part.items():
                counts[name] = counts.get(name, 0) + value
        done = counts.get("done", 0)
        elapsed = now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        fields: dict[str, typing.Any] = {**counts, "done": done, "unit": self.unit, "rate": round(rate, 1)}
        message = f"{self.describe(counts)}, {rate:.0f} {self.unit}/s"
        if self.total is not None:
            fields["total"] = self.total
            if event != "done" and rate > 0:
                fields["eta_seconds"] = round((self.total - done) / rate, 1)
        elif self.fraction is not None:
            share = min(max(self.fraction(counts), 0.0), 1.0)
            fields["fraction"] = round(share, 4)
            if event != "done" and share > 0:
                fields["eta_seconds"] = round(elapsed * (1 - share) / share, 1)
        if "eta_seconds" in fields:
            message += f", ~{duration(fields['eta_seconds'])} left"
        self.out(line(self.stage, event, message, **fields))
