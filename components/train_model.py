"""Self-hosted training step: the local multi-worker launcher.

Runs `python -m trainer.task` as N processes on free localhost ports with the cluster layout Vertex AI gives a
custom job (`TF_CONFIG` with one `chief` and N−1 `worker`s; `AIP_*` output locations) and prefixes their output
with the task name. When a worker is lost (killed by a signal: preempted, OOM-killed, stopped) it stops the others
and restarts the whole group (bounded), which resumes after the last checkpointed epoch (`trainer.checkpoints`).
When a worker exits on its own with an error (a Python exception: the same input fails the same way on every
attempt) it stops the others and fails at once with that worker's error. The chief's progress lines
(`core.progress`) are relayed as they are, and a restart adds one of its own.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from core import gpus as machine, progress
from trainer.environment import LEGACY_KERAS
from trainer.flags import TRAINER_MODULE


class TrainingError(RuntimeError):
    """Training failed: a worker raised an error, or workers were lost more often than the restart budget.
    `task`, `status`, `log`: the failing worker's index, exit status and log (None when no single worker failed)."""

    def __init__(self, message: str, task: int | None = None, status: int | None = None, log: str = ""):
        super().__init__(message)
        self.task, self.status, self.log = task, status, log


@dataclass(frozen=True)
class InPlaceRestarts:
    """Restarts of a lost worker (killed by a signal) on its own, at once and at its address, at most `per_worker`
    times each, before the group fails (and restarts, within `max_restarts`); `whole_group`: every worker restarts
    with it. A worker exiting with an error still fails the group at once."""

    per_worker: int
    whole_group: bool = False


@dataclass
class LaunchResult:
    attempts: int
    seconds: float
    exit_codes: list[list[int]] = field(default_factory=list)  # per attempt, per worker
    devices: dict[str, str] = field(default_factory=dict)  # task name -> its GPUs (core.gpus.describe)


def free_ports(count: int) -> list[int]:
    """Ports the OS reports free (held open together so they are distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def task_name(index: int) -> str:
    return "chief" if index == 0 else f"worker-{index - 1}"


def tf_config(ports: list[int], index: int) -> dict:
    """Process `index` of the group: 0 is the chief, the others are workers 0..N-2 (Vertex's layout)."""
    cluster = {"chief": [f"localhost:{ports[0]}"]}
    if len(ports) > 1:
        cluster["worker"] = [f"localhost:{p}" for p in ports[1:]]
    task = {"type": "chief", "index": 0} if index == 0 else {"type": "worker", "index": index - 1}
    return {"cluster": cluster, "task": task}


def lost(returncode: int) -> bool:
    """Whether an exit status means the process was killed from outside (a negative status: killed by that signal;
    128 + N: a shell reporting signal N) rather than exiting on its own (0, or an error status such as a Python
    exception's 1)."""
    return returncode < 0 or 128 < returncode < 128 + 65


def error_summary(log_path: str, limit: int = 600) -> str:
    """The error a worker exited with: the exception line closing the last traceback of its log (else the log's last
    line), shortened to `limit` characters."""
    try:
        with open(log_path, errors="replace") as f:
            lines = [line.rstrip() for line in f]
    except OSError:
        return ""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    tail = lines[starts[-1] + 1 :] if starts else lines
    candidates = [line for line in tail if line.strip() and not line[0].isspace()]
    text = candidates[0] if starts and candidates else (next((x for x in reversed(lines) if x.strip()), ""))
    text = re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=\w+:)", "", text)  # tensorflow.python...errors_impl.NotFoundError
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pump(stream, prefix: str, sink, log_file) -> None:
    """Relay a worker's output to `sink` prefixed with its task name, its progress lines (the chief's) as they are."""
    for line in iter(stream.readline, ""):
        sink.write(line if line.startswith(progress.PREFIX) else f"[{prefix}] {line}")
        sink.flush()
        log_file.write(line)
    stream.close()


