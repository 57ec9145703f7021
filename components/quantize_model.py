"""TFLite quantization with an accuracy gate.

Converts the blessed SavedModel (`serving_default`, fixed to one example of the prepared input shape, output
`probabilities`) to `.tflite` in one or more modes, evaluates each file on the test split with the LiteRT
interpreter (one thread), and publishes the chosen mode only when its accuracy drop against the SavedModel stays
within `max_accuracy_drop` points and it needs no Select TF (Flex) ops (unless allowed).

Modes: `float32` (no optimization), `dynamic` (int8 weights), `float16` (float16 weights), `int8` (full integer,
calibrated on ~200 training examples; `int8_io` also makes the input/output tensors int8). Progress lines
(`core.progress`, stage `tflite`) say which mode is being converted and evaluated.

Quantization-aware training (`qat`, int8 only): when the post-training int8 file misses the accuracy gate (and needs
no Flex ops), the trained model is fine-tuned with fake quantization (`components.lib.qat`), converted to int8 with
the same representative examples, evaluated and gated again; the report keeps both results (`modes`' int8 and `qat`)
and `published_from` says which one was published.
"""

import os
import time
from typing import Any

import numpy as np
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model, Output

from components.lib.qat import QatError, QatOptions
from core import progress
from core.units import size

MODES = ("float32", "dynamic", "float16", "int8")
POST_TRAINING = "post-training quantization"
QUANTIZATION_AWARE = "quantization-aware training"
POST_TRAINING_ROW = ", post-training"  # the int8 row's suffix in the tables when quantization-aware training ran
TYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 9: "int8", 7: "int16", 10: "float64"}


class QuantizationError(ValueError):
    """The model cannot be quantized as asked (user-facing message)."""


def check_modes(modes) -> list[str]:
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise QuantizationError(f"unknown TFLite mode(s) {unknown or modes}; choose from: {', '.join(MODES)}")
    return list(dict.fromkeys(modes))


def representative_inputs(data_dir: str, stats: dict, count: int = 200) -> np.ndarray:
    """Up to `count` training inputs (float32) for full-integer calibration."""
    from trainer import data

    batches = [x.numpy() for x, _ in data.make_dataset(data_dir, "train", stats, 50, training=False)]
    inputs = np.concatenate(batches)[:count].astype(np.float32) if batches else np.empty((0,))
    if len(inputs) == 0:
        raise QuantizationError(f"no representative examples in the train split of {data_dir}")
    return inputs


def _edge_function(model_dir: str, input_shape):
    import tensorflow as tf

    if not tf.io.gfile.exists(f"{model_dir}/saved_model.pb"):
        raise QuantizationError(f"no SavedModel at {model_dir} (saved_model.pb missing)")
    loaded = tf.saved_model.load(model_dir)
    signature = loaded.signatures["serving_default"]
    input_name = next(iter(signature.structured_input_signature[1]))

    @tf.function(input_signature=[tf.TensorSpec([1, *input_shape], tf.float32, name=input_name)])
    @tf.autograph.experimental.do_not_convert
    def edge(inputs):
        return {"probabilities": signature(**{input_name: inputs})["probabilities"]}

    return loaded, edge.get_concrete_function()


def convert(
    model_dir: str,
    input_shape,
    mode: str,
    representative: np.ndarray | None = None,
    int8_io: bool = False,
    allow_flex: bool = False,
) -> bytes:
    """The `.tflite` bytes of the SavedModel in `mode`; raises QuantizationError when Flex ops would be needed."""
    import tensorflow as tf

    check_modes([mode])
    loaded, concrete = _edge_function(model_dir, input_shape)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], loaded)
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if mode == "int8" else tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.target_spec.supported_ops = ops + ([tf.lite.OpsSet.SELECT_TF_OPS] if allow_flex else [])
    if mode != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if mode == "int8":
        if representative is None or len(representative) == 0:
            raise QuantizationError("int8 mode needs representative examples (none given)")
        converter.representative_dataset = lambda: ([x[None]] for x in representative)
        if int8_io:
            converter.inference_input_type = converter.inference_output_type = tf.int8
    try:
        return converter.convert()
    except Exception as e:  # the converter reports unsupported ops as a ConverterError
        if "flex" in str(e).lower() or "select tf ops" in str(e).lower():
            raise QuantizationError(f"{mode}: the model needs Select TF (Flex) ops; not allowed") from None
        raise


