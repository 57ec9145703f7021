"""Benchmarks, `python -m bench.<name>`: each module's docstring says what it measures and how; each run prints its
ratios and writes bench/results/<name>.json through `bench.results.Recorder` (the figures with the commit, the
machine, the command and the load averages). `--quick` runs a reduced size to check that a benchmark works; its
result goes outside bench/results/. `python -m bench.page` writes docs/benchmarks.md from the result files and the
docstrings.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def train_digits(workdir: Path, epochs: int, *flags: str) -> str:
    """Prepare builtin:digits into `workdir/data` and train it with `python -m trainer.task` (learning rate 0.003,
    `flags` added) into `workdir/job`; returns the SavedModel's directory."""
    from components.prepare_data import prepare

    prepare("builtin:digits", str(workdir / "data"), num_workers=1)
    command = ["--data-dir", str(workdir / "data"), "--job-dir", str(workdir / "job"), "--epochs", str(epochs)]
    subprocess.run(
        [sys.executable, "-m", "trainer.task", *command, "--learning-rate", "0.003", *flags],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    return str(workdir / "job" / "model")
