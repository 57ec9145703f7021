"""What the default model input of an image folder costs and gives against explicit sizes.

    python -m bench.image_size [--per-class 150] [--sides 48 64 96 200 240] [--explicit 96 180] [--epochs 15]
                               [--seeds 0 1] [--workdir DIR] [--quick]

An image folder's default model input is its smallest image's shorter side, capped at 180 px, so that no image is
upsampled. The benchmark draws one folder of shapes (circle, square, triangle; `--per-class` each) of mixed sizes:
the shorter sides cycle through `--sides`, each longer side up to half as long again, so that some images are larger
than the cap and some smaller. The same images are prepared with the default size and at each `--explicit` size
(the cap among them: every image under it upsampled); the training splits must differ. Each data set is trained by
`python -m trainer.task` (`--epochs`, learning rate 0.003, one worker) once per seed of `--seeds` and evaluated on
the test split, which holds the same images for every size.

Figures of merit, per size: mean test accuracy, and the median train-model time and training split's bytes as
ratios to the default's. Goal: the default's mean test accuracy within one test example of the best explicit
size's, at its fraction of the training time. Each seed is one training run: times of one size vary between seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import ROOT
from bench.results import Recorder, result_path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CLASSES = ("circle", "square", "triangle")
CAP = 180  # components.lib.prep.sources.MAX_IMAGE_SIZE, checked in main


def write_mixed_shapes(root: Path, per_class: int, sides: list[int], seed: int = 0) -> list[tuple[int, int]]:
    """An image folder of drawn shapes (`per_class` PNGs per class) whose shorter sides cycle through `sides`, the
    longer side 1.0-1.5× the shorter, landscape or portrait at random; returns every image's (width, height)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    sizes = []
    for name in CLASSES:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            short = sides[i % len(sides)]
            long = int(round(short * rng.uniform(1.0, 1.5)))
            width, height = (long, short) if rng.random() < 0.5 else (short, long)
            background = tuple(int(v) for v in rng.integers(0, 100, 3))
            img = Image.new("RGB", (width, height), background)
            r = rng.uniform(0.2, 0.4) * short
            cx, cy = rng.uniform(r, width - r), rng.uniform(r, height - r)
            fill = tuple(int(v) for v in rng.integers(150, 256, 3))
            draw = ImageDraw.Draw(img)
            if name == "circle":
                draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
            elif name == "square":
                draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
            else:
                draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
            img.save(root / name / f"{name}_{i:04d}.png")
            sizes.append((width, height))
    return sizes


def shards_digest(data_dir: Path) -> tuple[int, str]:
    """Bytes and sha256 of the training split's shards (what the model is trained on)."""
    digest, size = hashlib.sha256(), 0
    for shard in sorted(data_dir.glob("train-*")):
        content = shard.read_bytes()
        digest.update(content)
        size += len(content)
    return size, digest.hexdigest()[:16]