def inspect_tflite(model_bytes: bytes) -> dict:
    """Operators (and Flex ops) and the types of the constant (weight) tensors present in a `.tflite` file."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    custom = [
        c.customCode.decode() if isinstance(c.customCode, bytes) else c.customCode
        for c in model.operatorCodes
        if c.customCode
    ]
    weights: dict[str, int] = {}
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            buffer = model.buffers[tensor.buffer].data
            if buffer is not None and len(buffer):
                name = TYPE_NAMES.get(tensor.type, str(tensor.type))
                weights[name] = weights.get(name, 0) + 1
    return {"flex_ops": [c for c in custom if c.startswith("Flex")], "custom_ops": custom, "weight_types": weights}


WARMUP_CALLS = 10  # untimed calls before the latencies: the interpreter's first calls allocate and page in


def evaluate_tflite(model_bytes: bytes, inputs: np.ndarray, labels: np.ndarray) -> dict:
    """Accuracy and single-example latency (one thread, after a warm-up) of a `.tflite` model with the LiteRT
    interpreter; a call takes float32 in and gives float32 out, so an int8 model's latency includes quantizing its
    input and dequantizing its output, as a caller pays them."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_bytes, num_threads=1)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    in_scale, in_zero = inp["quantization"]
    out_scale, out_zero = out["quantization"]

    def call(x: np.ndarray) -> np.ndarray:
        if inp["dtype"] != np.float32:
            x = np.clip(np.round(x / in_scale + in_zero), -128, 127)
        interpreter.set_tensor(inp["index"], x[None].astype(inp["dtype"]))
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])[0]
        return (y.astype(np.float32) - out_zero) * out_scale if out["dtype"] != np.float32 else y

    for x in inputs[:WARMUP_CALLS]:
        call(x)
    predictions, latencies = [], []
    for x in inputs:
        start = time.perf_counter()
        y = call(x)
        latencies.append(time.perf_counter() - start)
        predictions.append(int(np.argmax(y)))
    latencies_ms = np.array(latencies) * 1000
    return {
        "accuracy": float(np.mean(np.array(predictions) == labels)),
        "latency_ms_mean": float(latencies_ms.mean()),
        "latency_ms_p95": float(np.percentile(latencies_ms, 95)),
        "input": {"dtype": np.dtype(inp["dtype"]).name, "shape": inp["shape"].tolist()},
        "output": {"dtype": np.dtype(out["dtype"]).name, "shape": out["shape"].tolist()},
    }


def publish_decision(
    result: dict, max_accuracy_drop: float, allow_flex: bool, name: str | None = None
) -> tuple[bool, str]:
    """Whether a mode's result may be published, and why (the reason names the result `name`, else its mode)."""
    mode = name or result["mode"]
    if "error" in result:
        return False, result["error"]
    if result["flex_ops"] and not allow_flex:
        return False, f"{mode}: needs Select TF (Flex) ops {result['flex_ops']}"
    if result["accuracy_drop_points"] > max_accuracy_drop:
        return False, (
            f"{mode}: accuracy drop {result['accuracy_drop_points']:.2f} points exceeds "
            f"max_accuracy_drop {max_accuracy_drop:.2f}"
        )
    return True, (
        f"{mode}: accuracy drop {result['accuracy_drop_points']:.2f} points within "
        f"{max_accuracy_drop:.2f}, {size(result['size_bytes'])}"
    )


