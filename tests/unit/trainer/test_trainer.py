import json
import os

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

    from serving.models import Servable, warmup

    path = trained_model / "model" / "assets.extra" / "tf_serving_warmup_requests"
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]
    requests = [log.predict_log.request for log in logs]
    assert [r.model_spec.signature_name for r in requests] == ["serving_default"] * 3 + ["serving_image_bytes"] * 2
    shapes = [tf.make_ndarray(r.inputs["image"]).shape for r in requests[:3]]
    assert [s[0] for s in shapes] == [1, 8, 32] and all(s[1:] == (8, 8, 1) for s in shapes)
    encoded = [tf.make_ndarray(r.inputs["image_bytes"]) for r in requests[3:]]
    assert [len(e) for e in encoded] == [1, 8] and all(e.startswith(b"\x89PNG") for e in encoded[1])
    assert warmup(Servable(1, str(trained_model / "model"), None)) == 5


def test_image_models_also_serve_encoded_images(trained_model, digits_data):
    """`serving_image_bytes` decodes PNG/JPEG bytes of any size and channel count and prepares them as training
    data was prepared: the prepared test images, PNG-encoded, get the class ids `serving_default` gives their
    pixels."""
    from trainer import data

    loaded = tf.saved_model.load(str(trained_model / "model"))
    assert sorted(loaded.signatures) == ["serving_default", "serving_image_bytes"]
    serve_bytes = loaded.signatures["serving_image_bytes"]
    assert serve_bytes.structured_input_signature[1]["image_bytes"].dtype == tf.string
    stats = data.load_stats(str(digits_data))
    pixels = next(iter(data.make_dataset(str(digits_data), "test", stats, 64, training=False)))[0]
    expected = loaded.signatures["serving_default"](image=tf.cast(pixels, tf.float32))
    pngs = tf.constant([tf.io.encode_png(p).numpy() for p in pixels])
    out = serve_bytes(image_bytes=pngs)
    assert out["class_id"].numpy().tolist() == expected["class_id"].numpy().tolist()
    np.testing.assert_allclose(out["probabilities"].numpy(), expected["probabilities"].numpy(), atol=1e-5)
    # an RGB JPEG four times as large: converted to gray, resized to the prepared 8×8, answered like the original
    big = tf.image.resize(tf.image.grayscale_to_rgb(pixels[:1]), [32, 32], method="nearest")
    jpeg = tf.io.encode_jpeg(tf.cast(big[0], tf.uint8), quality=100)
    assert serve_bytes(image_bytes=tf.stack([jpeg]))["class_id"].numpy()[0] == expected["class_id"].numpy()[0]


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
    assert float(reports[-1]["val_accuracy"]) == pytest.approx(metrics["val_accuracy"])
    assert sorted(os.listdir(trained_model / "checkpoints")) == ["best", "last"]


def test_tabular_mlp_on_iris(iris_model):
    signature = tf.saved_model.load(str(iris_model / "model")).signatures["serving_default"]
    assert signature.structured_input_signature[1]["features"].shape.as_list() == [None, 4]
    assert json.loads((iris_model / "metrics.json").read_text())["val_accuracy"] > 0.8
    # the feature columns, in input order, for batch prediction to match CSV headers and object fields by name
    assert (iris_model / "model" / "assets.extra" / "features.txt").read_text().splitlines() == [
        "sepal length (cm)",
        "sepal width (cm)",
        "petal length (cm)",
        "petal width (cm)",
    ]


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


def test_one_process_trains_alike_whatever_the_steps_per_call(digits_data, trained_model, tmp_path):
    """Without a cluster too, an epoch's steps in one compiled call (the default, `trained_model`'s) give exactly the
    losses and accuracies of one step a call, the validation pass's included."""
    from tests.helpers.processes import train

    figures = ("loss", "accuracy", "val_loss", "val_accuracy")
    runs = {}
    train(digits_data, tmp_path / "one-step", "--epochs", "8", "--learning-rate", "0.003", "--steps-per-execution", "1")
    for name, job in (("default", trained_model), ("one step", tmp_path / "one-step")):
        history = [json.loads(line) for line in (job / "history.jsonl").read_text().splitlines()]
        runs[name] = [[h[k] for k in figures] for h in history]
    assert len(runs["one step"]) == 8 and runs["default"] == runs["one step"]
