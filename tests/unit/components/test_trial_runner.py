"""Warm trial runners: trials one after another in one process, each with its own environment, argv and log
(file descriptors 1 and 2), a failing trial retiring its runner."""

import json
import subprocess
import sys

import pytest

from components.lib.study.runner_pool import RunnerPool, TrialRunner

TRIAL = """
import os, sys
print("argv", sys.argv[1:], "trial", os.environ.get("CLOUD_ML_TRIAL_ID"), "leak", os.environ.get("LEAK"), flush=True)
os.write(2, b"c-level stderr\\n")
os.environ["LEAK"] = "from an earlier trial"
mode = sys.argv[1]
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "raise":
    raise ValueError("boom")
if mode == "die":
    os._exit(9)
"""


@pytest.fixture
def module(tmp_path, monkeypatch):
    (tmp_path / "fake_trial.py").write_text(TRIAL)
    return {"PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}"}


def test_trials_run_one_after_another_in_one_process(tmp_path, module):
    runner = TrialRunner("fake_trial", {**module, "BASE": "1"}, str(tmp_path / "runner.log"))
    try:
        assert runner.run(["ok"], {"CLOUD_ML_TRIAL_ID": "1"}, str(tmp_path / "1.log")) == 0
        assert runner.run(["ok", "x"], {"CLOUD_ML_TRIAL_ID": "2"}, str(tmp_path / "2.log")) == 0
        assert runner.run(["exit", "4"], {"CLOUD_ML_TRIAL_ID": "3"}, str(tmp_path / "3.log")) == 4
        runner.process.wait(10)  # retired after the failing trial
    finally:
        runner.close()
    assert runner.process.returncode == 0
    assert (tmp_path / "1.log").read_text() == "argv ['ok'] trial 1 leak None\nc-level stderr\n"
    # the environment is the runner's own plus the trial's: nothing of the earlier trial leaks
    assert (tmp_path / "2.log").read_text() == "argv ['ok', 'x'] trial 2 leak None\nc-level stderr\n"


def test_a_raising_or_dying_trial_is_a_failure_and_its_runner_is_replaced(tmp_path, module):
    pool = RunnerPool(1, "fake_trial", module, str(tmp_path / "runners"))
    try:
        assert pool.run(["raise"], {}, str(tmp_path / "raise.log")) == 1
        assert "ValueError: boom" in (tmp_path / "raise.log").read_text()
        assert pool.run(["die"], {}, str(tmp_path / "die.log")) == 9
        assert pool.run(["ok"], {}, str(tmp_path / "ok.log")) == 0
        assert pool.run(["ok"], {}, str(tmp_path / "ok2.log")) == 0
    finally:
        pool.close()
    assert pool.started == 3 and sorted(p.name for p in (tmp_path / "runners").iterdir()) == [
        "runner-1.log",
        "runner-2.log",
        "runner-3.log",
    ]


def test_runner_protocol_from_the_command_line(tmp_path, module):
    job = json.dumps({"argv": ["ok"], "env": {"CLOUD_ML_TRIAL_ID": "7"}, "log": str(tmp_path / "t.log")})
    done = subprocess.run(
        [sys.executable, "-m", "components.lib.study.trial_runner", "--preload", "json", "fake_trial"],
        input=job + "\n",
        capture_output=True,
        text=True,
        env={**module},
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == '{"exit": 0}\n'
    assert "trial 7" in (tmp_path / "t.log").read_text()


def test_a_runner_leaves_without_the_interpreters_teardown(tmp_path, module):
    """The end of its stdin ends the runner at once: exit handlers (TensorFlow's teardown among them) do not run,
    where a plain interpreter that imported the same module runs them."""
    marker = tmp_path / "torn-down"
    (tmp_path / "exit_hook.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
    )
    runner = subprocess.run(
        [sys.executable, "-m", "components.lib.study.trial_runner", "--preload", "exit_hook", "fake_trial"],
        input="",
        capture_output=True,
        text=True,
        env={**module},
        timeout=60,
    )
    assert runner.returncode == 0 and not marker.exists()
    subprocess.run([sys.executable, "-c", "import exit_hook"], env={**module}, check=True, timeout=60)
    assert marker.exists()
