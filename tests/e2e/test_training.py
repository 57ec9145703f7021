"""Training as the local launcher and the study run it: real MultiWorkerMirroredStrategy workers, a lost worker
restarting the group from its last checkpoint, trials sharing a warm TensorFlow process; a user's own model builder
trained, exported and called."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from components.lib.study.spec import StudySpec
from components.train_model import launch
from components.tune_hyperparameters import run_study

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = "tests.helpers.custom_model:build_small_cnn"


def history(job):
    path = job / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_two_workers_train_and_only_the_chief_writes(digits_data, tmp_path):
    job = tmp_path / "job"
    sink = io.StringIO()
    temp = tmp_path / "temp"  # the workers' own: other tests' workers run meanwhile
    temp.mkdir()
    result = launch(
        2,
        ["--data-dir", str(digits_data), "--job-dir", str(job), "--epochs", "2"],
        str(tmp_path / "logs"),
        env={**os.environ, "TMPDIR": str(temp)},
        sink=sink,
    )
    assert result.attempts == 1 and result.exit_codes == [[0, 0]]
    out = sink.getvalue()
    # both workers ran the same number of steps per epoch (printed by Keras as "N/N")
    steps = {
        w: [line.split()[1] for line in out.splitlines() if line.startswith(f"[{w}] ") and "/epoch" in line]
        for w in ("chief", "worker-0")
    }
    assert steps["chief"] == steps["worker-0"] and len(steps["chief"]) == 2
    assert (job / "model" / "saved_model.pb").exists()
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["num_workers"] == 2 and metrics["strategy"] == "MultiWorkerMirroredStrategy"
    assert metrics["global_batch_size"] == 64
    assert [h["epoch"] for h in history(job)] == [1, 2]
    # the non-chief worker's temporary model and log directories are gone
    assert not [d for d in os.listdir(temp) if d.startswith("tfpipe-worker")]
    assert sorted(os.listdir(tmp_path / "logs")) == ["chief.attempt-1.log", "worker-0.attempt-1.log"]
    # the steps in one compiled call per epoch (the default's 32, capped at the epoch's 23 steps) train and validate
    # exactly as one step a call: the same losses and accuracies, the validation pass included
    again = tmp_path / "one-step"
    flags = ["--data-dir", str(digits_data), "--job-dir", str(again), "--epochs", "2", "--steps-per-execution", "1"]
    launch(2, flags, str(tmp_path / "logs-one-step"), sink=io.StringIO())
    figures = ("loss", "accuracy", "val_loss", "val_accuracy")
    assert [[h[k] for k in figures] for h in history(again)] == [[h[k] for k in figures] for h in history(job)]


def test_killed_worker_restarts_group_and_resumes_from_its_last_checkpoint(digits_data, tmp_path):
    job = tmp_path / "job"
    killed = []

    def kill_worker_after_two_epochs(attempt, pids):
        if attempt != 1:
            return

        def watch():
            deadline = time.time() + 240
            while time.time() < deadline and len(history(job)) < 2:
                time.sleep(0.05)
            killed.append(len(history(job)))
            os.kill(pids[1], signal.SIGKILL)

        threading.Thread(target=watch, daemon=True).start()

    sink = io.StringIO()
    result = launch(
        2,
        ["--data-dir", str(digits_data), "--job-dir", str(job), "--epochs", "6", "--steps-per-epoch", "60"],
        str(tmp_path / "logs"),
        max_restarts=2,
        sink=sink,
        on_start=kill_worker_after_two_epochs,
    )
    assert result.attempts == 2 and result.exit_codes[0][1] == -signal.SIGKILL and result.exit_codes[1] == [0, 0]
    epochs = [h["epoch"] for h in history(job)]
    assert epochs == list(range(1, 7)), epochs  # continued from the last checkpoint, not from epoch 1
    assert "restarting the group" in sink.getvalue()
    # the second attempt started after the epochs done before the kill
    assert "worker-0 exited with code -9" in sink.getvalue()
    second = (tmp_path / "logs" / "chief.attempt-2.log").read_text()
    # the history line of an epoch is written before its checkpoint: the kill may come between the two
    resumed = int(re.search(r"resuming from the last checkpoint at epoch (\d+)/6", second)[1])
    assert resumed in (killed[0], killed[0] + 1) and f"Epoch {resumed}/6" in second and "Epoch 1/6" not in second
    assert (job / "model" / "saved_model.pb").exists()


def test_a_crashed_group_resumes_at_the_next_epoch_and_keeps_the_best_and_last_checkpoints(digits_data, tmp_path):
    """Two MultiWorkerMirroredStrategy workers, one killed after the second epoch: the restarted group continues
    at the epoch after its last checkpoint, and the checkpoint folder keeps the chief's `last` (epoch 4) and `best`
    (the epoch of lowest val_loss over both attempts); the other worker's copies of them are gone, the killed
    attempt's too."""
    from trainer import checkpoints

    job, temp = tmp_path / "job", tmp_path / "temp"
    temp.mkdir()

    def kill_worker_after_two_epochs(attempt, pids):
        if attempt == 1:
            threading.Thread(target=lambda: _kill_after(job, 2, pids[1]), daemon=True).start()

    sink = io.StringIO()
    result = launch(
        2,
        ["--data-dir", str(digits_data), "--job-dir", str(job), "--epochs", "4", "--steps-per-epoch", "60"]
        + ["--learning-rate", "0.02", "--hypertune-metric-tag", "val_loss"],
        str(tmp_path / "logs"),
        env={**os.environ, "TMPDIR": str(temp)},
        sink=sink,
        on_start=kill_worker_after_two_epochs,
    )
    assert result.attempts == 2 and result.exit_codes[0][1] == -signal.SIGKILL and result.exit_codes[1] == [0, 0]
    second = (tmp_path / "logs" / "chief.attempt-2.log").read_text()
    resumed = int(re.search(r"resuming from the last checkpoint at epoch (\d+)/4", second)[1])
    assert resumed >= 2 and f"Epoch {resumed}/4" in second and "Epoch 1/4" not in second
    epochs = history(job)
    assert [h["epoch"] for h in epochs] == [1, 2, 3, 4]
    best = min(epochs, key=lambda h: h["val_loss"])
    for kept, line in (
        (checkpoints.read(str(job / "checkpoints/last")), epochs[-1]),
        (checkpoints.read(str(job / "checkpoints/best")), best),
    ):
        assert kept is not None and kept.epoch == line["epoch"]
        assert kept.metrics == {k: v for k, v in line.items() if k not in ("epoch", "time")}
        assert sorted(os.listdir(kept.directory)) == sorted(
            ["checkpoint.json", f"{kept.prefix}.index", f"{kept.prefix}.data-00000-of-00001"]
        )
    # the other worker's copies are gone: discarded, and the killed one's (its TMPDIR) with the launch
    assert not list(temp.iterdir())


