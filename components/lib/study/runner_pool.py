"""The study's side of the warm trial runners (`components.lib.study.trial_runner`): one runner process
(`TrialRunner`), a pool of them (`RunnerPool`), what each imports before its first trial (`PRELOAD`) and the
environment trials start from (`runner_env`)."""

import json
import os
import queue
import subprocess
import sys
import threading

from core import gpus as machine
from trainer.flags import TRAINER_MODULE

# What a trial of `trainer.task` imports: a runner loads it before it has a trial (trainer.task first: it sets
# TF_USE_LEGACY_KERAS before tf-keras is imported)
PRELOAD = {
    TRAINER_MODULE: [
        "trainer.task",
        "tensorflow",
        "tf_keras",
        "hypertune",
        "trainer.callbacks",
        "trainer.data",
        "trainer.model",
        "core.warmup",
        "trainer.distribute",
    ]
}


def runner_env(env: dict | None) -> dict:
    """The environment of a trial's process: this process's, `env` over it, unbuffered output, no TF_CONFIG."""
    base = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    base.pop("TF_CONFIG", None)
    return base


class TrialRunner:
    """One warm `python -m components.lib.study.trial_runner` process (see that module): started at once, so its imports
    run while the study waits for Vizier; `run` sends it a trial and waits for the exit code."""

    def __init__(self, module: str, env: dict, log_path: str):
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "components.lib.study.trial_runner",
                    "--preload",
                    ",".join(PRELOAD.get(module, [])),
                    module,
                ],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                bufsize=1,
            )

    def run(self, argv: list[str], env: dict, log: str) -> int:
        """Run one trial; its exit code (the process's own when it died during the trial)."""
        try:
            stdin, stdout = self.process.stdin, self.process.stdout
            assert stdin is not None and stdout is not None  # both are pipes
            stdin.write(json.dumps({"argv": argv, "env": env, "log": log}) + "\n")
            stdin.flush()
            answer = stdout.readline()
        except (BrokenPipeError, OSError):
            answer = ""
        if not answer:
            self.close()
            return self.process.returncode if self.process.returncode not in (None, 0) else 1
        return int(json.loads(answer)["exit"])

    def end(self) -> None:
        """Tell the runner to exit (end of its stdin)."""
        if self.process.stdin and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def close(self) -> None:
        """End the runner and wait for it (killed after 10 s)."""
        self.end()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kill the runner (SIGKILL) and wait for it."""
        self.process.kill()
        self.process.wait()


class RunnerPool:
    """`size` warm runners, started at once, runner slot i with `core.gpus.gpu_env(gpus, i, size)` (its own GPUs, or
    a shared one with memory growth; `gpus`: default `core.gpus.machine_gpus` of `env`); at most `size` trials run at
    once. A runner is taken for a trial and given back when the trial succeeded, else closed (a fresh one is started
    in its slot for a later trial). `on_start(pid)` after each runner starts; when it raises, that runner is killed
    and the error propagates (from the pool's construction, the runners started before it closed)."""

    def __init__(self, size: int, module: str, env: dict, log_dir: str, gpus: list[str] | None = None, on_start=None):
        self.module, self.env, self.log_dir, self.on_start = module, env, log_dir, on_start
        gpus = machine.machine_gpus(env) if gpus is None else gpus
        self.devices = [machine.gpu_env(gpus, slot, size) for slot in range(size)]
        self.idle: queue.SimpleQueue = queue.SimpleQueue()
        self.started = 0
        self._all: list[TrialRunner] = []
        self._lock = threading.Lock()
        try:
            for slot in range(size):
                self.idle.put((slot, self._start(slot)))
        except BaseException:
            self.close()
            raise

    def _start(self, slot: int) -> TrialRunner:
        with self._lock:
            self.started += 1
            log = os.path.join(self.log_dir, f"runner-{self.started}.log")
            runner = TrialRunner(self.module, {**self.env, **self.devices[slot]}, log)
            self._all.append(runner)
        if self.on_start:
            try:
                self.on_start(runner.process.pid)
            except BaseException:
                runner.kill()
                raise
        return runner

    def run(self, argv: list[str], env: dict, log: str) -> int:
        """Run a trial in an idle runner, else in a fresh one in the slot of a closed one; its exit code."""
        slot, runner = self.idle.get()
        if runner is None:
            runner = self._start(slot)
        code = runner.run(argv, env, log)
        if code != 0:
            runner.close()
        self.idle.put((slot, runner if code == 0 else None))
        return code

    def close(self) -> None:
        """End every runner: all are told at once, then waited for (each exits at once: `trial_runner`)."""
        for runner in self._all:
            runner.end()
        for runner in self._all:
            runner.close()
