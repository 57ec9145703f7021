"""The serving container as Vertex AI starts it, for the tests of its entry point and of the serving image: the
model's artifacts uploaded where AIP_STORAGE_URI points, the health route polled until the container is ready."""

from __future__ import annotations

import time
from pathlib import Path

import requests


def upload(bucket, folder: Path, prefix: str) -> list[str]:
    """Every file under `folder` uploaded to `bucket` under `prefix`; their object names."""
    names = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        names.append(f"{prefix}/{path.relative_to(folder)}")
        bucket.blob(names[-1]).upload_from_filename(str(path))
    return names


def wait_healthy(proc, health_url: str, log, timeout: float = 180) -> list[int]:
    """Poll the health route until it answers 200; the status codes it answered. `proc`: the container's process,
    `log()`: its output so far."""
    deadline, answers = time.time() + timeout, []
    while not answers or answers[-1] != 200:
        assert proc.poll() is None, f"the container exited ({proc.returncode}):\n{log()}"
        assert time.time() < deadline, f"never healthy; answers {answers[-5:]}\n{log()}"
        try:
            answers.append(requests.get(health_url, timeout=10).status_code)
        except requests.ConnectionError:
            time.sleep(0.2)
    return answers
