"""Checkpoints kept (`trainer.checkpoints`): the best and the last epoch's after a run, a cancelled training resuming
after its last checkpoint, and a warm start from a best checkpoint (a mismatching one refused in one line)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.processes import train
from tests.helpers.shared import built_once

KEPT_FLAGS = ("--epochs", "6", "--learning-rate", "0.02", "--hypertune-metric-tag", "val_loss")


def history(job):
    return [json.loads(line) for line in (job / "history.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def kept_job(digits_data, tmp_path_factory):
    """A training of 6 epochs on digits whose validation loss is lowest before its last epoch."""
    return built_once(tmp_path_factory, "kept-checkpoints", lambda job: train(digits_data, job, *KEPT_FLAGS))


def compiled_model(data_dir, *flags):
    """The default builder's model for the digits data, compiled as the trainer compiles it; its validation data."""
    import tf_keras as keras

    from trainer import builder, data
    from trainer.flags import parse_args
    from trainer.task import OPTIMIZERS

    args = parse_args(["--data-dir", str(data_dir), "--job-dir", "unused", *flags])
    stats = data.load_stats(str(data_dir))
    values = args.hyperparameters
    model = builder.load(args.model)(stats, **{name: values[name] for name in args.declaration.builder})
    model.compile(
        optimizer=getattr(keras.optimizers, OPTIMIZERS[values["optimizer"]])(values["learning_rate"]),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    return model, data.make_dataset(str(data_dir), "val", stats, 32, training=False)


def test_the_best_and_the_last_epoch_are_kept_with_their_records(kept_job, digits_data):
    """`best` is the epoch of lowest val_loss (the goal of --hypertune-metric-tag val_loss), `last` the 6th; each
    record holds its epoch's metrics as history.jsonl has them, and the checkpoint holds that epoch's weights."""
    import tensorflow as tf

    epochs = history(kept_job)
    best_epoch = min(epochs, key=lambda h: h["val_loss"])["epoch"]
    assert best_epoch != 6  # the run this test needs: a best epoch before the last
    folder = kept_job / "checkpoints"
    for name, epoch in (("best", best_epoch), ("last", 6)):
        record = json.loads((folder / name / "checkpoint.json").read_text())
        line = {k: v for k, v in epochs[epoch - 1].items() if k not in ("epoch", "time")}
        assert record == {
            "epoch": epoch,
            "prefix": f"epoch-{epoch:04d}",
            "metric": "val_loss",
            "goal": "minimize",
            "metrics": line,
        }
        assert sorted(os.listdir(folder / name)) == [
            "checkpoint.json",
            f"epoch-{epoch:04d}.data-00000-of-00001",
            f"epoch-{epoch:04d}.index",
        ]
        model, val = compiled_model(digits_data)
        tf.train.Checkpoint(model=model).read(str(folder / name / f"epoch-{epoch:04d}")).expect_partial()
        loss, accuracy = model.evaluate(val, verbose=0)
        assert (loss, accuracy) == pytest.approx((line["val_loss"], line["val_accuracy"]), rel=1e-5)
    assert sorted(os.listdir(folder)) == ["best", "last"]  # no other checkpoint (no backup) written


def test_a_cancelled_training_resumes_after_its_last_checkpoint_with_its_optimizer_state(digits_data, tmp_path):
    """A training cancelled (SIGTERM) after its third epoch: the next attempt in the same job folder loads `last`
    (weights and the optimizer's state: its step count goes on) and continues at the next epoch; history.jsonl
    continues."""
    from trainer import checkpoints

    job = tmp_path / "job"
    command = [sys.executable, "-m", "trainer.task", "--data-dir", str(digits_data), "--job-dir", str(job)]
    command += ["--epochs", "5", "--steps-per-epoch", "400", "--hypertune-metric-tag", "val_loss"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while first.poll() is None and not ((job / "history.jsonl").exists() and len(history(job)) >= 3):
        time.sleep(0.05)  # `last` is saved after the epoch's history line: at least epoch 2's is complete
    first.send_signal(signal.SIGTERM)
    assert first.wait() == -signal.SIGTERM
    done = checkpoints.read(str(job / "checkpoints" / "last")).epoch
    assert 2 <= done < 5
    resume = checkpoints.resume_point(str(job / "checkpoints"))
    assert resume.epochs == done and resume.last == checkpoints.read(str(job / "checkpoints" / "last"))
    model, _ = compiled_model(digits_data)
    checkpoints.restore_last(model, resume)
    assert int(model.optimizer.iterations.numpy()) == done * 400

    again = subprocess.run(command, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    prefix = job / "checkpoints" / "last" / f"epoch-{done:04d}"
    assert f"[trainer] resuming after epoch {done} from the last checkpoint ({prefix})\n" in again.stdout
    assert f"Epoch {done + 1}/5" in again.stdout and "Epoch 1/5" not in again.stdout
    assert [h["epoch"] for h in history(job)] == [1, 2, 3, 4, 5]
    assert checkpoints.read(str(job / "checkpoints" / "last")).epoch == 5


def test_a_warm_start_loads_the_best_checkpoints_weights_and_keeps_its_own_optimizer(kept_job, digits_data):
    from trainer import checkpoints

    model, val = compiled_model(digits_data, "--learning-rate", "0.005")
    kept = checkpoints.warm_start(model, str(kept_job / "checkpoints" / "best"))
    assert kept == checkpoints.read(str(kept_job / "checkpoints" / "best"))
    loss, accuracy = model.evaluate(val, verbose=0)
    assert (loss, accuracy) == pytest.approx((kept.metrics["val_loss"], kept.metrics["val_accuracy"]), rel=1e-5)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.005)
    assert int(model.optimizer.iterations.numpy()) == 0


def test_the_trainer_warm_starts_and_refuses_a_checkpoint_of_another_architecture(kept_job, digits_data, tmp_path):
    best = kept_job / "checkpoints" / "best"
    kept = json.loads((best / "checkpoint.json").read_text())
    command = [sys.executable, "-m", "trainer.task", "--data-dir", str(digits_data), "--epochs", "1"]
    warm = subprocess.run(
        [*command, "--job-dir", str(tmp_path / "warm"), "--warm-start-from", str(best)], capture_output=True, text=True
    )
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert (
        f"[trainer] warm start from {best}/{kept['prefix']} (epoch {kept['epoch']}: "
        f"val_loss={kept['metrics']['val_loss']})\n" in warm.stdout
    )
    assert history(tmp_path / "warm")[0]["val_accuracy"] > kept["metrics"]["val_accuracy"] - 0.1
    wider = subprocess.run(
        [*command, "--job-dir", str(tmp_path / "wider"), "--hidden-units", "64", "--warm-start-from", str(best)],
        capture_output=True,
        text=True,
    )
    assert wider.returncode == 1
    last = wider.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --warm-start-from {best}: its weights do not fit this model (")
    assert last.endswith("); warm-start the same --model with the same architecture hyperparameters")
    assert not (tmp_path / "wider" / "history.jsonl").exists()


def test_a_job_folder_whose_last_checkpoint_is_of_another_architecture_is_refused_in_one_line(
    kept_job, digits_data, tmp_path
):
    """A training run again in a job folder with a `last` of other layers (here: the kept job's, 128 hidden units)
    stops with one line instead of a traceback."""
    import shutil

    job = tmp_path / "job"
    shutil.copytree(kept_job / "checkpoints", job / "checkpoints")
    command = [sys.executable, "-m", "trainer.task", "--data-dir", str(digits_data), "--job-dir", str(job)]
    done = subprocess.run([*command, "--epochs", "8", "--hidden-units", "64"], capture_output=True, text=True)
    assert done.returncode == 1
    # TensorFlow's warnings about the values it did not restore follow at exit
    [last] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert last.startswith(
        f"error: cannot resume from {job}/checkpoints/last/epoch-0006: its weights do not fit this model ("
    )
    assert last.endswith("); resume with the same --model and architecture hyperparameters, or give a new --job-dir")


def test_on_cloud_storage_the_chief_uploads_each_epochs_checkpoint_in_one_request_a_file(tmp_path, caplog, monkeypatch):
    """With a gs:// checkpoint folder the chief saves on local disk and uploads the checkpoint's two files, then its
    record, and copies them into `best`: no temporary object (a save in place writes temporary shards and states and
    renames them, each rename a copy and a delete) reaches Cloud Storage. The uploads and deletes, in order, are
    exactly these."""
    import logging
    import re
    import textwrap
    from urllib.parse import parse_qs, unquote, urlparse

    from core.storage import gcs_client
    from pipelines.rehearsal import gcs
    from tests.helpers.rehearsal import tensorflow_on_gcs

    script = textwrap.dedent(
        """
        import numpy as np
        import tf_keras as keras

        from trainer import checkpoints, distribute

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(3)])
        model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
        chief = distribute.Cluster("chief", 0, 1, has_chief=True)
        kept = checkpoints.KeptCheckpoints("gs://b/job/checkpoints", "loss", chief, checkpoints.Resume(None))
        model.fit(x, (x[:, 0] > 0).astype("int32"), epochs=2, verbose=0, callbacks=[kept])
        """
    )
    caplog.set_level(logging.INFO, logger="gcp_storage_emulator.server")
    with gcs.gcs_emulator(str(tmp_path / "gcs"), "b") as host:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        tensorflow_on_gcs(script, host, tmp_path)
        kept = sorted(b.name for b in gcs_client().list_blobs("b", prefix="job/checkpoints/") if b.size)
    uploaded, deleted = [], []
    for record in caplog.records:
        found = re.match(r'"(POST|DELETE) (\S+) ', record.getMessage())
        if not found:
            continue
        method, url = found.groups()
        if method == "POST" and url.startswith("/upload/"):
            uploaded.append(parse_qs(urlparse(url).query)["name"][0])
        elif method == "DELETE":
            deleted.append(unquote(url.rsplit("/o/", 1)[1]))
    files = ("data-00000-of-00001", "index")
    assert kept == [
        f"job/checkpoints/{f}/{n}"
        for f in ("best", "last")
        for n in ("checkpoint.json", *(f"epoch-0002.{x}" for x in files))
    ]
    assert [u for u in uploaded if not u.endswith("/")] == [
        f"job/checkpoints/{folder}/{name}"
        for epoch in (1, 2)
        for folder in ("last", "best")
        for name in (*(f"epoch-{epoch:04d}.{x}" for x in files), "checkpoint.json")
    ]
    assert deleted == [f"job/checkpoints/{folder}/epoch-0001.{x}" for folder in ("last", "best") for x in files]
