"""pipelines.rehearsal.warm_launchers: a rehearsal's GCPC container tasks run in processes forked from a server that
imported their modules once, each with its own arguments, environment, output and exit status."""

import os
import sys
import time
from pathlib import Path

import pytest
from kfp.local import subprocess_task_handler

from pipelines.rehearsal import redirect, warm_launchers
from pipelines.rehearsal.run import gcpc_launchers

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = "google_cloud_pipeline_components.container.v1.custom_job.launcher"
TASK = """
import gc, os, sys
import wl_dep  # imported by the process that imported this module first

if __name__ == "__main__":
    parent = "server" if wl_dep.PID == os.getppid() else "other"
    print("argv", sys.argv[1:], "parent", parent, "frozen", gc.get_freeze_count() > 0)
    print("env", os.environ.get("WL_VALUE"), os.environ.get("WL_FIRST_ONLY"), file=sys.stderr)
    if sys.argv[1] == "raise":
        raise ValueError("boom")
    sys.exit(int(sys.argv[1]))
"""
SLOW = """
import os, signal, sys, time

if __name__ == "__main__":
    if sys.argv[1] == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[2], "w").write("terminated"), sys.exit(0)))
    print(os.getpid())
    time.sleep(60)
"""
PROBE = """
import sys
warm = "google_cloud_pipeline_components.container.v1.gcp_launcher.job_remote_runner" in sys.modules
import google.auth
from google.api_core import grpc_helpers
from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner

if __name__ == "__main__":
    credentials, project = google.auth.default()
    print(warm, job_remote_runner._POLLING_INTERVAL_IN_SECONDS, grpc_helpers.create_channel.__module__, credentials.token)
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A folder of task modules on the server's and tasks' path, as their working directory."""
    (tmp_path / "wl_dep.py").write_text("import os\nPID = os.getpid()\n")
    (tmp_path / "wl_task.py").write_text(TASK)
    (tmp_path / "wl_slow.py").write_text(SLOW)
    (tmp_path / "wl_probe.py").write_text(PROBE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    monkeypatch.delenv("WL_VALUE", raising=False)
    monkeypatch.delenv("WL_FIRST_ONLY", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-u", "-m", module, *args]


def test_each_task_runs_forked_from_the_server_with_its_own_arguments_environment_output_and_exit_status(
    modules, capsys
):
    original = subprocess_task_handler.run_local_subprocess
    with warm_launchers.serving(["wl_task"]):
        run = subprocess_task_handler.run_local_subprocess
        codes = [
            run(command("wl_task", "0"), {"WL_VALUE": "a", "WL_FIRST_ONLY": "set"}),
            run(command("wl_task", "3"), {"WL_VALUE": "b"}),
            run(command("wl_task", "raise"), {"WL_VALUE": "c"}),
        ]
    assert subprocess_task_handler.run_local_subprocess is original
    lines = capsys.readouterr().out.split("\n")
    assert codes == [0, 3, 1]
    assert lines[:9] == [
        "argv ['0'] parent server frozen True",
        "env a set",
        "",
        "",
        "argv ['3'] parent server frozen True",
        "env b None",
        "",
        "",
        "argv ['raise'] parent server frozen True",
    ]
    assert lines[9:11] == ["env c None", "Traceback (most recent call last):"]
    assert lines[-6:] == [
        f'  File "{modules / "wl_task.py"}", line 10, in <module>',
        '    raise ValueError("boom")',
        "ValueError: boom",
        "",
        "",
        "",
    ]


def test_a_command_of_no_served_module_runs_as_kfp_local_runs_it(modules, capsys):
    with warm_launchers.serving(["wl_task"]):
        code = subprocess_task_handler.run_local_subprocess([sys.executable, "-m", "wl_task", "4"], {"WL_VALUE": "d"})
    assert code == 4
    assert capsys.readouterr().out == "argv ['4'] parent other frozen False\nenv d None\n\n\n"


def test_the_rehearsals_redirect_applies_in_the_server_and_each_task(modules, monkeypatch, capsys):
    for name, value in redirect.environment("127.0.0.1:1", "http://127.0.0.1:2", "p-rehearsal").items():
        monkeypatch.setenv(name, value)
    with warm_launchers.serving([LAUNCHER, "wl_probe"]):
        code = subprocess_task_handler.run_local_subprocess(command("wl_probe"))
    assert (code, capsys.readouterr().out) == (0, "True 0.25 pipelines.rehearsal.redirect rehearsal\n\n\n")


@pytest.mark.parametrize("on_sigterm", ["exit", "ignore"])
def test_a_task_whose_caller_stops_waiting_is_ended(modules, monkeypatch, on_sigterm):
    """SIGTERM (the process's handler runs), else SIGKILL after the grace period; none outlives the server."""

    class Interrupted:
        pid = 0

        def write(self, text):
            if text.strip():
                self.pid = int(text)
                raise KeyboardInterrupt

    launchers = warm_launchers.WarmLaunchers(["wl_slow"], grace=0.5)
    out = Interrupted()
    monkeypatch.setattr(sys, "stdout", out)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        launchers.run(command("wl_slow", on_sigterm, str(modules / "terminated")), dict(os.environ))
    launchers.close()
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.kill(out.pid, 0)
    assert (modules / "terminated").exists() == (on_sigterm == "exit")


def test_a_task_of_a_module_the_server_failed_to_import_runs_as_its_own_process(modules):
    (modules / "wl_broken.py").write_text("import wl_absent\n")
    launchers = warm_launchers.WarmLaunchers(["wl_task", "wl_broken"])
    launchers._server.wait()
    assert not launchers.runs(command("wl_broken"))
    launchers.close()


def test_the_servers_modules_are_the_templates_gcpc_launchers():
    def executor(*command):
        return {"container": {"command": list(command), "image": "x"}}

    spec = {
        "deploymentSpec": {
            "executors": {
                "exec-custom-training-job": executor("python3", "-u", "-m", LAUNCHER),
                "exec-train": executor("sh", "-c", "python3 -m kfp.dsl.executor_main"),
                "exec-importer": {"importer": {}},
                "exec-again": executor("python3", "-u", "-m", LAUNCHER),
            }
        }
    }
    assert gcpc_launchers(spec) == [LAUNCHER]