def _tf_config_env(ports: list[int], index: int) -> dict:
    return {"TF_CONFIG": json.dumps(tf_config(ports, index))} if len(ports) > 1 else {}


def _with_devices(cluster_env, devices: list[dict]):
    """`cluster_env` with worker i's GPU variables (`devices[i]`) added."""
    return lambda ports, index: {**cluster_env(ports, index), **devices[index]}


def _start_group(
    num_workers: int, trainer_args: list[str], env: dict, log_dir: str, attempt: int, sink, cluster_env=_tf_config_env
):
    ports = free_ports(num_workers)
    procs, threads = [], []
    for index in range(num_workers):
        proc, log_file, thread = _start_worker(
            index,
            trainer_args,
            env,
            os.path.join(log_dir, f"{task_name(index)}.attempt-{attempt}.log"),
            sink,
            ports,
            cluster_env,
        )
        procs.append((proc, log_file))
        threads.append(thread)
    return procs, threads, ports


def _start_worker(index: int, trainer_args: list[str], env: dict, log_path: str, sink, ports: list[int], cluster_env):
    name = task_name(index)
    log_file = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", TRAINER_MODULE, *trainer_args],
        env={**env, **cluster_env(ports, index)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    thread = threading.Thread(target=_pump, args=(proc.stdout, name, sink, log_file), daemon=True)
    thread.start()
    return proc, log_file, thread


def _stop(procs, grace: float = 5.0) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.time() + grace
    for proc, _ in procs:
        try:
            proc.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _watch(num_workers, trainer_args, env, log_dir, attempt, sink, on_start, cluster_env, in_place, deadline):
    """Start the group and wait until every worker exits 0 or one fails for good; {index: exit status} of the failed
    workers ({} when all succeeded), the group stopped, and every worker's exit status. With `in_place`, a lost
    worker restarts on its own first."""
    procs, threads, ports = _start_group(num_workers, trainer_args, env, log_dir, attempt, sink, cluster_env)
    restarts = [0] * num_workers  # in-place restarts of each worker (in_place)
    starts = [0] * num_workers  # processes started for each worker after its first (their logs' numbers)
    outcome: dict[int, int] | None = None  # index -> exit status of the workers that ended ({}: all succeeded)
    try:
        if on_start:  # may raise (a cancelled job): the group is stopped below
            on_start(attempt, [p.pid for p, _ in procs])
        while True:
            codes = [p.poll() for p, _ in procs]
            if all(code == 0 for code in codes):
                outcome = {}
                break
            failed = {i: code for i, code in enumerate(codes) if code not in (None, 0)}
            if deadline is not None and time.time() > deadline:
                sink.write("[launcher] the time allowed ran out; stopping the group\n")
                raise TrainingError(f"training ran out of its time after {round(time.time() - deadline, 1)}s over")
            if failed and in_place and all(lost(c) and restarts[i] < in_place.per_worker for i, c in failed.items()):
                for i, code in failed.items():
                    restarts[i] += 1
                    sink.write(
                        f"[launcher] {task_name(i)} exited with code {code} (killed by a signal: lost); restarting "
                        f"{'the group' if in_place.whole_group else 'it'} in place ({restarts[i]}/{in_place.per_worker})\n"
                    )
                again = range(num_workers) if in_place.whole_group else sorted(failed)
                _stop([procs[i] for i in again])
                for i in again:
                    starts[i] += 1
                    threads[i].join(5)  # its output relayed before its log closes
                    procs[i][1].close()
                    log = os.path.join(log_dir, f"{task_name(i)}.attempt-{attempt}.restart-{starts[i]}.log")
                    proc, log_file, thread = _start_worker(i, trainer_args, env, log, sink, ports, cluster_env)
                    procs[i], threads[i] = (proc, log_file), thread
                if on_start:
                    on_start(attempt, [p.pid for p, _ in procs])
                continue
            if failed:
                # a lost worker makes its peers fail too (UnavailableError): when one of the ended workers was
                # killed by a signal, that is the cause, whatever the others exited with
                for i, code in failed.items():
                    sink.write(
                        f"[launcher] {task_name(i)} exited with code {code}"
                        f"{' (killed by a signal: lost)' if lost(code) else ''}; stopping the group\n"
                    )
                outcome = failed
                break
            time.sleep(0.05)
    finally:
        _stop(procs)
        for thread in threads:
            thread.join(5)
        for _, log_file in procs:
            log_file.close()
    return outcome, [p.returncode for p, _ in procs]


def _log_of(log_dir: str, index: int, attempt: int) -> str:
    """The newest log of worker `index` in `attempt`."""
    prefix = f"{task_name(index)}.attempt-{attempt}"
    restarts = [f for f in os.listdir(log_dir) if f.startswith(f"{prefix}.restart-")]
    newest = max(restarts, key=lambda f: int(f.rsplit("-", 1)[1].split(".")[0]), default=f"{prefix}.log")
    return os.path.join(log_dir, newest)


def launch(
    num_workers: int,
    trainer_args: list[str],
    log_dir: str,
    max_restarts: int = 2,
    env: dict | None = None,
    sink=None,
    on_start=None,
    cluster_env=_tf_config_env,
    in_place: InPlaceRestarts | None = None,
    timeout: float | None = None,
    gpus: list[str] | None = None,
) -> LaunchResult:
    """Run the trainer group until every worker exits 0. A lost worker (killed by a signal) stops the group and
    restarts it, at most `max_restarts` times; a worker exiting with an error status stops the group and raises
    `TrainingError` with its error at once (restarting would fail the same way).

    `on_start(attempt, pids)` is called after each group starts and after a worker restarts in place (used to observe
    or inject faults); `cluster_env(ports, index)` gives worker `index` its cluster variables (default: `TF_CONFIG`,
    chief + workers); `in_place`: a lost worker restarts on its own first (InPlaceRestarts); `timeout`: seconds the
    whole run may take (then `TrainingError`); `gpus`: the machine's GPU ids (default `core.gpus.machine_gpus`),
    which `core.gpus.gpu_env` divides among the workers. The workers' temporary files (`TMPDIR`: a non-chief's
    discarded outputs) are in a folder of the launch's, removed when it ends, a lost worker's too.
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
    sink = sink or sys.stdout
    os.makedirs(log_dir, exist_ok=True)
    base_env = {**os.environ, **(env or {}), **LEGACY_KERAS, "PYTHONUNBUFFERED": "1"}
    base_env.pop("TF_CONFIG", None)
    base_env.pop("CLUSTER_SPEC", None)
    started = time.time()
    deadline = started + timeout if timeout else None
    gpus = machine.machine_gpus(base_env) if gpus is None else gpus
    devices = [machine.gpu_env(gpus, i, num_workers) for i in range(num_workers)]
    cluster_env = _with_devices(cluster_env, devices)
    result = LaunchResult(
        attempts=0, seconds=0.0, devices={task_name(i): machine.describe(d) for i, d in enumerate(devices)}
    )
    sink.write(f"[launcher] devices: {', '.join(f'{name} {what}' for name, what in result.devices.items())}\n")
    with tempfile.TemporaryDirectory(
        prefix="tfpipe-workers-", dir=base_env.get("TMPDIR"), ignore_cleanup_errors=True
    ) as scratch:
        base_env["TMPDIR"] = scratch
        for attempt in range(1, max_restarts + 2):
            result.attempts = attempt
            sink.write(f"[launcher] attempt {attempt}: starting {num_workers} worker(s)\n")
            failed, codes = _watch(
                num_workers, trainer_args, base_env, log_dir, attempt, sink, on_start, cluster_env, in_place, deadline
            )
            result.exit_codes.append(codes)
            if not failed:
                result.seconds = round(time.time() - started, 2)
                sink.write(f"[launcher] all workers finished in {result.seconds}s (attempt {attempt})\n")
                return result
            lost_workers = [i for i, code in failed.items() if lost(code)]
            if not lost_workers:
                first = min(failed)
                log = _log_of(log_dir, first, attempt)
                error = error_summary(log) or f"exit code {failed[first]}"
                sink.write(
                    f"[launcher] {task_name(first)} failed with an error: not restarting (it would fail the same way)\n"
                )
                raise TrainingError(
                    f"{task_name(first)} failed (exit code {failed[first]}, attempt {attempt}): {error} (log: {log})",
                    first,
                    failed[first],
                    log,
                )
            if attempt <= max_restarts:
                names = ", ".join(task_name(i) for i in lost_workers)
                sink.write(
                    f"[launcher] {names} lost; restarting the group ({attempt}/{max_restarts}); training resumes from "
                    "the last checkpoint\n"
                )
                sink.write(
                    progress.line(
                        "train",
                        "restart",
                        f"{names} lost: restarting the workers ({attempt}/{max_restarts}), resuming from the last "
                        "checkpoint",
                        done=attempt,
                        total=max_restarts,
                        unit="restarts",
                    )
                    + "\n"
                )
                sink.flush()
        last = min(lost_workers)
        raise TrainingError(
            f"training failed after {result.attempts} attempt(s): workers were lost every time; exit codes "
            f"{result.exit_codes}; logs in {log_dir}",
            last,
            failed[last],
            _log_of(log_dir, last, result.attempts),
        )


def train_model(
    dataset: Input[Dataset],
    workers: int,
    epochs: int,
    hyperparameters: dict,
    trainer: dict,
    max_restarts: int,
    model: Output[Model],
    metrics: Output[Metrics],
    training: Output[Artifact],
):
    """KFP step (self-hosted targets): train `trainer`'s model with `workers`
    local processes and the given hyperparameters (trainer flag names with underscores, e.g. from the tuning step);
    the model goes to `model`.

    Args:
        dataset: The prepared data (shards per split, stats.json).
        workers: Local worker processes (replicas of the multi-worker strategy).
        epochs: Training epochs.
        hyperparameters: Trainer flags by name with underscores (batch_size, learning_rate, tuned values).
        max_restarts: Restarts of the worker group after a lost worker.
        trainer: What the trainer trains: `TrainerSetup` as a dict (the config's trainer section: the model builder,
            mixed precision, fixed hyperparameter values).
    """
    import json
    import os

    from components.train_model import launch
    from trainer.environment import output_dirs
    from trainer.flags import TrainerSetup, command_line

    job_dir = training.path
    os.makedirs(job_dir, exist_ok=True)
    args = command_line(
        {**hyperparameters, "epochs": epochs},
        data_dir=dataset.path,
        job_dir=job_dir,
        trainer=TrainerSetup.from_dict(trainer),
    )
    env = {  # what Vertex AI sets for a custom job
        **output_dirs(job_dir, model_dir=model.path),
        "CLOUD_ML_HP_METRIC_FILE": os.path.join(job_dir, "hypertune", "output.metrics"),
    }
    result = launch(workers, args, os.path.join(job_dir, "worker-logs"), max_restarts, env=env)
    with open(os.path.join(job_dir, "metrics.json")) as f:
        summary = json.load(f)
    summary.update(attempts=result.attempts, launcher_seconds=result.seconds, worker_devices=result.devices)
    with open(os.path.join(job_dir, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    for key in ("val_accuracy", "val_loss", "train_accuracy", "train_loss"):
        metrics.log_metric(key, summary[key])
    metrics.log_metric("attempts", result.attempts)
    model.metadata.update(framework="tensorflow", format="saved_model", val_accuracy=summary["val_accuracy"])
