"""Size, accuracy drop and one-example latency of each TFLite quantization mode against float32.

    python -m bench.tflite [--epochs 20] [--image-size 0] [--repeats 5] [--warmup 50] [--workdir DIR] [--quick]

Trains the digits model (builtin:digits, `python -m trainer.task`; `--image-size` sets its input size, so that a
larger model can be measured too: `make bench` runs it a second time with `--image-size 32`), converts it in every
mode of the quantize step (float32, dynamic, float16, int8 with float input and output) and once more in int8 with
int8 input and output (int8-io), and measures each `.tflite` file: its bytes against float32's (its weights alone
too: the rest is the flatbuffer's overhead), its accuracy drop in points against the SavedModel on the test split,
and the latency of one-example calls with LiteRT on one thread. A call is what a caller holding float32 pixels pays:
for int8-io, quantizing the input and dequantizing the output are inside the timed call. Each model first answers
`--warmup` unmeasured calls, then the test split is run `--repeats` times; the SavedModel's `serving_default`,
called from Python one example at a time, is timed the same way as a reference.

Goal: int8 at most 0.3× float32's bytes, with at most 0.5 point of accuracy drop. The part of the flatbuffer that
does not shrink (quantization parameters, int32 biases and shapes, tensor tables) weighs more in a small model,
hence the larger one. float16 saves bytes, not time: its weights are expanded back to float32 when loaded.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import train_digits
from bench.results import Recorder, result_path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def saved_model_latency(model_dir: str, inputs: np.ndarray, warmup: int, repeats: int) -> dict:
    """Latency of one-example calls of the SavedModel's serving_default from Python (float32 in, probabilities out)."""
    import tensorflow as tf

    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    name = next(iter(signature.structured_input_signature[1]))

    def call(x):
        return signature(**{name: tf.constant(x[None])})["probabilities"].numpy()

    return _timed(call, inputs, warmup, repeats)


def _timed(call, inputs: np.ndarray, warmup: int, repeats: int) -> dict:
    """`warmup` unmeasured calls, then `repeats` passes over `inputs`, each call timed: mean and p95 in ms."""
    for k in range(warmup):
        call(inputs[k % len(inputs)])
    latencies = []
    total = 0.0
    for _ in range(repeats):
        start_pass = time.perf_counter()
        for x in inputs:
            start = time.perf_counter()
            call(x)
            latencies.append(time.perf_counter() - start)
        total += time.perf_counter() - start_pass
    ms = np.array(latencies) * 1000
    return {
        "latency_ms_mean": total / len(latencies) * 1000,
        "latency_ms_p95": float(np.percentile(ms, 95)),
        "calls": len(latencies),
        "warmup_calls": warmup,
    }


def tflite_latency(model_bytes: bytes, inputs: np.ndarray, labels: np.ndarray, warmup: int, repeats: int) -> dict:
    """Accuracy and single-example latency (LiteRT, one thread) of a `.tflite` model called with float32 pixels: an
    int8 input is quantized (scale, zero point) and an int8 output dequantized inside the timed call."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_bytes, num_threads=1)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    in_scale, in_zero = inp["quantization"]
    out_scale, out_zero = out["quantization"]
    in_dtype, out_dtype = np.dtype(inp["dtype"]), np.dtype(out["dtype"])
    quantized_in = in_dtype != np.float32
    low, high = (np.iinfo(in_dtype).min, np.iinfo(in_dtype).max) if quantized_in else (0, 0)

    def call(x: np.ndarray) -> np.ndarray:
        if quantized_in:
            x = np.clip(np.round(x / in_scale + in_zero), low, high).astype(in_dtype)
        interpreter.set_tensor(inp["index"], x[None])
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])[0]
        if out_dtype != np.float32:
            y = (y.astype(np.float32) - out_zero) * out_scale
        return y

    predictions = np.array([int(np.argmax(call(x))) for x in inputs])
    return {
        "accuracy": float(np.mean(predictions == labels)),
        "input_dtype": in_dtype.name,
        "output_dtype": out_dtype.name,
        "input_quantization": [float(in_scale), int(in_zero)] if quantized_in else None,
        **_timed(call, inputs, warmup, repeats),
    }


def model_parameters(model_dir: str) -> int:
    """The SavedModel's weights: the elements of its variables."""
    import tensorflow as tf

    return int(sum(np.prod(v.shape) for v in tf.saved_model.load(model_dir).variables))