def _kill_after(job, epochs: int, pid: int) -> None:
    """SIGKILL `pid` once the job's history has `epochs` lines."""
    deadline = time.time() + 240
    while time.time() < deadline and len(history(job)) < epochs:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def test_trainer_trials_share_a_warm_runner(tmp_path, digits_data):
    """Real trainer trials, one at a time: one TensorFlow process runs them all, each with its own metric file,
    SavedModel and log."""
    s = StudySpec.model_validate(
        {
            "parameters": [{"type": "discrete", "parameter_id": "learning_rate", "values": [0.003, 0.01, 0.03]}],
            "algorithm": "grid",
            "max_trial_count": 3,
            "parallel_trial_count": 1,
        }
    )
    result = run_study(s, str(tmp_path), ["--data-dir", str(digits_data), "--epochs", "1"], log=lambda m: None)
    assert [t["status"] for t in result["trials"]] == ["SUCCEEDED"] * 3 and result["trial_processes"] == 1
    for t in result["trials"]:
        assert 0 < t["metric"] <= 1 and (tmp_path / t["trial_id"] / "model" / "saved_model.pb").is_file()
        assert "val_accuracy" in (tmp_path / t["trial_id"] / "trial.log").read_text()


def test_trainer_trains_exports_and_serves_a_custom_builders_model(digits_data, tmp_path):
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from trainer import data

    job = tmp_path / "job"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.task",
            "--data-dir",
            str(digits_data),
            "--job-dir",
            str(job),
            "--epochs",
            "5",
            "--filters",
            "8",
            "--model",
            CUSTOM,
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["model"] == CUSTOM and metrics["hyperparameters"]["filters"] == 8
    assert metrics["val_accuracy"] > 0.7
    trained = keras.models.load_model(str(job / "model"), compile=False)
    assert trained.name == "custom_cnn"
    assert [layer.name for layer in trained.layers] == [
        "pixels",
        "custom_rescale",
        "custom_conv",
        "custom_flatten",
        "custom_dropout",
        "custom_probabilities",
    ]
    loaded = tf.saved_model.load(str(job / "model"))
    assert sorted(loaded.signatures) == ["serving_default", "serving_image_bytes"]
    serve = loaded.signatures["serving_default"]
    assert serve.structured_input_signature[1]["pixels"].shape.as_list() == [None, 8, 8, 1]
    stats = data.load_stats(str(digits_data))
    pixels = next(iter(data.make_dataset(str(digits_data), "test", stats, 16, training=False)))[0]
    out = serve(pixels=tf.cast(pixels, tf.float32))
    assert out["probabilities"].shape == (16, 10) and out["class_id"].shape == (16,)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)
    pngs = tf.constant([tf.io.encode_png(p).numpy() for p in pixels])
    by_bytes = loaded.signatures["serving_image_bytes"](image_bytes=pngs)
    assert by_bytes["class_id"].numpy().tolist() == out["class_id"].numpy().tolist()
