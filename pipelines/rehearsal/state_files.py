"""The rehearsal state's JSON files, which rehearsals running at once on one --state read and write."""

from __future__ import annotations

import json
import os


def write_json(path: str, value, indent: int | None = None) -> None:
    """`value` written to `path` whole or not at all (a reader never sees a partial file): to a file of this process
    beside it, then renamed over it."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=indent)
    os.replace(tmp, path)
