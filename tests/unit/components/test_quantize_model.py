import json

import numpy as np
import pytest

from components.quantize_model import (
    MODES,
    QuantizationError,
    convert,
    evaluate_tflite,
    inspect_tflite,
    publish_decision,
    quantize,
)
from core import progress
from core.units import size


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
        assert modes[mode]["latency_ms_p95"] > 0 and modes[mode]["latency_ms_mean"] > 0  # measured (outliers
        # on a busy machine can put the mean above the 95th percentile, so the two are not compared)
    assert modes["float32"]["size_ratio"] == 1.0
    assert modes["dynamic"]["size_ratio"] <= 0.35 and modes["int8"]["size_ratio"] <= 0.35
    assert 0.4 < modes["float16"]["size_ratio"] < 0.6
    # int8 weights really are int8; float16 stores float16 weights; float32 none of either
    assert modes["int8"]["weight_types"].get("int8", 0) >= 4 and "float32" not in modes["int8"]["weight_types"]
    assert modes["dynamic"]["weight_types"].get("int8", 0) >= 1
    assert modes["float16"]["weight_types"].get("float16", 0) >= 4
    assert set(modes["float32"]["weight_types"]) <= {"float32", "int32"}
    assert report["saved_model_accuracy"] > 0.8 and report["test_examples"] > 100


def test_tight_limit_rejects_a_real_accuracy_loss(report, trained_model, digits_data):
    from trainer import data

    # full-integer quantization calibrated on blank images saturates real inputs: a real, large accuracy loss
    stats = data.load_stats(str(digits_data))
    model = convert(str(trained_model / "model"), stats["input_shape"], "int8", np.zeros((20, 8, 8, 1), np.float32))
    test = [(x.numpy(), y.numpy()) for x, y in data.make_dataset(str(digits_data), "test", stats, 256, training=False)]
    result = evaluate_tflite(
        model, np.concatenate([x for x, _ in test]).astype(np.float32), np.concatenate([y for _, y in test])
    )
    drop = round((report["saved_model_accuracy"] - result["accuracy"]) * 100, 4)
    assert drop > 5
    published, reason = publish_decision(
        {"mode": "int8", "flex_ops": [], "accuracy_drop_points": drop, "size_bytes": len(model)}, 1.0, False
    )
    assert not published and reason == f"int8: accuracy drop {drop:.2f} points exceeds max_accuracy_drop 1.00"


def test_publish_decision():
    ok = {"mode": "dynamic", "flex_ops": [], "accuracy_drop_points": 0.4, "size_bytes": 10}
    assert publish_decision(ok, 0.5, False) == (True, "dynamic: accuracy drop 0.40 points within 0.50, 10 B")
    assert publish_decision({**ok, "accuracy_drop_points": 0.6}, 0.5, False) == (
        False,
        "dynamic: accuracy drop 0.60 points exceeds max_accuracy_drop 0.50",
    )
    flex = {**ok, "flex_ops": ["FlexErf"]}
    assert publish_decision(flex, 1.0, False) == (False, "dynamic: needs Select TF (Flex) ops ['FlexErf']")
    assert publish_decision(flex, 1.0, True)[0]
    assert publish_decision({"mode": "int8", "error": "int8: boom"}, 1.0, False) == (False, "int8: boom")


def test_kfp_step_publishes_the_tflite_artifact(trained_model, digits_data, tmp_path):
    from kfp.dsl import Artifact, Dataset, Markdown, Model

    from components.quantize_model import quantize_model

    out = {
        name: cls(uri=str(tmp_path / name))
        for name, cls in (("tflite_model", Model), ("table", Markdown), ("quantization", Artifact))
    }
    quantize_model(
        Model(uri=str(trained_model / "model")),
        Dataset(uri=str(digits_data)),
        "float16",
        1.0,
        False,
        False,
        False,
        False,
        2,
        1e-4,
        **out,
    )
    assert (tmp_path / "tflite_model" / "model.tflite").stat().st_size > 1000
    assert out["tflite_model"].metadata["published"] and out["tflite_model"].metadata["mode"] == "float16"
    assert out["tflite_model"].metadata["input"] == {"dtype": "float32", "shape": [1, 8, 8, 1]}
    report = json.loads((tmp_path / "quantization").read_text())
    assert [m["mode"] for m in report["modes"]] == ["float32", "float16"] and "path" not in report["modes"][0]
    assert "| float16 |" in (tmp_path / "table").read_text()


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


def test_int8_within_its_gate_is_published_without_quantization_aware_training(
    trained_model, digits_data, tmp_path, capsys
):
    from components.lib.qat import QatOptions

    report = quantize(str(trained_model / "model"), str(digits_data), str(tmp_path), "int8", ["int8"], qat=QatOptions())
    assert report["published"] and report["published_from"] == "post-training quantization" and report["qat"] is None
    int8 = by_mode(report)["int8"]
    assert report["reason"] == (
        f"int8: accuracy drop {int8['accuracy_drop_points']:.2f} points within 1.00, {size(int8['size_bytes'])}"
    )
    events = [e["event"] for e in map(progress.parse, capsys.readouterr().out.splitlines()) if e]
    assert events == ["reference", "mode", "mode"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_float32.tflite", "model_int8.tflite"]


def test_quantization_aware_training_refuses_what_it_cannot_do(trained_model, digits_data, tmp_path):
    import tensorflow as tf
    import tf_keras as keras

    from components.lib.qat import QatError, QatOptions, annotate, fine_tune

    with pytest.raises(QuantizationError) as refused:
        quantize(str(trained_model / "model"), str(digits_data), str(tmp_path), "dynamic", qat=QatOptions())
    assert str(refused.value) == "quantization-aware training fine-tunes for int8: it needs mode int8, not dynamic"
    with pytest.raises(QatError) as refused:
        QatOptions(epochs=0)
    assert str(refused.value) == "quantization-aware training needs at least 1 epoch, got 0"
    with pytest.raises(QatError) as refused:
        QatOptions(learning_rate=0.0)
    assert str(refused.value) == "quantization-aware training needs a learning rate > 0, got 0.0"

    only_preprocessing = keras.Sequential(
        [keras.Input((4,)), keras.layers.Normalization(mean=0.0, variance=1.0, name="normalize")]
    )
    with pytest.raises(QatError) as refused:
        annotate(only_preprocessing)
    assert str(refused.value) == (
        "no layer of the model is one the 8-bit scheme quantizes (its layers: normalize); quantization-aware "
        "training needs Conv2D, Dense or the like"
    )

    module = tf.Module()
    module.scale = tf.Variable(1.0)
    module.serve = tf.function(lambda x: {"probabilities": x * module.scale}, [tf.TensorSpec([None, 4], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "plain"), signatures={"serving_default": module.serve})
    with pytest.raises(QatError) as refused:
        fine_tune(str(tmp_path / "plain"), str(digits_data), str(tmp_path / "out"), QatOptions())
    assert str(refused.value) == (
        f"the SavedModel at {tmp_path / 'plain'} holds no tf-keras model (keras_metadata.pb missing): "
        "quantization-aware training fine-tunes a model the trainer saved"
    )
