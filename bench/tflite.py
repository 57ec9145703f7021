"""TFLite benchmark: size, accuracy drop and single-example latency of each quantization mode.

    python -m bench.tflite [--epochs 20] [--image-size 0] [--workdir DIR]

Trains the digits model once (builtin:digits, `python -m trainer.task`; `--image-size` sets the model's input size,
so a larger model can be measured too), converts it in every mode, and measures in one run: size ratio vs the float32 `.tflite`, accuracy drop (points) vs the SavedModel, mean single-example latency
(LiteRT, one thread) as a ratio to the float32 `.tflite` and to the SavedModel's `serving_default` called from
Python one example at a time. Goal: int8 ≤ 0.3× size with ≤ 0.5 point drop. Results: bench/results/tflite.json.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import save, train_digits

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = Path(__file__).resolve().parent / "results" / "tflite.json"


def saved_model_latency_ms(model_dir: str, inputs: np.ndarray) -> float:
    """Mean latency of one-example calls of the SavedModel's serving_default from Python."""
    import tensorflow as tf

    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    name = next(iter(signature.structured_input_signature[1]))
    for x in inputs[:20]:  # warm-up (tracing, thread pools)
        signature(**{name: tf.constant(x[None])})
    start = time.perf_counter()
    for x in inputs:
        signature(**{name: tf.constant(x[None])})["probabilities"].numpy()
    return (time.perf_counter() - start) / len(inputs) * 1000


def weight_bytes(path: str) -> int:
    """Bytes of constant buffers (the weights) in a `.tflite` file, without the flatbuffer's fixed overhead."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(Path(path).read_bytes()))
    return sum(len(b.data) for b in model.buffers if b.data is not None)


def run(workdir: Path, epochs: int, image_size: int) -> dict:
    from components.quantize_model import quantize
    from trainer import data

    model_dir = train_digits(workdir, epochs, "--image-size", str(image_size))
    report = quantize(model_dir, str(workdir / "data"), str(workdir / "tflite"))
    stats = data.load_stats(str(workdir / "data"))
    inputs = np.concatenate(
        [x.numpy() for x, _ in data.make_dataset(str(workdir / "data"), "test", stats, 256, training=False)]
    ).astype(np.float32)
    saved_ms = saved_model_latency_ms(model_dir, inputs)
    float_ms = next(m for m in report["modes"] if m["mode"] == "float32")["latency_ms_mean"]
    weights = {m["mode"]: weight_bytes(m["path"]) for m in report["modes"]}
    rows = []
    for m in report["modes"]:
        rows.append(
            {
                "mode": m["mode"],
                "size_bytes": m["size_bytes"],
                "size_ratio": m["size_ratio"],
                "weight_bytes_ratio": round(weights[m["mode"]] / weights["float32"], 4),
                "accuracy": m["accuracy"],
                "accuracy_drop_points": m["accuracy_drop_points"],
                "latency_ms_mean": round(m["latency_ms_mean"], 4),
                "latency_ms_p95": round(m["latency_ms_p95"], 4),
                "latency_vs_float32_tflite": round(m["latency_ms_mean"] / float_ms, 3),
                "latency_vs_saved_model": round(m["latency_ms_mean"] / saved_ms, 4),
                "weight_types": m["weight_types"],
            }
        )
    int8 = next(r for r in rows if r["mode"] == "int8")
    return {
        "benchmark": "tflite",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "dataset": "builtin:digits",
        "epochs": epochs,
        "model_input_size": image_size or 8,
        "test_examples": report["test_examples"],
        "saved_model_accuracy": report["saved_model_accuracy"],
        "saved_model_latency_ms": round(saved_ms, 4),
        "modes": rows,
        "goal": {
            "int8_size_ratio_max": 0.3,
            "int8_drop_max_points": 0.5,
            "size_met": int8["size_ratio"] <= 0.3,
            "drop_met": int8["accuracy_drop_points"] <= 0.5,
        },
    }


def print_report(r: dict) -> None:
    print(
        f"\nTFLite on {r['dataset']} (model input {r['model_input_size']}px, {r['test_examples']} test examples), "
        f"SavedModel accuracy "
        f"{r['saved_model_accuracy']:.4f}, SavedModel one-example call {r['saved_model_latency_ms']:.3f} ms"
    )
    print(
        f"{'mode':<9}{'bytes':>9}{'size×':>8}{'weights×':>9}{'drop pt':>9}{'ms mean':>9}{'ms p95':>9}{'vs f32':>8}"
        f"{'vs SM':>8}"
    )
    for m in r["modes"]:
        print(
            f"{m['mode']:<9}{m['size_bytes']:>9,}{m['size_ratio']:>8.3f}{m['weight_bytes_ratio']:>9.3f}"
            f"{m['accuracy_drop_points']:>9.2f}"
            f"{m['latency_ms_mean']:>9.4f}{m['latency_ms_p95']:>9.4f}{m['latency_vs_float32_tflite']:>8.2f}"
            f"{m['latency_vs_saved_model']:>8.4f}"
        )
    for m in r["modes"]:
        if m["latency_vs_float32_tflite"] > 1:
            print(f"note: {m['mode']} is slower than the float32 .tflite ({m['latency_vs_float32_tflite']:.2f}×)")
    g = r["goal"]
    print(
        f"goal int8 size <= 0.3x ... {'MET' if g['size_met'] else 'NOT MET'}; "
        f"int8 drop <= 0.5 pt ... {'MET' if g['drop_met'] else 'NOT MET'}"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.tflite", description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--image-size", type=int, default=0, help="model input size (0: the data's 8 px)")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-tflite-") as tmp:
        result = run(args.workdir or Path(tmp), args.epochs, args.image_size)
    print_report(result)
    save(result, args.output)


if __name__ == "__main__":
    main()