def _measured(model_bytes: bytes, path: str, inputs: np.ndarray, labels: np.ndarray, reference: float) -> dict:
    """A written `.tflite` file's report fields: path, size, operators and weight types, accuracy, latency and
    the accuracy drop in points against the `reference` accuracy."""
    with open(path, "wb") as f:
        f.write(model_bytes)
    result = {
        "path": path,
        "size_bytes": len(model_bytes),
        **inspect_tflite(model_bytes),
        **evaluate_tflite(model_bytes, inputs, labels),
    }
    result["accuracy_drop_points"] = round((reference - result["accuracy"]) * 100, 4)
    return result


def qat_name(options: QatOptions) -> str:
    """How the reasons and the tables name the int8 file of quantization-aware training."""
    return f"int8 after {QUANTIZATION_AWARE} ({options.epochs} epoch{'s' if options.epochs != 1 else ''})"


def quantization_aware(
    model_dir: str,
    data_dir: str,
    input_shape: list,
    output_dir: str,
    options: QatOptions,
    test: tuple[np.ndarray, np.ndarray],
    representative: np.ndarray,
    reference: float,
    int8_io: bool,
    allow_flex: bool,
) -> dict:
    """Fine-tune with fake quantization, convert to int8 and measure: the `qat` entry of the report (with `error`
    instead of the measurements when the model cannot be fine-tuned or converted)."""
    from components.lib import qat

    entry: dict[str, Any] = {
        "mode": "int8",
        "name": qat_name(options),
        "epochs": options.epochs,
        "learning_rate": options.learning_rate,
    }

    def epoch_line(epoch: int, logs: dict) -> None:
        progress.emit(
            "tflite",
            "qat_epoch",
            f"{QUANTIZATION_AWARE} epoch {epoch}/{options.epochs}: loss {logs['loss']:.4f}, "
            f"val_accuracy {logs['val_accuracy']:.4f}",
            done=epoch,
            total=options.epochs,
            unit="epochs",
            loss=logs["loss"],
            val_accuracy=logs["val_accuracy"],
        )

    try:
        tuned = qat.fine_tune(model_dir, data_dir, os.path.join(output_dir, "qat_saved_model"), options, epoch_line)
        entry.update(
            quantized_layers=list(tuned.quantized_layers),
            float_layers=list(tuned.float_layers),
            fine_tune_val_accuracy=tuned.val_accuracy,
        )
        model_bytes = convert(tuned.model_dir, input_shape, "int8", representative, int8_io, allow_flex)
    except (QatError, QuantizationError) as e:
        return {**entry, "error": f"{entry['name']}: {e}"}
    path = os.path.join(output_dir, "model_int8_qat.tflite")
    return {**entry, **_measured(model_bytes, path, *test, reference)}


