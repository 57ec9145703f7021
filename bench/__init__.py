"""Benchmarks, `python -m bench.<name>`; each prints its ratios and writes bench/results/<name>.json."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def save(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")


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
