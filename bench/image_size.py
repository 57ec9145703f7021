"""Default image size benchmark: a folder of small pictures through the whole local pipeline with the defaults.

    python -m bench.image_size [--per-class 150] [--size 40] [--workdir DIR]

Draws an image folder of simple shapes (circle, square, triangle; `--per-class` each, `--size` px; the generator of
tests/conftest.py) and runs `python -m pipelines run --no-deploy` on it twice: with the defaults (the study on, the
image size the data's own) and with `--image-size SIZE --no-tune` (the right explicit size, no study). Reports each
run's model input, the reason the report gives for it, test accuracy, gate decision, train-model seconds and wall
time. Goal: the default reaches the explicit size's test accuracy, within one test example (the runs differ in the
study, whose hyperparameters can move one example either way). Results: bench/results/image_size.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT, save

RESULTS = ROOT / "bench" / "results" / "image_size.json"


def run_pipeline(name: str, data: Path, work: Path, extra: list[str]) -> dict:
    out = work / name
    command = [
        sys.executable,
        "-m",
        "pipelines",
        "run",
        "--data-source",
        str(data),
        "--out",
        str(out),
        "--model-repository",
        str(work / f"repo-{name}"),
        "--no-deploy",
        *extra,
    ]
    print("$", " ".join(command), flush=True)
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=dict(os.environ, TF_USE_LEGACY_KERAS="1"), check=False)
    wall = time.perf_counter() - started
    summary = json.loads((out / "run_summary.json").read_text())
    steps = {s["name"]: s["seconds"] for s in summary["steps"]}
    return {
        "run": name,
        "options": extra,
        "returncode": done.returncode,
        "wall_seconds": round(wall, 1),
        "input_shape": summary["dataset"]["input_shape"],
        "image_size": summary["dataset"].get("image_size"),
        "test_accuracy": summary["metrics"]["test_accuracy"],
        "blessed": (summary["gate"] or {}).get("blessed"),
        "test_examples": summary["dataset"]["splits"]["test"]["examples"],
        "train_model_seconds": steps.get("train-model"),
        "tune_seconds": steps.get("tune-hyperparameters"),
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.image_size", description=__doc__.splitlines()[0])
    p.add_argument("--per-class", type=int, default=150)
    p.add_argument("--size", type=int, default=40)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.conftest import write_shapes

    with tempfile.TemporaryDirectory(prefix="bench-image-size-") as tmp:
        work = args.workdir or Path(tmp)
        data = write_shapes(work / "shapes", per_class=args.per_class, size=args.size)
        runs = [
            run_pipeline("default", data, work, []),
            run_pipeline("explicit", data, work, ["--image-size", str(args.size), "--no-tune"]),
        ]
    default, explicit = runs
    one_example = 1 / explicit["test_examples"]  # the two runs' test splits are the same examples
    met = default["test_accuracy"] >= explicit["test_accuracy"] - one_example - 1e-9 and default["returncode"] == 0
    result = {
        "benchmark": "image_size",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "data": {"classes": ["circle", "square", "triangle"], "per_class": args.per_class, "size_px": args.size},
        "cpus": os.cpu_count(),
        "runs": runs,
        "goal": {
            "default_reaches_explicit_accuracy_within_one_test_example": met,
            "one_test_example": round(one_example, 4),
        },
    }
    print()
    for r in runs:
        print(
            f"{r['run']:<9} input {r['input_shape']} test accuracy {r['test_accuracy']:.4f} "
            f"{'BLESSED' if r['blessed'] else 'NOT BLESSED'}; train-model {r['train_model_seconds']:.1f}s, wall "
            f"{r['wall_seconds']:.1f}s; load average {r['loadavg_before'][0]:.2f}/{r['loadavg_after'][0]:.2f}"
        )
    print(f"image size (default run): {default['image_size']['reason'] if default['image_size'] else '?'}")
    print(
        f"goal: the default reaches the explicit size's accuracy within one test example ({one_example:.4f}) ... "
        f"{'MET' if met else 'NOT MET'}"
    )
    save(result, args.output)
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
