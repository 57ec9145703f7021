"""Result files of the benchmarks: every `bench/results/*.json` is written here, with where its figures come from.

A benchmark creates its `Recorder` first thing in `main` (the start time and the load average at the start are
taken then) and ends with `recorder.save(figures, path)`, which writes

    {"benchmark": NAME, "provenance": {...}, **figures}

`provenance` holds the commit (`git rev-parse HEAD`, whether tracked files differ from it and which), the machine
(CPUs online and usable, the CPU model from /proc/cpuinfo, memory, platform, Python and TensorFlow versions), the
exact command (`sys.orig_argv`) and its parsed arguments, the start and end times and seconds, the 1-, 5- and
15-minute load averages at the start and at the end, the machine's speed at the start (`calibration`), and `quick`
(a reduced run: `--quick`, whose result `result_path` puts outside bench/results/ unless `--output` says otherwise;
`python -m bench.page` refuses one).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def result_path(benchmark: str, quick: bool, output: Path | None = None, name: str | None = None) -> Path:
    """Where a run writes its result: `output` when given, else bench/results/NAME.json, or for a quick run a file
    under the temporary folder (a quick run never replaces a full run's result)."""
    if output is not None:
        return output
    filename = f"{name or benchmark}.json"
    return Path(tempfile.gettempdir()) / "bench-quick" / filename if quick else RESULTS / filename


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def commit() -> dict[str, Any]:
    """HEAD's sha and whether the tracked files differ from it (the paths that do; untracked files and the result
    files, which `make bench` rewrites one after the other, are left out)."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    changed = sorted(
        line[3:] for line in (status or "").splitlines() if line.strip() and not line[3:].startswith("bench/results/")
    )
    return {"sha": sha.strip() if sha else None, "dirty": bool(changed), "changed_paths": changed}


def _cpuinfo_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("model name", "Processor", "cpu model"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError):
        pass
    return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "cpu_model": _cpuinfo_model(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow"),
    }


def calibration() -> dict[str, float]:
    """How fast this machine ran when the benchmark started, best of three: seconds for five million Python loop
    additions (the interpreter) and for SHA-256 of 64 MiB (compiled code). The same machine kind can run at another
    speed on another day: two result files' absolute figures compare only as far as their calibrations agree."""
    import hashlib

    def best(work) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return round(min(times), 3)

    def loop() -> None:
        total = 0
        for i in range(5_000_000):
            total += i

    data = bytes(64 << 20)
    return {"python_loop_5m_s": best(loop), "sha256_64mib_s": best(lambda: hashlib.sha256(data).digest())}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # paths and the like


class Recorder:
    """The provenance of one benchmark run: create it when the run starts, `save` its figures when it ends."""

    def __init__(self, benchmark: str, arguments: Any = None, quick: bool = False):
        self.benchmark = benchmark
        self.arguments = _jsonable(vars(arguments) if hasattr(arguments, "__dict__") else arguments)
        self.quick = quick
        self.started = time.time()
        self.loadavg_start = loadavg()
        self.commit = commit()  # at the start: what was measured
        self.calibration = calibration()

    def provenance(self) -> dict[str, Any]:
        return {
            "command": list(getattr(sys, "orig_argv", sys.argv)),
            "arguments": self.arguments,
            "quick": self.quick,
            "commit": self.commit,
            "machine": machine(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(time.time() - self.started, 1),
            "loadavg_start": self.loadavg_start,
            "loadavg_end": loadavg(),
            "calibration": self.calibration,
        }

    def save(self, figures: dict[str, Any], path: Path) -> dict[str, Any]:
        """Write {"benchmark", "provenance", **figures} to `path` as JSON; returns what was written."""
        result = {"benchmark": self.benchmark, "provenance": self.provenance(), **figures}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"results: {path}" + (" (a quick run: not a result to quote)" if self.quick else ""))
        return result