def weight_bytes(model_bytes: bytes) -> int:
    """Bytes of constant buffers (the weights) in a `.tflite` file, without the flatbuffer's fixed overhead."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    return sum(len(b.data) for b in model.buffers if b.data is not None)


def run(workdir: Path, epochs: int, image_size: int, warmup: int, repeats: int) -> dict:
    from components.quantize_model import convert, inspect_tflite, quantize, representative_inputs
    from trainer import data

    model_dir = train_digits(workdir, epochs, "--image-size", str(image_size))
    report = quantize(model_dir, str(workdir / "data"), str(workdir / "tflite"))
    stats = data.load_stats(str(workdir / "data"))
    test = [(x.numpy(), y.numpy()) for x, y in data.make_dataset(str(workdir / "data"), "test", stats, 256, False)]
    inputs = np.concatenate([x for x, _ in test]).astype(np.float32)
    labels = np.concatenate([y for _, y in test])
    saved = saved_model_latency(model_dir, inputs, warmup, repeats)
    parameters = model_parameters(model_dir)
    models = {m["mode"]: (Path(m["path"]).read_bytes(), m) for m in report["modes"] if "path" in m}
    int8_io = convert(
        model_dir,
        stats["input_shape"],
        "int8",
        representative_inputs(str(workdir / "data"), stats),
        int8_io=True,
    )
    models["int8-io"] = (int8_io, {"mode": "int8-io", **inspect_tflite(int8_io)})
    reference = report["saved_model_accuracy"]
    measured = {mode: tflite_latency(b, inputs, labels, warmup, repeats) for mode, (b, _) in models.items()}
    float_bytes, float_weights = len(models["float32"][0]), weight_bytes(models["float32"][0])
    float_ms = measured["float32"]["latency_ms_mean"]
    rows = []
    for mode, (model_bytes, m) in models.items():
        t = measured[mode]
        rows.append(
            {
                "mode": mode,
                "size_bytes": len(model_bytes),
                "size_ratio": round(len(model_bytes) / float_bytes, 4),
                "weight_bytes": weight_bytes(model_bytes),
                "weight_bytes_ratio": round(weight_bytes(model_bytes) / float_weights, 4),
                "overhead_bytes": len(model_bytes) - weight_bytes(model_bytes),
                "accuracy": t["accuracy"],
                "accuracy_drop_points": round((reference - t["accuracy"]) * 100, 4),
                "input_dtype": t["input_dtype"],
                "output_dtype": t["output_dtype"],
                "input_quantization": t["input_quantization"],
                "latency_ms_mean": round(t["latency_ms_mean"], 4),
                "latency_ms_p95": round(t["latency_ms_p95"], 4),
                "latency_vs_float32_tflite": round(t["latency_ms_mean"] / float_ms, 3),
                "latency_vs_saved_model": round(t["latency_ms_mean"] / saved["latency_ms_mean"], 4),
                "weight_types": m["weight_types"],
            }
        )
    int8 = next(r for r in rows if r["mode"] == "int8")
    return {
        "dataset": "builtin:digits",
        "epochs": epochs,
        "model_input_size": image_size or 8,
        "test_examples": report["test_examples"],
        "model_parameters": parameters,
        "latency": {
            "warmup_calls": warmup,
            "timed_passes": repeats,
            "calls_per_mode": saved["calls"],
            "threads": 1,
            "call": "float32 pixels in, float32 probabilities out: int8 input quantization and output "
            "dequantization inside the timed call",
        },
        "saved_model_accuracy": reference,
        "saved_model_latency_ms": round(saved["latency_ms_mean"], 4),
        "saved_model_latency_ms_p95": round(saved["latency_ms_p95"], 4),
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
        f"SavedModel accuracy {r['saved_model_accuracy']:.4f}, SavedModel one-example call "
        f"{r['saved_model_latency_ms']:.3f} ms ({r['latency']['warmup_calls']} warm-up calls, "
        f"{r['latency']['timed_passes']} timed passes)"
    )
    print(
        f"{'mode':<9}{'in':>6}{'bytes':>9}{'size×':>8}{'weights×':>9}{'drop pt':>9}{'ms mean':>9}{'ms p95':>9}"
        f"{'vs f32':>8}{'vs SM':>8}"
    )
    for m in r["modes"]:
        print(
            f"{m['mode']:<9}{m['input_dtype']:>6}{m['size_bytes']:>9,}{m['size_ratio']:>8.3f}"
            f"{m['weight_bytes_ratio']:>9.3f}{m['accuracy_drop_points']:>9.2f}"
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
    p.add_argument("--warmup", type=int, default=50, help="unmeasured calls per model before timing (default 50)")
    p.add_argument("--repeats", type=int, default=5, help="timed passes over the test split (default 5)")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--quick", action="store_true", help="2 epochs, 10 warm-up calls, 1 pass: checks that it works")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/tflite.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.warmup, args.repeats = min(args.epochs, 2), min(args.warmup, 10), 1
    recorder = Recorder("tflite", args, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-tflite-") as tmp:
        result = run(args.workdir or Path(tmp), args.epochs, args.image_size, args.warmup, args.repeats)
    print_report(result)
    recorder.save(result, result_path("tflite", args.quick, args.output))


if __name__ == "__main__":
    main()