def run_size(name: str, image_size: int, images: Path, work: Path, epochs: int, seeds: list[int]) -> dict:
    from components.lib.evaluation import evaluate_saved_model
    from components.prepare_data import prepare

    data = work / f"data-{name}"
    started = time.perf_counter()
    stats = prepare(str(images), str(data), num_workers=1, image_size=image_size, processes=1)
    prep_seconds = time.perf_counter() - started
    train_bytes, digest = shards_digest(data)
    runs = []
    for seed in seeds:
        job = work / f"job-{name}-{seed}"
        command = [
            sys.executable,
            "-m",
            "trainer.task",
            "--data-dir",
            str(data),
            "--job-dir",
            str(job),
            "--epochs",
            str(epochs),
            "--learning-rate",
            "0.003",
            "--seed",
            str(seed),
        ]
        print("$", " ".join(command), flush=True)
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        train_seconds = time.perf_counter() - started
        accuracy = evaluate_saved_model(str(job / "model"), str(data)).accuracy
        runs.append({"seed": seed, "test_accuracy": accuracy, "train_model_seconds": round(train_seconds, 2)})
        print(f"  {name}: seed {seed} test accuracy {accuracy:.4f}, train-model {train_seconds:.1f} s", flush=True)
    return {
        "run": name,
        "image_size_option": image_size,
        "input_shape": stats["input_shape"],
        "image_size": stats.get("image_size"),
        "train_bytes": train_bytes,
        "train_sha256": digest,
        "prepare_seconds": round(prep_seconds, 2),
        "test_examples": stats["splits"]["test"]["examples"],
        "seeds": runs,
        "test_accuracy_mean": round(statistics.mean(r["test_accuracy"] for r in runs), 4),
        "train_model_seconds_median": round(statistics.median(r["train_model_seconds"] for r in runs), 2),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.image_size", description=__doc__.splitlines()[0])
    p.add_argument("--per-class", type=int, default=150)
    p.add_argument("--sides", type=int, nargs="+", default=[48, 64, 96, 200, 240], help="images' shorter sides")
    p.add_argument("--explicit", type=int, nargs="+", default=[96, CAP], help="explicit sizes to compare")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds per size")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--quick", action="store_true", help="10 a class, sides 24 32 200, explicit 64, 2 epochs, one seed")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/image_size.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.per_class, args.sides, args.explicit, args.epochs, args.seeds = 10, [24, 32, 200], [64], 2, [0]
    from components.lib.prep.sources import MAX_IMAGE_SIZE

    assert MAX_IMAGE_SIZE == CAP, f"the cap is {MAX_IMAGE_SIZE} px now: update bench/image_size.py"
    default_size = min(min(args.sides), CAP)
    if default_size in args.explicit:
        p.error(f"--explicit {default_size} is the default size: the two data sets would be the same")
    recorder = Recorder("image_size", args, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-image-size-") as tmp:
        work = args.workdir or Path(tmp)
        sizes = write_mixed_shapes(work / "shapes", args.per_class, args.sides)
        runs = [run_size("default", 0, work / "shapes", work, args.epochs, args.seeds)]
        runs += [run_size(f"explicit-{s}", s, work / "shapes", work, args.epochs, args.seeds) for s in args.explicit]
    default, explicit = runs[0], runs[1:]
    digests = {r["train_sha256"] for r in runs}
    assert len(digests) == len(runs), "two of the prepared data sets are the same bytes"
    best = max(explicit, key=lambda r: r["test_accuracy_mean"])
    one_example = 1 / default["test_examples"]  # every run's test split is the same images
    met = default["test_accuracy_mean"] >= best["test_accuracy_mean"] - one_example - 1e-9
    shorter = [min(w, h) for w, h in sizes]
    result = {
        "data": {
            "classes": list(CLASSES),
            "per_class": args.per_class,
            "images": len(sizes),
            "shorter_sides": sorted(set(shorter)),
            "images_larger_than_cap": sum(s > CAP for s in shorter),
            "images_smaller_than_cap": sum(s < CAP for s in shorter),
            "cap_px": CAP,
        },
        "epochs": args.epochs,
        "runs": runs,
        "train_seconds_vs_default": {
            r["run"]: round(r["train_model_seconds_median"] / default["train_model_seconds_median"], 2) for r in runs
        },
        "train_bytes_vs_default": {r["run"]: round(r["train_bytes"] / default["train_bytes"], 2) for r in runs},
        "goal": {
            "default_within_one_test_example_of_best_explicit": met,
            "best_explicit": best["run"],
            "one_test_example": round(one_example, 4),
            "accuracy_gap_points": round((best["test_accuracy_mean"] - default["test_accuracy_mean"]) * 100, 2),
        },
    }
    print()
    for r in runs:
        seeds = ", ".join(f"{s['test_accuracy']:.4f}" for s in r["seeds"])
        print(
            f"{r['run']:<13} input {r['input_shape']} train split {r['train_bytes'] / 1e6:.1f} MB; test accuracy "
            f"mean {r['test_accuracy_mean']:.4f} ({seeds}); "
            f"train-model median {r['train_model_seconds_median']:.1f} s"
            f" ({result['train_seconds_vs_default'][r['run']]:.2f}× the default's)"
        )
    print(f"image size (default run): {default['image_size']['reason'] if default['image_size'] else '?'}")
    print(
        f"goal: the default within one test example ({one_example:.4f}) of the best explicit size "
        f"({best['run']}) ... {'MET' if met else 'NOT MET'}"
    )
    recorder.save(result, result_path("image_size", args.quick, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
