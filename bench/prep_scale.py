"""Data prep's rows/s, images/s and peak memory as the data grows, against the implementation before Beam.

    python -m bench.prep_scale [--rows 20000 200000 2000000] [--images 3000 30000] [--workdir DIR] [--no-baseline]
                               [--quick]

Synthetic sources, written once (kept and reused in `--workdir`): CSV files of 10 float features and a 3-class
label, and folders of 96×96 RGB JPEGs of random pixels (the slowest kind to decode) in 3 class folders. Each size is
prepared by `components.prepare_data.prepare` in a fresh process with the pipeline's defaults (2 training workers,
the image size from the data; the Beam pipeline on the direct runner in that process, an image folder's shards
written by a pool of a process per usable CPU). Reported per size: the call's own seconds (after the process has
started and imported), records a second, and peak memory: the process's and its children's, added up, sampled as
the run summary measures a step.

Baseline, in the same run on the same sources: the implementation the Beam pipeline replaced (the source read whole
in one process, images decoded by a forked process pool), extracted from its commit with `git archive` and run the
same way (`--no-baseline` skips it).

Goals (data of any size): peak memory at the most rows at most 1.5× that at the fewest, and under 0.5 GB; at least
20,000 rows/s and 4,500 images/s at the largest sizes (the baseline's rates on the machine where the goals were
set), and at least the baseline's rates measured in the same run. Small sizes pay a fixed start-up that the baseline
did not: Beam's import and the pipeline's construction.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench import ROOT
from bench.results import Recorder, result_path
from pipelines.step_memory import StepMemory

FEATURES = 10
CLASSES = 3
IMAGE_SIDE = 96
GB = 1e9

BASELINE = "074d245"  # the last commit before prepare-data ran on Beam

PREPARE = (
    "import json, sys, time\n"
    "from components.prepare_data import prepare\n"
    "t = time.perf_counter()\n"
    "stats = prepare(sys.argv[1], sys.argv[2], num_workers=2)\n"
    "print(json.dumps({'seconds': time.perf_counter() - t, 'examples': stats['examples'], "
    "'records': stats['records']}))\n"
)


def write_csv(path: Path, rows: int, seed: int = 0) -> None:
    """`rows` rows of FEATURES floats and a label, written in chunks (never the whole table in memory)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write(",".join([f"f{j}" for j in range(FEATURES)] + ["label"]) + "\n")
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            x = rng.normal(size=(n, FEATURES)).round(5)
            labels = rng.integers(0, CLASSES, n)
            f.writelines(",".join(map(str, row)) + f",c{label}\n" for row, label in zip(x.tolist(), labels))


