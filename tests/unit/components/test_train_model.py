"""The local launcher: real MultiWorkerMirroredStrategy training (slow, `e2e`: separate TF processes), lost workers
restarting the group, failing workers ending the step at once."""

import io
import json
import os
import re
import signal
import threading
import time

import pytest

from components.train_model import TrainingError, error_summary, launch, lost, tf_config


def history(job):
    path = job / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.e2e
def test_two_workers_train_and_only_the_chief_writes(digits_data, tmp_path):
    job = tmp_path / "job"
    sink = io.StringIO()
    before = set(os.listdir("/tmp"))
    result = launch(
        2, ["--data-dir", str(digits_data), "--job-dir", str(job), "--epochs", "2"], str(tmp_path / "logs"), sink=sink
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
    assert not [d for d in set(os.listdir("/tmp")) - before if d.startswith("tfpipe-worker")]
    assert sorted(os.listdir(tmp_path / "logs")) == ["chief.attempt-1.log", "worker-0.attempt-1.log"]
    # the steps in one compiled call per epoch (the default's 32, capped at the epoch's 23 steps) train and validate
    # exactly as one step a call: the same losses and accuracies, the validation pass included
    again = tmp_path / "one-step"
    flags = ["--data-dir", str(digits_data), "--job-dir", str(again), "--epochs", "2", "--steps-per-execution", "1"]
    launch(2, flags, str(tmp_path / "logs-one-step"), sink=io.StringIO())
    figures = ("loss", "accuracy", "val_loss", "val_accuracy")
    assert [[h[k] for k in figures] for h in history(again)] == [[h[k] for k in figures] for h in history(job)]


def wine_csv(path, bad_row: int = 5):
    """scikit-learn's wine data as a user's CSV: 178 rows, 13 named feature columns, a `label` column and one
    unreadable value."""
    import csv

    from sklearn.datasets import load_wine

    bunch = load_wine()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*bunch.feature_names, "label"])
        for i, (row, target) in enumerate(zip(bunch.data, bunch.target)):
            writer.writerow(["oops" if i == bad_row else row[0], *row[1:], int(target)])
    return path


@pytest.mark.e2e
def test_killed_worker_restarts_group_and_resumes_from_backup(digits_data, tmp_path):
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
    assert epochs == list(range(1, 7)), epochs  # continued from the backup, not restarted from epoch 1
    assert "restarting the group" in sink.getvalue()
    # the second attempt started after the epochs done before the kill
    assert "worker-0 exited with code -9" in sink.getvalue()
    second = (tmp_path / "logs" / "chief.attempt-2.log").read_text()
    assert f"Epoch {killed[0] + 1}/6" in second and "Epoch 1/6" not in second
    assert (job / "model" / "saved_model.pb").exists()


def test_restart_budget_is_bounded(tmp_path):
    """A worker lost on every attempt: the group restarts `max_restarts` times, then the step fails."""

    def kill_at_once(attempt, pids):
        os.kill(pids[1], signal.SIGKILL)

    sink = io.StringIO()
    with pytest.raises(TrainingError, match=r"training failed after 2 attempt\(s\): workers were lost every time"):
        launch(
            2,
            ["--data-dir", str(tmp_path / "missing"), "--job-dir", str(tmp_path / "j")],
            str(tmp_path / "logs"),
            max_restarts=1,
            sink=sink,
            on_start=kill_at_once,
        )
    assert sink.getvalue().count("worker-0 exited with code -9 (killed by a signal: lost)") == 2
    assert "restarting the group (1/1)" in sink.getvalue()


def test_a_worker_failing_with_an_error_ends_the_step_at_once(tmp_path):
    """A Python exception fails the same way on every attempt: no restart, the first worker's error is reported."""
    sink = io.StringIO()
    started = time.time()
    with pytest.raises(TrainingError) as failure:
        launch(
            2,
            ["--data-dir", str(tmp_path / "missing"), "--job-dir", str(tmp_path / "j")],
            str(tmp_path / "logs"),
            max_restarts=2,
            sink=sink,
        )
    message = str(failure.value)
    first = re.match(
        r"(chief|worker-0) failed \(exit code 1, attempt 1\): NotFoundError: .*missing/stats\.json", message
    )  # the first worker to fail (both do, at about the same time)
    assert first and f"{first[1]}.attempt-1.log" in message
    assert "attempt 2:" not in sink.getvalue() and "restarting the group" not in sink.getvalue()
    assert f"{first[1]} failed with an error: not restarting" in sink.getvalue()
    assert sorted(os.listdir(tmp_path / "logs")) == ["chief.attempt-1.log", "worker-0.attempt-1.log"]
    assert time.time() - started < 60


def test_lost_and_error_summary(tmp_path):
    assert [lost(code) for code in (-9, -15, 137, 143, 0, 1, 2, 128)] == [True] * 4 + [False] * 4
    log = tmp_path / "w.log"
    log.write_text(
        'Epoch 1/2\nTraceback (most recent call last):\n  File "x.py", line 1\n    fit()\n'
        "ValueError: Unexpected result of `train_function` (Empty logs).\nmore details\n"
    )
    assert error_summary(str(log)) == "ValueError: Unexpected result of `train_function` (Empty logs)."
    log.write_text("python -m trainer.task: error: --epochs must be >= 1\n\n")
    assert error_summary(str(log)) == "python -m trainer.task: error: --epochs must be >= 1"
    assert error_summary(str(tmp_path / "none.log")) == ""


def test_tf_config_for_local_workers_uses_vertex_layout():
    assert tf_config([1000, 1001, 1002], 0) == {
        "cluster": {"chief": ["localhost:1000"], "worker": ["localhost:1001", "localhost:1002"]},
        "task": {"type": "chief", "index": 0},
    }
    assert tf_config([1000, 1001, 1002], 2)["task"] == {"type": "worker", "index": 1}
    assert tf_config([1000], 0) == {"cluster": {"chief": ["localhost:1000"]}, "task": {"type": "chief", "index": 0}}
