"""Run the training pipeline on this machine with `kfp.local` (SubprocessRunner, no Docker, no cloud).

kfp.local streams every step's output to stdout, line by line as the step writes it; `StepLog` splits that stream
into one log file per step, times the steps and shows a line as each starts and ends, with the step's progress
lines (`core.progress`) under the running one: on a terminal one line updated in place, else a plain line
at most every `PLAIN_INTERVAL` seconds. `verbose=True` streams everything instead; `quiet=True` shows nothing.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import time
import typing
import warnings
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

from core import progress
from core.units import size
from pipelines.step_memory import StepMemory

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTED = re.compile(r"Executing task '([^']+)'")
FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
CACHED = re.compile(r"Task '([^']+)' served from cache")  # pipelines/rehearsal/cache.py
ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")
CLEAR_LINE = "\r\x1b[K"  # to the line's start, erase it
PLAIN_INTERVAL = 5.0  # seconds between two progress lines of a step when the console is no terminal


@dataclass
class Step:
    name: str
    status: str = "SKIPPED"
    seconds: float = 0.0
    started: float = 0.0
    log: str = ""
    error: str = ""
    progress: list[dict] = field(default_factory=list)  # the step's progress events, `seconds` after its start
    peak_memory_bytes: int | None = None  # resident memory of the step's processes at their highest (sampled)


def terminal_columns() -> int:
    """The console's width: $COLUMNS, else the terminal's, else 80."""
    return shutil.get_terminal_size().columns


@dataclass
class StepLog(io.TextIOBase):
    """A stdout replacement that records per-step status, seconds, logs, progress events and the last error line,
    and shows the steps on `console` (see the module)."""

    log_dir: Path
    console: typing.TextIO
    verbose: bool = False
    quiet: bool = False
    columns: typing.Callable[[], int] = terminal_columns
    clock: typing.Callable[[], float] = time.time
    memory: StepMemory | None = None
    steps: dict = field(default_factory=dict)
    current: Step | None = None
    _file: typing.TextIO | None = None
    _buffer: str = ""
    _live: bool = False  # a progress line is on the terminal, the cursor at its end
    _shown: float = float("-inf")  # when the running step's last plain progress line was printed
    _pending: str = ""  # the running step's latest progress not printed yet (plain)

    def __post_init__(self) -> None:
        self.tty = not self.verbose and not self.quiet and self.console.isatty()

    def write(self, text: str) -> int:
        if self.verbose:
            self.console.write(text)
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._line(ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        if self.verbose:
            self.console.flush()

    def _say(self, text: str) -> None:
        """A line of its own on the console (over the progress line on a terminal)."""
        if self.verbose or self.quiet:
            return
        self.console.write((CLEAR_LINE if self._live else "") + text + "\n")
        self.console.flush()
        self._live = False

    def _progress(self, step: Step, event: dict) -> None:
        now = self.clock()
        step.progress.append({"seconds": round(now - step.started, 2), **event})
        if self.verbose or self.quiet:
            return
        text = "  ↳ " + " ".join(str(event["message"]).split())
        if self.tty:
            width = self.columns()
            text = text if len(text) < width else text[: max(width - 2, 0)] + "…"
            self.console.write(CLEAR_LINE + text)
            self.console.flush()
            self._live = True
        elif now - self._shown >= PLAIN_INTERVAL:
            self._say(text)
            self._shown, self._pending = now, ""
        else:
            self._pending = text

    def _line(self, line: str) -> None:
        if (m := CACHED.search(line)) and not self.current:
            self.steps[m[1]] = Step(m[1], status="CACHED", started=self.clock())
            self._say(f"↺ {m[1]} served from cache")
            return
        if m := STARTED.search(line):
            self.current = self.steps.setdefault(m[1], Step(m[1]))
            self.current.started, self.current.status = self.clock(), "RUNNING"
            self.current.log = str(self.log_dir / f"{m[1]}.log")
            if self.memory:
                self.memory.begin()
            self._file = open(self.current.log, "w")
            self._shown, self._pending = float("-inf"), ""
            self._say(f"▶ {m[1]} ...")
            return
        if (m := FINISHED.search(line)) and self.current:
            step = self.current
            step.seconds = round(self.clock() - step.started, 2)
            step.status = "SUCCEEDED" if m[2] == "SUCCESS" else "FAILED"
            step.peak_memory_bytes = self.memory.end() if self.memory else None
            if self._file:
                self._file.close()
            self.current = None
            if self._pending:
                self._say(self._pending)
            mark = "✔" if step.status == "SUCCEEDED" else "✘"
            peak = f", peak memory {size(step.peak_memory_bytes)}" if step.peak_memory_bytes else ""
            self._say(f"{mark} {step.name} {step.status.lower()} in {step.seconds:.1f}s{peak}")
            return
        if self.current and self._file:
            self._file.write(line + "\n")
            if event := progress.parse(line):
                self._progress(self.current, event)
            elif m := ERROR_LINE.match(line):
                self.current.error = (
                    f"{m[1]}: {m[2]}" if m[1] not in ("DataError", "ModelError", "BatchPredictionError") else m[2]
                )


def step_names(pipeline) -> list[str]:
    """Leaf task names of a compiled pipeline in dependency order (condition groups flattened)."""
    spec = pipeline.pipeline_spec
    names: list[str] = []

    def walk(dag):
        pending = dict(dag.tasks)
        while pending:
            ready = sorted(n for n, t in pending.items() if not set(t.dependent_tasks) & set(pending))
            for name in ready or sorted(pending):  # `or`: never stall on an unexpected cycle
                component = spec.components[pending.pop(name).component_ref.name]
                if component.WhichOneof("implementation") == "dag":
                    walk(component.dag)
                else:
                    names.append(name)

    walk(spec.root.dag)
    return names


def run_local(
    pipeline,
    arguments: dict,
    out_dir: Path,
    verbose: bool = False,
    cache_root: Path | None = None,
    pipeline_root: Path | None = None,
    quiet: bool = False,
) -> tuple[list[Step], Path | None]:
    """Run `pipeline` locally; return every step (SKIPPED when it did not run, CACHED when served from the cache)
    and the run's artifact root. `cache_root`: kfp.local's task cache there (tasks compiled with caching on).
    `pipeline_root`: where the artifacts go (default `out_dir/artifacts`). `verbose`: stream every step's log;
    `quiet`: show nothing of the steps."""
    import kfp.local

    artifacts = pipeline_root or out_dir / "artifacts"
    log_dir = out_dir / "logs"
    artifacts.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    before = set(os.listdir(artifacts))
    kfp.local.init(
        runner=kfp.local.SubprocessRunner(use_venv=False),
        pipeline_root=str(artifacts),
        raise_on_error=False,
        enable_caching=cache_root is not None,
        cache_root=str(cache_root) if cache_root else None,
    )
    with (
        StepMemory() as memory,
        redirect_stdout(StepLog(log_dir, sys.stdout, verbose, quiet, memory=memory)) as tracker,
    ):
        with warnings.catch_warnings():
            # kfp.local notes that display names and the components image do not apply to local subprocesses
            warnings.filterwarnings("ignore", category=UserWarning, module="kfp.local")
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="kfp.local")
            pipeline(**arguments)
    new = sorted(set(os.listdir(artifacts)) - before)
    steps = [tracker.steps.get(name, Step(name)) for name in step_names(pipeline)]
    return steps, (artifacts / new[-1]) if new else None