def quantize(
    model_dir: str,
    data_dir: str,
    output_dir: str,
    publish_mode: str = "dynamic",
    evaluate_modes=MODES,
    max_accuracy_drop: float = 1.0,
    int8_io: bool = False,
    allow_flex: bool = False,
    representative_count: int = 200,
    qat: QatOptions | None = None,
) -> dict:
    """Convert and evaluate `evaluate_modes` (+ float32, the reference, + `publish_mode`), write every `.tflite` to
    `output_dir`, and decide whether `publish_mode` is published; with `qat` (int8 only), fine-tune with fake
    quantization when post-training int8 misses the accuracy gate, and gate that file instead. Returns the
    report."""
    from components.lib.evaluation import evaluate_saved_model
    from trainer import data

    modes = check_modes(["float32", *evaluate_modes, publish_mode])
    if max_accuracy_drop < 0:
        raise QuantizationError(f"max_accuracy_drop must be >= 0 points, got {max_accuracy_drop}")
    if qat and publish_mode != "int8":
        raise QuantizationError(
            f"quantization-aware training fine-tunes for int8: it needs mode int8, not {publish_mode}"
        )
    stats = data.load_stats(data_dir)
    progress.emit("tflite", "reference", "evaluating the SavedModel on the test split (the reference)")
    reference = evaluate_saved_model(model_dir, data_dir)
    test = [(x.numpy(), y.numpy()) for x, y in data.make_dataset(data_dir, "test", stats, 256, training=False)]
    inputs = np.concatenate([x for x, _ in test]).astype(np.float32)
    labels = np.concatenate([y for _, y in test])
    representative = representative_inputs(data_dir, stats, representative_count) if "int8" in modes else None
    os.makedirs(output_dir, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for done, mode in enumerate(modes):
        progress.emit(
            "tflite",
            "mode",
            f"mode {done + 1}/{len(modes)}: converting and evaluating {mode}",
            done=done,
            total=len(modes),
            unit="modes",
            mode=mode,
        )
        try:
            model_bytes = convert(model_dir, stats["input_shape"], mode, representative, int8_io, allow_flex)
        except QuantizationError as e:
            results[mode] = {"mode": mode, "error": str(e)}
            continue
        path = os.path.join(output_dir, f"model_{mode}.tflite")
        results[mode] = {"mode": mode, **_measured(model_bytes, path, inputs, labels, reference.accuracy)}
    published, reason = publish_decision(results[publish_mode], max_accuracy_drop, allow_flex)
    published_from = POST_TRAINING if published else None
    qat_entry = None
    ptq = results[publish_mode]
    if qat and not published and "error" not in ptq and not (ptq["flex_ops"] and not allow_flex):
        progress.emit(
            "tflite",
            "qat",
            f"{reason}: {QUANTIZATION_AWARE}, {qat.epochs} epoch(s) at learning rate {qat.learning_rate:g}",
            epochs=qat.epochs,
            learning_rate=qat.learning_rate,
        )
        assert representative is not None  # int8 is among the modes
        qat_entry = quantization_aware(
            model_dir,
            data_dir,
            stats["input_shape"],
            output_dir,
            qat,
            (inputs, labels),
            representative,
            reference.accuracy,
            int8_io,
            allow_flex,
        )
        qat_published, qat_reason = publish_decision(qat_entry, max_accuracy_drop, allow_flex, qat_entry["name"])
        reason = f"{reason}; {qat_reason}"
        if qat_published:
            published, published_from = True, QUANTIZATION_AWARE
    float_size = results["float32"].get("size_bytes")
    for r in [*results.values(), *([qat_entry] if qat_entry else [])]:
        if "size_bytes" in r and float_size:
            r["size_ratio"] = round(r["size_bytes"] / float_size, 4)
    return {
        "publish_mode": publish_mode,
        "published": published,
        "published_from": published_from,
        "reason": reason,
        "saved_model_accuracy": reference.accuracy,
        "test_examples": int(len(labels)),
        "max_accuracy_drop": max_accuracy_drop,
        "modes": [results[m] for m in modes],
        "qat": qat_entry,
    }


def _table_row(name: str, r: dict) -> str:
    if "error" in r:
        return f"| {name} | — | — | — | — | — | {r['error']} |"
    types = ", ".join(f"{k}×{v}" for k, v in sorted(r["weight_types"].items()))
    return (
        f"| {name} | {r['size_bytes']:,} | {r.get('size_ratio', 0):.3f} | {r['accuracy']:.4f} | "
        f"{r['accuracy_drop_points']:.2f} | {r['latency_ms_mean']:.3f} / {r['latency_ms_p95']:.3f} | {types} |"
    )


def markdown_table(report: dict) -> str:
    """The step's Markdown output: the verdict, its reason and one row per file (quantization-aware training's
    last, with the layers it quantized)."""
    qat = report.get("qat")
    rows = [
        "| mode | size (bytes) | size vs float32 | accuracy | drop (points) | latency mean / p95 (ms) | weight types |",
        "|---|---|---|---|---|---|---|",
        *(
            _table_row(f"{r['mode']}{POST_TRAINING_ROW if qat and r['mode'] == 'int8' else ''}", r)
            for r in report["modes"]
        ),
    ]
    layers = ""
    if qat:
        rows.append(_table_row(qat["name"], qat))
        if "quantized_layers" in qat:
            layers = (
                f"\n{QUANTIZATION_AWARE.capitalize()} quantized {', '.join(qat['quantized_layers'])}; left float "
                f"for the converter: {', '.join(qat['float_layers']) or 'none'}.\n"
            )
    verdict = f"published, {report['published_from']}" if report["published"] else "not published"
    return (
        f"### TFLite ({verdict})\n\n{report['reason']}. SavedModel test accuracy "
        f"{report['saved_model_accuracy']:.4f} on {report['test_examples']} examples.\n\n"
        + "\n".join(rows)
        + "\n"
        + layers
    )


def quantize_model(
    model: Input[Model],
    dataset: Input[Dataset],
    mode: str,
    max_accuracy_drop: float,
    compare_all_modes: bool,
    int8_io: bool,
    allow_flex: bool,
    qat: bool,
    qat_epochs: int,
    qat_learning_rate: float,
    tflite_model: Output[Model],
    table: Output[Markdown],
    quantization: Output[Artifact],
):
    """KFP step: TFLite conversion, evaluation and gate; the `.tflite` is published only when it passes.

    Args:
        model: The trained SavedModel.
        dataset: The prepared data (shards per split, stats.json).
        mode: TFLite mode to publish: float32, dynamic, float16 or int8.
        max_accuracy_drop: Points of test accuracy the published .tflite may lose against the SavedModel.
        compare_all_modes: Also convert and evaluate every other mode, for the report.
        int8_io: int8 mode: int8 input and output tensors too.
        allow_flex: Accept models that need Select TF (Flex) ops.
        qat: int8 mode: when the post-training int8 model misses the accuracy gate, fine-tune the model with fake
            quantization (tensorflow-model-optimization), convert it to int8 and gate that instead.
        qat_epochs: Epochs of quantization-aware fine-tuning on the train split.
        qat_learning_rate: Adam learning rate of quantization-aware fine-tuning.
    """
    from core.fast_exit import skip_exit_collection

    skip_exit_collection()
    import json
    import os
    import shutil
    import tempfile

    from components.lib.qat import QatOptions
    from components.quantize_model import MODES, QUANTIZATION_AWARE, markdown_table, quantize

    work = tempfile.mkdtemp(prefix="tflite-")
    report = quantize(
        model.path,
        dataset.path,
        work,
        mode,
        MODES if compare_all_modes else [mode],
        max_accuracy_drop,
        int8_io,
        allow_flex,
        qat=QatOptions(qat_epochs, qat_learning_rate) if qat else None,
    )
    if report["published_from"] == QUANTIZATION_AWARE:
        chosen = report["qat"]
    else:
        chosen = next(r for r in report["modes"] if r["mode"] == mode)
    if report["published"]:
        os.makedirs(tflite_model.path, exist_ok=True)
        shutil.copy(chosen["path"], os.path.join(tflite_model.path, "model.tflite"))
        tflite_model.metadata.update(
            mode=mode,
            size_bytes=chosen["size_bytes"],
            accuracy=chosen["accuracy"],
            accuracy_drop_points=chosen["accuracy_drop_points"],
            input=chosen["input"],
            output=chosen["output"],
            quantization=report["published_from"],
        )
    tflite_model.metadata.update(published=report["published"], reason=report["reason"])
    for r in [*report["modes"], *([report["qat"]] if report["qat"] else [])]:
        r.pop("path", None)
    with open(quantization.path, "w") as f:
        json.dump(report, f, indent=2)
    with open(table.path, "w") as f:
        f.write(markdown_table(report))
    shutil.rmtree(work, ignore_errors=True)
    print(("PUBLISHED: " if report["published"] else "NOT PUBLISHED: ") + report["reason"])
