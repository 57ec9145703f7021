"""Peak memory of each step of a local run.

kfp.local runs one step at a time, as a child process of this one (the step's own processes under it; a rehearsal's
GCPC task, as a child of the warm launchers' server, rehearsal/warm_launchers.py). A sampler thread adds up the peak
resident memory so far (Linux's VmHWM; elsewhere the resident memory now) of this process's live descendants started
since the step began (not that server, started before the steps), every `interval` seconds (every `first_interval`
in a step's first second), and keeps the highest sum: processes that run together count together, one after the
other do not. What a process reaches after its last sample is missed; a step whose processes all end within
`first_interval` has no figure. A forked child still running its parent's program counts only once seen for
`SETTLE_SECONDS`: until it execs, it shows its parent's memory figures."""

from __future__ import annotations

import threading
import time

import psutil

SETTLE_SECONDS = 1.0


def _peak_rss(process: psutil.Process) -> int:
    """The process's peak resident bytes so far (VmHWM), or its resident bytes now where /proc has no VmHWM."""
    try:
        with open(f"/proc/{process.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return process.memory_info().rss


def _not_execd(process: psutil.Process) -> bool:
    """Whether the process still runs its parent's program with its parent's arguments: forked, not yet exec'd."""
    parent = process.parent()
    return parent is not None and process.cmdline() == parent.cmdline()


class StepMemory:
    """`begin()` at a step's start, `end()` at its end: the peak in bytes (None when nothing was measured)."""

    def __init__(self, interval: float = 0.2, first_interval: float = 0.02):
        self.interval, self.first_interval = interval, first_interval
        self._began = 0.0
        self._process = psutil.Process()
        self._lock = threading.Lock()
        self._peak = 0
        self._earlier: set[int] = set()  # descendants alive when the step began
        # pid: when the sampler first saw it (monotonic; psutil's create_time rests on /proc/stat's whole-second boot
        # time and can be off by up to a second)
        self._first_seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        """The step's live processes' peak resident bytes so far, added up."""
        total = 0
        now = time.monotonic()
        children = self._process.children(recursive=True)
        for child in children:
            if child.pid in self._earlier:
                continue
            try:
                seen = self._first_seen.setdefault(child.pid, now)
                if now - seen < SETTLE_SECONDS and _not_execd(child):
                    continue
                total += _peak_rss(child)
            except psutil.Error:  # ended meanwhile
                continue
        alive = {child.pid for child in children}
        with self._lock:
            self._first_seen = {pid: t for pid, t in self._first_seen.items() if pid in alive}
            self._peak = max(self._peak, total)
        return total

    def begin(self) -> None:
        with self._lock:
            self._peak = 0
            self._earlier = {p.pid for p in self._process.children(recursive=True)}
        self._began = time.monotonic()
        self._wake.set()  # the sampler may be in a long wait: start the step's fast sampling now

    def end(self) -> int | None:
        self.sample()
        with self._lock:
            return self._peak or None

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval if time.monotonic() - self._began > 1 else self.first_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.sample()

    def __enter__(self) -> StepMemory:
        self._thread = threading.Thread(target=self._run, daemon=True, name="step-memory")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join()
