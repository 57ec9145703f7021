import json

import numpy as np
import pytest
import tensorflow as tf

from components.prepare_data import prepare
from trainer.model import conv_blocks_for


def test_exported_model_serves_raw_pixels_of_any_size(trained_model):
    model_dir = trained_model / "model"
    assert (model_dir / "saved_model.pb").exists()
    signature = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    assert signature.structured_input_signature[1]["image"].shape.as_list() == [None, None, None, 1]
    for size in (8, 28):  # resizing and rescaling happen inside the model
        out = signature(image=tf.constant(np.random.default_rng(0).uniform(0, 255, (3, size, size, 1)), tf.float32))
        assert out["probabilities"].shape == (3, 10) and out["class_id"].shape == (3,)
        np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)
    assert (model_dir / "assets.extra" / "labels.txt").read_text().split() == [str(i) for i in range(10)]
    assert not (model_dir / "assets.extra" / "features.txt").exists()  # images have no named feature columns


def test_exported_model_carries_tf_serving_warmup_requests(trained_model):
    from tensorflow_serving.apis import prediction_log_pb2

    from pipelines.serving.models import Servable, warmup

    path = trained_model / "model" / "assets.extra" / "tf_serving_warmup_requests"
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]
    shapes = [tf.make_ndarray(log.predict_log.request.inputs["image"]).shape for log in logs]
    assert [s[0] for s in shapes] == [1, 8, 32] and all(s[1:] == (8, 8, 1) for s in shapes)
    assert {log.predict_log.request.model_spec.signature_name for log in logs} == {"serving_default"}
    assert warmup(Servable(1, str(trained_model / "model"), None)) == 3


def test_metrics_history_tensorboard_and_hypertune(trained_model):
    metrics = json.loads((trained_model / "metrics.json").read_text())
    assert metrics["strategy"] == "default" and metrics["num_workers"] == 1 and metrics["epochs"] == 8
    assert metrics["val_accuracy"] > 0.8 and metrics["hyperparameters"]["learning_rate"] == 0.003
    history = [json.loads(line) for line in (trained_model / "history.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == list(range(1, 9))
    assert history[-1]["val_accuracy"] == pytest.approx(metrics["val_accuracy"])
    assert list((trained_model / "logs").rglob("events.out.tfevents.*"))
    reports = [json.loads(line) for line in (trained_model / "hypertune" / "output.metrics").read_text().splitlines()]
    assert len(reports) == 8 and reports[-1]["trial"] == "7" and reports[-1]["global_step"] == "8"
    assert float(reports[-1]["accuracy"]) == pytest.approx(metrics["val_accuracy"])
    backup = trained_model / "checkpoints" / "backup"
    assert not backup.exists() or not list(backup.iterdir())  # BackupAndRestore cleans up after success


def test_tabular_mlp_on_iris(iris_model):
    signature = tf.saved_model.load(str(iris_model / "model")).signatures["serving_default"]
    assert signature.structured_input_signature[1]["features"].shape.as_list() == [None, 4]
    assert json.loads((iris_model / "metrics.json").read_text())["val_accuracy"] > 0.8
    # the feature columns, in input order, for batch prediction to match CSV headers and object fields by name
    assert (iris_model / "model" / "assets.extra" / "features.txt").read_text().splitlines() == [
        "sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"]


def test_conv_blocks_keep_feature_maps():
    assert [conv_blocks_for(s) for s in (4, 8, 28, 180)] == [1, 2, 3, 3]


@pytest.mark.parametrize("cache", [True, False])
def test_training_input_yields_full_batches_from_less_than_one_batch_of_data(tmp_path, cache):
    """A worker whose files hold fewer examples than one global batch (small data, many workers) still gets full
    batches: the stream repeats before it is batched, so no worker's training input is empty."""
    from trainer import data

    stats = prepare("builtin:wine", str(tmp_path / "data"), num_workers=3)
    examples = stats["splits"]["train"]["examples"]
    batches = data.make_dataset(str(tmp_path / "data"), "train", stats, 2 * examples, training=True, cache=cache)
    taken = [(features.shape, labels.shape) for features, labels in batches.take(3)]
    assert taken == [((2 * examples, 13), (2 * examples,))] * 3
    assert data.steps_per_epoch(stats, "train", 96) == -(-examples // 96)  # the partial batch counts
