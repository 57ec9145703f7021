"""Quantization-aware training end to end: the TFLite step driven on a real small model trained on builtin:digits,
whose post-training int8 file misses a tight accuracy gate; the step fine-tunes with fake quantization, publishes
the int8 file that passes, and the run report's TFLite section shows both."""

import json
import re

import numpy as np
import pytest

from core import progress
from core.units import size
from tests.helpers.processes import train

GATE = 0.5  # points: the tiny model's post-training int8 file loses more (checked below)
QAT_EPOCHS, QAT_LEARNING_RATE = 2, 0.003


@pytest.fixture(scope="module")
def tiny_model(digits_data, tmp_path_factory):
    """A deliberately small CNN (2 filters, 8 hidden units), briefly trained: int8 costs it accuracy."""
    job = tmp_path_factory.mktemp("tiny")
    flags = ("--epochs", "5", "--learning-rate", "0.01", "--filters", "2", "--hidden-units", "8", "--dropout", "0")
    return train(digits_data, job, *flags) / "model"


def test_int8_that_misses_its_gate_is_fine_tuned_with_fake_quantization_and_published(
    tiny_model, digits_data, tmp_path, capsys
):
    from kfp.dsl import Artifact, Dataset, Markdown, Model

    from components.quantize_model import evaluate_tflite, inspect_tflite, quantize_model
    from pipelines import report as run_report
    from trainer import data

    step = tmp_path / "run" / "quantize-model"  # the step's outputs where kfp.local puts them
    out = {
        name: cls(uri=str(step / name))
        for name, cls in (("tflite_model", Model), ("table", Markdown), ("quantization", Artifact))
    }
    quantize_model(
        Model(uri=str(tiny_model)),
        Dataset(uri=str(digits_data)),
        "int8",
        GATE,
        False,
        False,
        False,
        True,
        QAT_EPOCHS,
        QAT_LEARNING_RATE,
        **out,
    )
    result = json.loads((step / "quantization").read_text())
    ptq, qat = result["modes"][1], result["qat"]
    assert [m["mode"] for m in result["modes"]] == ["float32", "int8"] and ptq["mode"] == "int8"
    assert ptq["accuracy_drop_points"] > GATE >= qat["accuracy_drop_points"], (ptq, qat)
    ptq_reason = f"int8: accuracy drop {ptq['accuracy_drop_points']:.2f} points exceeds max_accuracy_drop 0.50"
    qat_reason = (
        f"int8 after quantization-aware training (2 epochs): accuracy drop {qat['accuracy_drop_points']:.2f} "
        f"points within 0.50, {size(qat['size_bytes'])}"
    )
    assert result["published"] and result["published_from"] == "quantization-aware training"
    assert result["reason"] == f"{ptq_reason}; {qat_reason}"
    assert qat["quantized_layers"] == [
        "conv2d",
        "max_pooling2d",
        "conv2d_1",
        "max_pooling2d_1",
        "flatten",
        "dense",
        "dropout",
        "probabilities",
    ]
    assert qat["float_layers"] == ["resize", "rescale"] and qat["epochs"] == 2 and qat["learning_rate"] == 0.003

    # the published file is the fine-tuned int8 model: all-integer weights, and the accuracy the report gives it
    published = (step / "tflite_model" / "model.tflite").read_bytes()
    assert len(published) == qat["size_bytes"]
    assert inspect_tflite(published)["weight_types"] == {"int32": 6, "int8": 4}
    stats = data.load_stats(str(digits_data))
    test = [(x.numpy(), y.numpy()) for x, y in data.make_dataset(str(digits_data), "test", stats, 256, training=False)]
    inputs, labels = np.concatenate([x for x, _ in test]).astype(np.float32), np.concatenate([y for _, y in test])
    assert evaluate_tflite(published, inputs, labels)["accuracy"] == qat["accuracy"] != ptq["accuracy"]
    assert out["tflite_model"].metadata == {
        "mode": "int8",
        "size_bytes": qat["size_bytes"],
        "accuracy": qat["accuracy"],
        "accuracy_drop_points": qat["accuracy_drop_points"],
        "input": {"dtype": "float32", "shape": [1, 8, 8, 1]},
        "output": {"dtype": "float32", "shape": [1, 10]},
        "quantization": "quantization-aware training",
        "published": True,
        "reason": result["reason"],
    }

    table = (step / "table").read_text()
    assert table.startswith(f"### TFLite (published, quantization-aware training)\n\n{result['reason']}. ")
    assert f"| int8, post-training | {ptq['size_bytes']:,} | {ptq['size_ratio']:.3f} | {ptq['accuracy']:.4f} |" in table
    assert (
        f"| int8 after quantization-aware training (2 epochs) | {qat['size_bytes']:,} | {qat['size_ratio']:.3f} | "
        f"{qat['accuracy']:.4f} | {qat['accuracy_drop_points']:.2f} |"
    ) in table

    # the log: the gate PTQ missed, one line per fine-tuning epoch, the verdict
    lines = capsys.readouterr().out.splitlines()
    events = [e for e in map(progress.parse, lines) if e and e["event"] in ("qat", "qat_epoch")]
    assert events[0] == {
        "stage": "tflite",
        "event": "qat",
        "message": f"{ptq_reason}: quantization-aware training, 2 epoch(s) at learning rate 0.003",
        "epochs": 2,
        "learning_rate": 0.003,
    }
    assert [(e["event"], e["done"], e["total"]) for e in events[1:]] == [("qat_epoch", 1, 2), ("qat_epoch", 2, 2)]
    assert events[2]["message"] == (
        f"quantization-aware training epoch 2/2: loss {events[2]['loss']:.4f}, "
        f"val_accuracy {qat['fine_tune_val_accuracy']:.4f}"
    )
    assert lines[-1] == f"PUBLISHED: {result['reason']}"

    # the run report's TFLite section: both int8 files, which one was published and why
    summary = run_report.collect(tmp_path / "run", [], "tfpipe-training", {}, 1.0)
    (tmp_path / "report").mkdir()
    run_report.write(summary, tmp_path / "report")
    html = (tmp_path / "report" / "report.html").read_text()
    section = re.search(r"<h2>TFLite</h2>(.*?)(?=<h2>|$)", html, re.S)
    assert section
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section[1])).strip()
    fraction, percent = run_report.fraction, run_report.ENV.filters["percent"]
    saved = fraction(result["saved_model_accuracy"])

    def row(name, m):
        return (
            f"{name} {size(m['size_bytes'])} {percent(m['size_ratio'])} {fraction(m['accuracy'])} "
            f"{m['accuracy_drop_points']:.2f}"
        )

    assert text.startswith(
        f"published (quantization-aware training) : {result['reason']} (SavedModel test accuracy {saved})"
    )
    assert row("int8, post-training", ptq) in text
    assert row("int8 after quantization-aware training (2 epochs)", qat) in text
    assert (
        "Quantization-aware training quantized conv2d, max_pooling2d, conv2d_1, max_pooling2d_1, flatten, dense, "
        "dropout, probabilities; left float for the converter: resize, rescale." in text
    )
