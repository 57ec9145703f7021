"""Costly test data built once per test session, however many pytest-xdist workers ask for it."""

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `build(folder)` filled, once per session: the first worker to ask builds it under a lock in the
    session's temporary folder (the one every worker's own sits in), the others wait for it and reuse it. Tests must
    not change what is in it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder, done = base / f"shared-{name}", base / f"shared-{name}.done"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
