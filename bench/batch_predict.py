"""The batch prediction step's instances a second on jsonl files against the bare model's `model.predict`.

    python -m bench.batch_predict [--instances 50000] [--files 1 2] [--batch-size 64] [--epochs 3] [--repeats 3]
                                  [--workdir DIR] [--quick]

Trains the digits model, writes `--instances` test images as jsonl split into N files for each N of `--files` (read
N at a time), and runs the batch prediction step's code on them (read, parse, convert, predict, write Vertex's
output layout), each run in a fresh process as the pipeline step runs it: with its default parsing in worker
processes and, alternating, with the parsing in the predicting process. Baseline: the same SavedModel's
`model.predict` on the same images as one in-memory float32 array (no files, no JSON), with TensorFlow's default
threads (the goal's baseline) and with one TensorFlow thread (what the step gives its model on 2 CPUs). Loading the
model is left out of both rates (reported apart, and in a ratio with it). Medians of `--repeats` runs; the class
ids must agree with the baseline's.

Figure of merit: the step's instances a second / `model.predict`'s. Goal: ≥ 0.8.
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

from bench import train_digits
from bench.results import Recorder, result_path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
    return np.array(
        [
            json.loads(line)["prediction"]["class_id"]
            for path in sorted(Path(output_directory).glob("prediction.results-*"))
            for line in path.read_text().splitlines()
        ]
    )


def batch_predict_in_a_process(**kwargs) -> dict:
    """`batch_predict(**kwargs)` in a fresh interpreter (its pool forks before TensorFlow runs, as in the step)."""
    code = (
        "import json, sys; from components.run_batch_prediction import batch_predict; "
        "print(json.dumps(batch_predict(**json.loads(sys.argv[1]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kwargs)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


MODES = {"parse processes": None, "one process": 0}  # parse_processes: the default, and parsing in the predictor


def predict_one_thread(model_dir: str, images_file: str, batch_size: int, repeats: int) -> list[float]:
    """`model.predict` throughput (instances/s) with TensorFlow on one intra-op and one inter-op thread (what
    batch_predict gives the model on 2 CPUs), in a fresh process (the pools are fixed once TensorFlow starts)."""
    code = (
        "import json, sys, numpy as np, tf_keras; from bench.batch_predict import predict_throughput; "
        "m = tf_keras.models.load_model(sys.argv[1]); x = np.load(sys.argv[2]); "
        "print(json.dumps([predict_throughput(m, x, int(sys.argv[3]))[0] for _ in range(int(sys.argv[4]))]))"
    )
    env = dict(os.environ, TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", code, model_dir, images_file, str(batch_size), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(workdir: Path, instances: int, file_counts: list[int], batch_size: int, epochs: int, repeats: int) -> dict:
    import tensorflow as tf

    from trainer import data

    model_dir = train_digits(workdir, epochs)
    stats = data.load_stats(str(workdir / "data"))
    test = np.concatenate(
        [x.numpy() for x, _ in data.make_dataset(str(workdir / "data"), "test", stats, 256, training=False)]
    ).astype(np.float32)
    images = np.resize(test, (instances, *test.shape[1:]))
    start = time.perf_counter()
    tf.saved_model.load(model_dir)
    load_seconds = time.perf_counter() - start  # what batch_predict spends before its first batch
    import tf_keras

    model = tf_keras.models.load_model(model_dir)
    baseline_runs = [predict_throughput(model, images, batch_size) for _ in range(repeats)]
    baseline = statistics.median(r for r, _ in baseline_runs)
    np.save(workdir / "images.npy", images)
    one_thread = predict_one_thread(model_dir, str(workdir / "images.npy"), batch_size, repeats)
    rows = []
    load_before = [round(x, 2) for x in os.getloadavg()]
    for files in file_counts:
        pattern = write_jsonl(images, workdir / f"in-{files}", files)
        runs: dict[str, list] = {mode: [] for mode in MODES}
        for r in range(repeats):
            for mode in list(MODES) if r % 2 == 0 else list(MODES)[::-1]:
                runs[mode].append(
                    batch_predict_in_a_process(
                        model_path=model_dir,
                        instances=pattern,
                        instances_format="jsonl",
                        output_prefix=str(workdir / "out"),
                        model_display_name="digits",
                        batch_size=batch_size,
                        parallelism=files,
                        parse_processes=MODES[mode],
                    )
                )
        for mode, done in runs.items():
            seconds = statistics.median(r["seconds"] for r in done)
            steady = instances / max(seconds - load_seconds, 1e-9)
            rows.append(
                {
                    "files": files,
                    "parallelism": files,
                    "parsing": mode,
                    "seconds_median": seconds,
                    "seconds": [r["seconds"] for r in done],
                    "instances_per_second": round(steady, 1),
                    "ratio": round(steady / baseline, 3),
                    "ratio_to_one_thread_predict": round(steady / statistics.median(one_thread), 3),
                    "instances_per_second_with_load": round(instances / seconds, 1),
                    "ratio_with_load": round(instances / seconds / baseline, 3),
                    "failed": max(r["failed"] for r in done),
                    "class_ids_match": bool(
                        np.array_equal(class_ids(done[-1]["output_directory"]), baseline_runs[-1][1])
                    ),
                }
            )
    return {
        "dataset": "builtin:digits",
        "input_shape": list(images.shape[1:]),
        "instances": instances,
        "instances_format": "jsonl",
        "batch_size": batch_size,
        "repeats": repeats,
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "model_load_seconds": round(load_seconds, 3),
        "model_predict_instances_per_second": round(baseline, 1),
        "model_predict_instances_per_second_runs": [round(r, 1) for r, _ in baseline_runs],
        "model_predict_one_tensorflow_thread_instances_per_second": round(statistics.median(one_thread), 1),
        "model_predict_one_tensorflow_thread_runs": [round(r, 1) for r in one_thread],
        "goal": "ratio >= 0.8",
        "batch_predict": rows,
    }


def print_report(r: dict) -> None:
    print(
        f"\nbatch_predict on {r['instances']:,} {r['dataset']} jsonl instances {r['input_shape']}, batch size "
        f"{r['batch_size']}, median of {r['repeats']}; model load {r['model_load_seconds']} s"
    )
    print(
        f"model.predict on the same in-memory arrays: {r['model_predict_instances_per_second']:,.0f} instances/s "
        f"(TensorFlow's default threads), {r['model_predict_one_tensorflow_thread_instances_per_second']:,.0f} "
        f"with one TensorFlow thread; load average {r['loadavg_before'][0]:.2f} before, "
        f"{r['loadavg_after'][0]:.2f} after"
    )
    print(
        f"{'parsing':<16}{'files':>6}{'inst/s':>10}{'ratio':>8}{'vs 1 thr':>9}{'with load':>11}{'ratio':>8}"
        f"{'seconds':>9}{'failed':>8}{'ids match':>11}"
    )
    for row in r["batch_predict"]:
        print(
            f"{row['parsing']:<16}{row['files']:>6}{row['instances_per_second']:>10,.0f}{row['ratio']:>8.3f}"
            f"{row['ratio_to_one_thread_predict']:>9.3f}"
            f"{row['instances_per_second_with_load']:>11,.0f}{row['ratio_with_load']:>8.3f}"
            f"{row['seconds_median']:>9.2f}{row['failed']:>8}{str(row['class_ids_match']):>11}"
        )
    best = max(row["ratio"] for row in r["batch_predict"] if row["parsing"] == "parse processes")
    print(f"goal batch_predict (its defaults) >= 0.8x model.predict: {'PASS' if best >= 0.8 else 'FAIL'} ({best:.2f}x)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.batch_predict", description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=50_000)
    p.add_argument("--files", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--quick", action="store_true", help="2,000 instances, 1 file, 1 epoch, 1 run: checks that it works")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/batch_predict.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.instances, args.files, args.epochs, args.repeats = 2000, [1], 1, 1
    recorder = Recorder("batch_predict", args, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-batch-predict-") as tmp:
        result = run(args.workdir or Path(tmp), args.instances, args.files, args.batch_size, args.epochs, args.repeats)
    print_report(result)
    recorder.save(result, result_path("batch_predict", args.quick, args.output))


if __name__ == "__main__":
    main()
