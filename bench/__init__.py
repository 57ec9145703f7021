"""Benchmarks, `python -m bench.<name>`; each prints its ratios and writes bench/results/<name>.json."""

import json
from pathlib import Path


def save(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")
