"""The processes tests start: the trainer as the launchers run it, and a free localhost port for a server."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    """A localhost port free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(data_dir: Path, job_dir: Path, *flags: str, env: dict | None = None) -> Path:
    """`python -m trainer.task` on a prepared data set, one process (no cluster: the default strategy); the job
    folder. A failing trainer fails the caller with the trainer's last lines."""
    done = subprocess.run(
        [sys.executable, "-m", "trainer.task", "--data-dir", str(data_dir), "--job-dir", str(job_dir), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if done.returncode:
        raise RuntimeError(f"the trainer failed ({done.returncode}):\n" + "\n".join(done.stderr.splitlines()[-20:]))
    return job_dir


def run_cli(*args: str | Path, cwd=None, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m pipelines ARGS` as a user runs it, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )


def summary_of(out: Path) -> dict:
    """The run_summary.json of the run whose --out was `out`."""
    return json.loads((out / "run_summary.json").read_text())