def write_images(folder: Path, count: int, seed: int = 0) -> None:
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k in range(CLASSES):
        (folder / f"c{k}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        pixels = rng.integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"c{i % CLASSES}" / f"{i:06d}.jpg", quality=90)


def source(workdir: Path, kind: str, size: int) -> Path:
    """The synthetic source of `kind` ("csv" or "images") and `size` records, made when missing."""
    path = workdir / (f"rows-{size}.csv" if kind == "csv" else f"images-{size}")
    done = path.with_name(path.name + ".done")
    if not done.exists():
        print(f"[bench] writing {path.name}", flush=True)
        write_csv(path, size) if kind == "csv" else write_images(path, size)
        done.touch()
    return path


def baseline_tree(workdir: Path) -> Path:
    """The `BASELINE` commit's files, extracted once into `workdir`."""
    tree = workdir / f"baseline-{BASELINE}"
    done = tree.with_name(tree.name + ".done")
    if not done.exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", BASELINE], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        done.touch()
    return tree


def measure(data: Path, workdir: Path, code: Path = ROOT) -> dict:
    """prepare() of the implementation in `code` on `data` in a fresh process: its seconds and counts, and the
    process tree's peak memory."""
    out = workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    with StepMemory(interval=0.05, first_interval=0.01) as memory:
        memory.begin()
        done = subprocess.run(
            [sys.executable, "-c", PREPARE, str(data), str(out)], cwd=code, capture_output=True, text=True
        )
        peak = memory.end()
    if done.returncode:
        raise RuntimeError(f"prepare failed on {data}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "records": result["records"],
        "examples": result["examples"],
        "seconds": round(result["seconds"], 3),
        "records_per_second": round(result["records"] / result["seconds"], 1),
        "peak_memory_bytes": peak,
        "peak_memory_gb": round((peak or 0) / GB, 3),
        "source_bytes": sum(p.stat().st_size for p in ([data] if data.is_file() else data.rglob("*.jpg"))),
    }


def run(args, workdir: Path) -> dict:
    runs: dict[str, dict[str, dict]] = {"csv": {}, "images": {}}
    baseline: dict[str, dict[str, dict]] = {"csv": {}, "images": {}}
    code = {"beam": ROOT} | ({} if args.no_baseline else {"baseline": baseline_tree(workdir)})
    for kind, sizes in (("csv", args.rows), ("images", args.images)):
        for size in sizes:
            for side, tree in code.items():  # the two implementations one after the other on each source
                m = measure(source(workdir, kind, size), workdir, tree)
                (runs if side == "beam" else baseline)[kind][str(size)] = m
                print(
                    f"[bench] {side:8} {kind} {size:>9,}: {m['seconds']:7.2f} s, "
                    f"{m['records_per_second']:>10,.0f} records/s, peak {m['peak_memory_gb']:.3f} GB",
                    flush=True,
                )
    csv_small, csv_large = runs["csv"][str(min(args.rows))], runs["csv"][str(max(args.rows))]
    images_large = runs["images"][str(max(args.images))]
    memory_ratio = round(csv_large["peak_memory_bytes"] / csv_small["peak_memory_bytes"], 3)
    goals = {
        "csv_peak_memory_ratio": memory_ratio,
        "csv_peak_memory_ratio_max": 1.5,
        "csv_peak_memory_gb": csv_large["peak_memory_gb"],
        "csv_peak_memory_gb_max": 0.5,
        "csv_rows_per_second": csv_large["records_per_second"],
        "csv_rows_per_second_min": 20_000,
        "images_per_second": images_large["records_per_second"],
        "images_per_second_min": 4_500,
    }
    goals["met"] = {
        "memory_ratio": memory_ratio <= 1.5,
        "memory_under_0_5_gb": csv_large["peak_memory_gb"] < 0.5,
        "rows_per_second": csv_large["records_per_second"] >= 20_000,
        "images_per_second": images_large["records_per_second"] >= 4_500,
    }
    if not args.no_baseline:
        for kind, large in (("csv", csv_large), ("images", images_large)):
            base = baseline[kind][str(max(args.rows if kind == "csv" else args.images))]
            ratio = round(large["records_per_second"] / base["records_per_second"], 3)
            goals[f"{kind}_rate_vs_baseline"] = ratio
            goals["met"][f"{kind}_rate_vs_baseline"] = ratio >= 1.0
    return {
        "implementation": "components.prepare_data.prepare: the Beam pipeline on the direct runner in the calling process, an image folder's shards written by a pool of a process per usable CPU",
        "csv": {"features": FEATURES, "classes": CLASSES, "runs": runs["csv"]},
        "images": {
            "side": IMAGE_SIDE,
            "format": "JPEG, RGB, random pixels",
            "classes": CLASSES,
            "runs": runs["images"],
        },
        "baseline": None
        if args.no_baseline
        else {
            "commit": BASELINE,
            "implementation": "components.prepare_data.prepare before Beam: the source read whole in one process, "
            "images decoded by a forked process pool",
            "csv": baseline["csv"],
            "images": baseline["images"],
        },
        "goal": goals,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.prep_scale", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000, 2_000_000])
    p.add_argument("--images", type=int, nargs="+", default=[3_000, 30_000])
    p.add_argument("--workdir", type=Path, help="keep the synthetic sources here and reuse them")
    p.add_argument("--no-baseline", action="store_true", help=f"skip the implementation before Beam ({BASELINE})")
    p.add_argument("--quick", action="store_true", help="2,000 and 20,000 rows, 300 images: checks that it works")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/prep_scale.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.images = [2_000, 20_000], [300]
    recorder = Recorder("prep_scale", args, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-prep-scale-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        result = run(args, workdir)
    print(json.dumps(result["goal"], indent=1))
    recorder.save(result, result_path("prep_scale", args.quick, args.output))


if __name__ == "__main__":
    main()
