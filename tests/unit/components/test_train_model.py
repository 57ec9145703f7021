"""The local launcher: the cluster it gives its workers, lost workers restarting the group, failing workers ending
the step at once (real training: tests/e2e/test_training.py)."""

import io
import os
import re
import signal
import time

import pytest

from components.train_model import TrainingError, error_summary, launch, lost, tf_config


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
