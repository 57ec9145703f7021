"""A warm trial process for the self-hosted study: `python -m components.lib.study.trial_runner [--preload M,...] MODULE`.

It imports the trainer's heavy dependencies (`--preload`: TensorFlow, tf-keras, the trainer's modules) as it starts,
before the study has a trial for it, then runs trials one after another, each as `python -m MODULE ARGS` would
(`runpy`, `sys.argv`, `SystemExit` as the exit code; `IN_PROCESS_ENV` set, so that the trainer returns rather than
ending the process), with the trial's environment and its output (file descriptors
1 and 2: TensorFlow's C++ logs too) in the trial's log. A study of N trials, P in parallel, thus starts P TensorFlow
processes, not N. A failed trial retires its runner: a failure never leaks into another trial.

Protocol: one JSON line per trial on stdin, `{"argv": [...], "env": {...}, "log": PATH}`; one per trial on the
original stdout, `{"exit": CODE}`. End of stdin ends the runner.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import sys
import traceback

from trainer.environment import IN_PROCESS_ENV


def _redirect(path: str) -> None:
    """Send file descriptors 1 and 2 (Python's and the C++ libraries' output) to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _exit_code(error: SystemExit) -> int:
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)  # sys.exit("message"), as the interpreter would
    return 1


def run_trial(module: str, argv: list[str], env: dict, base_env: dict) -> int:
    """Run `python -m module *argv` in this process with `base_env` + `env` as the environment; its exit code."""
    os.environ.clear()
    os.environ.update({**base_env, **env, IN_PROCESS_ENV: "1"})
    if "tf_keras" in sys.modules:  # a fresh Keras session per trial: layer names and state as in a new process
        sys.modules["tf_keras"].backend.clear_session()
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:
        return _exit_code(e)
    except BaseException:  # noqa: BLE001 (the trial's failure, reported as the interpreter would)
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.lib.study.trial_runner", description=__doc__.splitlines()[0])
    p.add_argument("--preload", default="", help="comma-separated modules to import before the first trial")
    p.add_argument("module", help="the trial's module, run as `python -m MODULE`")
    args = p.parse_args(argv)
    control = os.fdopen(os.dup(1), "w", buffering=1)  # results; fd 1 itself goes to each trial's log
    os.dup2(2, 1)  # until the first trial: start-up output to the runner's own log (its stderr)
    for name in filter(None, args.preload.split(",")):
        importlib.import_module(name)
    base_env = dict(os.environ)
    for line in sys.stdin:
        job = json.loads(line)
        _redirect(job["log"])
        code = run_trial(args.module, job["argv"], job["env"], base_env)
        control.write(json.dumps({"exit": code}) + "\n")
        if code != 0:
            return 0  # retire: the study starts a fresh runner for the next trial
    return 0


if __name__ == "__main__":
    code = main()
    # Exit without the interpreter's teardown (seconds with TensorFlow loaded, and the study waits for it): every
    # trial's outputs are complete when its exit code is sent, as the next trial in this process relies on.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
