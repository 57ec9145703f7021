"""Batch prediction benchmark: `batch_predict` throughput on jsonl instances vs raw `model.predict`.

    python -m bench.batch_predict [--instances 50000] [--files 1 2] [--batch-size 64] [--epochs 3] [--workdir DIR]

Trains the digits model once (builtin:digits, `python -m trainer.task`), writes `--instances` test images (the test
split repeated) as jsonl split into N files for each N of `--files` (parallelism N), and runs `batch_predict` on
them (read, parse, convert, predict, write the Vertex layout). Baseline: the same SavedModel loaded with tf-keras and
`model.predict(images, batch_size)` on the same images as one in-memory float32 array (no I/O, no JSON). Both
throughputs exclude loading the model (measured once here and subtracted from `batch_predict`'s own time); the
end-to-end figure with the load is reported too. Medians of `--repeats` runs; class ids must agree.
Results: bench/results/batch_predict.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import save

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = Path(__file__).resolve().parent / "results" / "batch_predict.json"


def predict_throughput(model, images: np.ndarray, batch_size: int) -> tuple[float, np.ndarray]:
    """Instances/second of `model.predict` on in-memory arrays, and the class ids."""
    model.predict(images[:batch_size], batch_size=batch_size, verbose=0)  # warm-up
    start = time.perf_counter()
    probabilities = model.predict(images, batch_size=batch_size, verbose=0)
    return len(images) / (time.perf_counter() - start), probabilities.argmax(-1)


def write_jsonl(images: np.ndarray, folder: Path, files: int) -> str:
    folder.mkdir(parents=True)
    for k, part in enumerate(np.array_split(images, files)):
        with open(folder / f"part-{k:03d}.jsonl", "w") as f:
            f.writelines(json.dumps(x.tolist()) + "\n" for x in part)
    return str(folder / "part-*.jsonl")


def class_ids(output_directory: str) -> np.ndarray:
    return np.array([json.loads(line)["prediction"]["class_id"] for path in sorted(Path(output_directory).glob(
        "prediction.results-*")) for line in path.read_text().splitlines()])


def run(workdir: Path, instances: int, file_counts: list[int], batch_size: int, epochs: int, repeats: int) -> dict:
    import tensorflow as tf

    from components.batch_predict import batch_predict
    from components.prepare_data import prepare
    from trainer import data

    prepare("builtin:digits", str(workdir / "data"), num_workers=1)
    subprocess.run([sys.executable, "-m", "trainer.task", "--data-dir", str(workdir / "data"), "--job-dir",
                    str(workdir / "job"), "--epochs", str(epochs), "--learning-rate", "0.003"],
                   check=True, capture_output=True)
    model_dir = str(workdir / "job" / "model")
    stats = data.load_stats(str(workdir / "data"))
    test = np.concatenate([x.numpy() for x, _ in data.make_dataset(str(workdir / "data"), "test", stats, 256,
                                                                   training=False)]).astype(np.float32)
    images = np.resize(test, (instances, *test.shape[1:]))
    start = time.perf_counter()
    tf.saved_model.load(model_dir)
    load_seconds = time.perf_counter() - start  # what batch_predict spends before its first batch
    import tf_keras

    model = tf_keras.models.load_model(model_dir)
    baseline_runs = [predict_throughput(model, images, batch_size) for _ in range(repeats)]
    baseline = statistics.median(r for r, _ in baseline_runs)
    rows = []
    for files in file_counts:
        pattern = write_jsonl(images, workdir / f"in-{files}", files)
        runs = [batch_predict(model_dir, pattern, "jsonl", str(workdir / "out"), "digits", batch_size=batch_size,
                              parallelism=files) for _ in range(repeats)]
        seconds = statistics.median(r["seconds"] for r in runs)
        steady = instances / max(seconds - load_seconds, 1e-9)
        rows.append({"files": files, "parallelism": files, "seconds_median": seconds,
                     "instances_per_second": round(steady, 1), "ratio": round(steady / baseline, 3),
                     "instances_per_second_with_load": round(instances / seconds, 1),
                     "ratio_with_load": round(instances / seconds / baseline, 3),
                     "failed": max(r["failed"] for r in runs),
                     "class_ids_match": bool(np.array_equal(class_ids(runs[-1]["output_directory"]),
                                                            baseline_runs[-1][1]))})
    return {"benchmark": "batch_predict", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "dataset": "builtin:digits", "input_shape": list(images.shape[1:]), "instances": instances,
            "instances_format": "jsonl", "batch_size": batch_size, "repeats": repeats, "cpu_count": os.cpu_count(),
            "model_load_seconds": round(load_seconds, 3), "model_predict_instances_per_second": round(baseline, 1),
            "goal": "ratio >= 0.8", "batch_predict": rows}


def print_report(r: dict) -> None:
    print(f"\nbatch_predict on {r['instances']:,} {r['dataset']} jsonl instances {r['input_shape']}, batch size "
          f"{r['batch_size']}, {r['cpu_count']} CPUs, median of {r['repeats']}; model load {r['model_load_seconds']} s")
    print(f"model.predict on the same in-memory arrays: {r['model_predict_instances_per_second']:,.0f} instances/s")
    print(f"{'files':>6}{'inst/s':>10}{'ratio':>8}{'with load':>11}{'ratio':>8}{'seconds':>9}{'failed':>8}"
          f"{'ids match':>11}")
    for row in r["batch_predict"]:
        print(f"{row['files']:>6}{row['instances_per_second']:>10,.0f}{row['ratio']:>8.3f}"
              f"{row['instances_per_second_with_load']:>11,.0f}{row['ratio_with_load']:>8.3f}"
              f"{row['seconds_median']:>9.2f}{row['failed']:>8}{str(row['class_ids_match']):>11}")
    best = max(row["ratio"] for row in r["batch_predict"])
    print(f"goal batch_predict >= 0.8x model.predict: {'PASS' if best >= 0.8 else 'FAIL'} ({best:.2f}x)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.batch_predict", description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=50_000)
    p.add_argument("--files", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-batch-predict-") as tmp:
        result = run(args.workdir or Path(tmp), args.instances, args.files, args.batch_size, args.epochs,
                     args.repeats)
    print_report(result)
    save(result, args.output)


if __name__ == "__main__":
    main()
