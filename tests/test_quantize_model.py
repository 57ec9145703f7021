import json

import numpy as np
import pytest

from components.quantize_model import (MODES, QuantizationError, convert, evaluate_tflite, inspect_tflite,
                                       markdown_table, quantize)


@pytest.fixture(scope="module")
def report(trained_model, digits_data, tmp_path_factory):
    return quantize(str(trained_model / "model"), str(digits_data), str(tmp_path_factory.mktemp("tflite")))


def by_mode(report):
    return {m["mode"]: m for m in report["modes"]}


def test_every_mode_converts_within_the_default_gate(report):
    modes = by_mode(report)
    assert list(modes) == list(MODES)
    assert report["published"] and report["publish_mode"] == "dynamic"
    for mode in MODES:
        assert modes[mode]["accuracy_drop_points"] <= 1.0, modes[mode]
        assert modes[mode]["flex_ops"] == []
        assert modes[mode]["latency_ms_p95"] >= modes[mode]["latency_ms_mean"] * 0.5 > 0
    assert modes["float32"]["size_ratio"] == 1.0
    assert modes["dynamic"]["size_ratio"] <= 0.35 and modes["int8"]["size_ratio"] <= 0.35
    assert 0.4 < modes["float16"]["size_ratio"] < 0.6
    # int8 weights really are int8; float16 stores float16 weights; float32 none of either
    assert modes["int8"]["weight_types"].get("int8", 0) >= 4 and "float32" not in modes["int8"]["weight_types"]
    assert modes["dynamic"]["weight_types"].get("int8", 0) >= 1
    assert modes["float16"]["weight_types"].get("float16", 0) >= 4
    assert set(modes["float32"]["weight_types"]) <= {"float32", "int32"}
    assert report["saved_model_accuracy"] > 0.8 and report["test_examples"] > 100


def test_tight_limit_rejects_with_reason(trained_model, digits_data, tmp_path):
    result = quantize(str(trained_model / "model"), str(digits_data), str(tmp_path), "int8", ["int8"],
                      max_accuracy_drop=0.0)
    int8 = by_mode(result)["int8"]
    if int8["accuracy_drop_points"] > 0:
        assert not result["published"]
        assert result["reason"] == (f"int8: accuracy drop {int8['accuracy_drop_points']:.2f} points exceeds "
                                    "max_accuracy_drop 0.00")
    else:  # no loss at all on this split: the zero limit still passes
        assert result["published"]
    assert "### TFLite" in markdown_table(result)


def test_int8_io_model_takes_int8_tensors(trained_model, digits_data, tmp_path):
    from trainer import data

    stats = data.load_stats(str(digits_data))
    x, y = next(iter(data.make_dataset(str(digits_data), "test", stats, 64, training=False)))
    representative = x.numpy().astype(np.float32)
    model = convert(str(trained_model / "model"), stats["input_shape"], "int8", representative, int8_io=True)
    result = evaluate_tflite(model, representative, y.numpy())
    assert result["input"]["dtype"] == "int8" and result["output"]["dtype"] == "int8"
    assert result["input"]["shape"] == [1, 8, 8, 1] and result["accuracy"] > 0.8
    assert inspect_tflite(model)["flex_ops"] == []


def test_bad_inputs(trained_model, digits_data, tmp_path):
    with pytest.raises(QuantizationError, match="no SavedModel at .*saved_model.pb missing"):
        convert(str(tmp_path / "none"), [8, 8, 1], "dynamic")
    with pytest.raises(QuantizationError, match="unknown TFLite mode"):
        quantize(str(trained_model / "model"), str(digits_data), str(tmp_path), "int4")
    with pytest.raises(QuantizationError, match="int8 mode needs representative examples"):
        convert(str(trained_model / "model"), [8, 8, 1], "int8", np.empty((0, 8, 8, 1), np.float32))
    with pytest.raises(QuantizationError, match="max_accuracy_drop must be >= 0"):
        quantize(str(trained_model / "model"), str(digits_data), str(tmp_path), max_accuracy_drop=-1)


def test_empty_representative_split(trained_model, digits_data, tmp_path):
    import shutil

    from components.quantize_model import representative_inputs

    data_dir = tmp_path / "data"
    shutil.copytree(digits_data, data_dir)
    for shard in data_dir.glob("train-*.tfrecord"):
        shard.write_bytes(b"")
    stats = json.loads((data_dir / "stats.json").read_text())
    with pytest.raises(QuantizationError, match="no representative examples in the train split"):
        representative_inputs(str(data_dir), stats)
