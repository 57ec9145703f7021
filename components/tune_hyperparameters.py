"""Self-hosted hyperparameter study (local and kubeflow targets), the counterpart of Vertex AI's tuning job.

Each trial runs `python -m <module>` (the trainer) with the trial's flags, a distinct `CLOUD_ML_TRIAL_ID`, its own
`CLOUD_ML_HP_METRIC_FILE` and trial-scoped `AIP_*` directories (`<base>/<trial_id>/model|checkpoints|logs`, as
Vertex does), at most `parallel_trial_count` at once. The trial's metric is read from the file the real
`hypertune` library wrote. Suggestions come from OSS Vizier's designers: GP bandit (`default`, the algorithm
behind Vertex's default), grid or random search.

Trials run in warm runner processes (`components.lib.study.trial_runner`): `parallel_trial_count` of them start with the
study and import TensorFlow while Vizier loads and suggests, then each runs trials one after another (a runner
whose trial fails is replaced), so the study starts P TensorFlow processes instead of one per trial.

While it runs, the study writes progress lines (`StudyProgress`): trial k of N started and finished, the best so far,
and each running trial's epoch, read from the trainer's own progress lines in the trial's log.
"""

import contextlib
import csv
import json
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field

from kfp.dsl import Artifact, Dataset, Input, Output

from components.lib.study.hypertune_metrics import trial_metric
from components.lib.study.spec import StudySpec
from core import progress
from core.units import assignments
from trainer.environment import output_dirs
from trainer.flags import TRAINER_MODULE, command_line


class StudyFailed(RuntimeError):
    """Too many trials failed (user-facing message)."""


@dataclass
class Trial:
    trial_id: str
    parameters: dict
    status: str = "ACTIVE"  # SUCCEEDED | FAILED
    metric: float | None = None
    seconds: float = 0.0
    started: float = 0.0
    ended: float = 0.0
    output_dir: str = ""
    error: str = ""
    log_tail: list = field(default_factory=list)


def vizier_problem(spec: StudySpec):
    from vizier import pyvizier as vz

    problem = vz.ProblemStatement()
    root = problem.search_space.root
    scales = {"linear": vz.ScaleType.LINEAR, "log": vz.ScaleType.LOG, "reverse_log": vz.ScaleType.REVERSE_LOG}
    for p in spec.parameters:
        if p.type == "double":
            root.add_float_param(p.parameter_id, p.min, p.max, scale_type=scales[p.scale])
        elif p.type == "integer":
            root.add_int_param(p.parameter_id, p.min, p.max, scale_type=scales[p.scale])
        elif p.type == "categorical":
            root.add_categorical_param(p.parameter_id, list(p.values))
        else:
            root.add_discrete_param(p.parameter_id, list(p.values), scale_type=scales[p.scale])
    goal = vz.ObjectiveMetricGoal.MAXIMIZE if spec.goal == "maximize" else vz.ObjectiveMetricGoal.MINIMIZE
    problem.metric_information.append(vz.MetricInformation(spec.metric_id, goal=goal))
    return problem


def make_designer(spec: StudySpec, seed: int = 0):
    """Vizier designer for the spec's algorithm. The GP bandit's acquisition search is sized for small machines
    (2,000 evaluations, 2 ARD restarts: about a fifth of the default's time a suggestion on 2 cores), and its trials are
    padded to a multiple of 10, so the GP's JAX functions compile once per 10 trials instead of at every suggestion
    (then under 1 s a suggestion; the padding is masked out, the suggestions are the same).

    The designers are imported from their modules: `vizier.algorithms.designers` also imports BOCS, which needs
    cvxpy."""
    problem = vizier_problem(spec)
    if spec.algorithm == "grid":
        from vizier._src.algorithms.designers.grid import GridSearchDesigner

        return GridSearchDesigner(problem.search_space)
    if spec.algorithm == "random":
        from vizier._src.algorithms.designers.random import RandomDesigner

        return RandomDesigner(problem.search_space, seed=seed)
    with _without_tensorflow():
        import jax
        from vizier._src.algorithms.designers.gp_bandit import VizierGPBandit
        from vizier._src.algorithms.optimizers import eagle_strategy, vectorized_base
        from vizier.pyvizier.converters import padding

    factory = vectorized_base.VectorizedOptimizerFactory(
        strategy_factory=eagle_strategy.VectorizedEagleStrategyFactory(), max_evaluations=2000, suggestion_batch_size=25
    )
    return VizierGPBandit(
        problem,
        acquisition_optimizer_factory=factory,
        ard_random_restarts=2,
        rng=jax.random.PRNGKey(seed),
        padding_schedule=padding.PaddingSchedule(num_trials=padding.PaddingType.MULTIPLES_OF_10),
    )


@contextlib.contextmanager
def _without_tensorflow():
    """Imports in this block see no TensorFlow, unless this process has already imported it. TensorFlow
    Probability's JAX substrate (Vizier's GP) imports TensorFlow only to copy its docstrings, and skips that when the
    import fails: most of the GP bandit's import time (about 5 of 8 s on 2 cores), paid while the trial runners
    import TensorFlow themselves."""
    if "tensorflow" in sys.modules:
        yield
        return
    sys.modules["tensorflow"] = None  # `import tensorflow` raises ImportError
    try:
        yield
    finally:
        del sys.modules["tensorflow"]


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
            self.process.kill()
            self.process.wait()


class RunnerPool:
    """`size` warm runners, started at once; a runner is taken for a trial and given back when the trial succeeded,
    else closed (a fresh one is started for a later trial)."""

    def __init__(self, size: int, module: str, env: dict, log_dir: str):
        self.module, self.env, self.log_dir = module, env, log_dir
        self.idle: queue.SimpleQueue = queue.SimpleQueue()
        self.started = 0
        self._all: list[TrialRunner] = []
        self._lock = threading.Lock()
        for _ in range(size):
            self.idle.put(self._start())

    def _start(self) -> TrialRunner:
        with self._lock:
            self.started += 1
            runner = TrialRunner(self.module, self.env, os.path.join(self.log_dir, f"runner-{self.started}.log"))
            self._all.append(runner)
        return runner

    def run(self, argv: list[str], env: dict, log: str) -> int:
        try:
            runner = self.idle.get_nowait()
        except queue.Empty:
            runner = self._start()
        code = runner.run(argv, env, log)
        if code == 0:
            self.idle.put(runner)
        else:
            runner.close()
        return code

    def close(self) -> None:
        """End every runner: all are told at once, then waited for (each exits at once: `trial_runner`)."""
        for runner in self._all:
            runner.end()
        for runner in self._all:
            runner.close()


def _runner_env(env: dict | None) -> dict:
    base = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    base.pop("TF_CONFIG", None)
    return base


def run_trial(
    trial: Trial,
    spec: StudySpec,
    base_dir: str,
    module: str,
    fixed_args: list[str],
    env: dict,
    runners: RunnerPool | None = None,
    flags=command_line,
    output_base: str = "",
) -> Trial:
    """Run one trial to completion (in a warm runner of `runners`, else a fresh `python -m module` process), its
    values given as `flags(parameters)`; never raises for a failing trainer (the trial is marked FAILED). Its log
    and metric file go to `base_dir/ID`, its AIP_* output directories under `output_base/ID` (default `base_dir`)."""
    out = os.path.join(base_dir, trial.trial_id)
    os.makedirs(out, exist_ok=True)
    outputs = f"{output_base.rstrip('/')}/{trial.trial_id}" if output_base else out
    metric_file = os.path.join(out, "hypertune", "output.metrics")
    trial_vars = {"CLOUD_ML_TRIAL_ID": trial.trial_id, "CLOUD_ML_HP_METRIC_FILE": metric_file, **output_dirs(outputs)}
    argv = [*fixed_args, *flags(trial.parameters)]
    log_path = os.path.join(out, "trial.log")
    trial.output_dir, trial.started = outputs, time.time()
    if runners is not None:
        code = runners.run(argv, trial_vars, log_path)
    else:
        with open(log_path, "w") as log:
            code = subprocess.run(
                [sys.executable, "-m", module, *argv],
                env={**_runner_env(env), **trial_vars},
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
    trial.ended = time.time()
    trial.seconds = round(trial.ended - trial.started, 2)
    trial.metric = trial_metric(metric_file, spec.metric_id, spec.measurement, spec.goal)
    if code != 0 or trial.metric is None:
        trial.status = "FAILED"
        trial.error = f"exit code {code}" if code != 0 else f"no {spec.metric_id!r} reported"
        with open(log_path, errors="replace") as f:
            trial.log_tail = f.read().splitlines()[-20:]
    else:
        trial.status = "SUCCEEDED"
    return trial


class StudyProgress:
    """The study's progress lines (`core.progress`, stage `study`, written with `out`): each trial as it starts
    and finishes (its metric, the best so far, the trials running) and, every `interval` seconds while trials run and
    something changed, each running trial's latest epoch or step, read from the progress lines of its log."""

    def __init__(self, spec: StudySpec, base_dir: str, out, interval: float = 2.0):
        self.spec, self.base_dir, self.out, self.interval = spec, base_dir, out, interval
        self.running: dict[str, dict] = {}  # trial id -> its latest `train` event ({} before the first)
        self.finished = 0
        self.best: Trial | None = None
        self._read: dict[str, tuple[int, str]] = {}  # trial id -> bytes of its log read, an unfinished last line
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "StudyProgress":
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._watcher.join()

    def started(self, trial: Trial) -> None:
        with self._lock:
            self.running[trial.trial_id] = {}
            self._emit(
                "trial_started",
                f"trial {trial.trial_id}/{self.spec.max_trial_count} started ({assignments(trial.parameters)})",
                trial=trial.trial_id,
                parameters=trial.parameters,
            )

    def finished_trial(self, trial: Trial, best: Trial | None) -> None:
        with self._lock:
            self.running.pop(trial.trial_id, None)
            self.finished += 1
            self.best = best
            outcome = (
                f"{self.spec.metric_id} {trial.metric:.4f}"
                if trial.status == "SUCCEEDED" and trial.metric is not None
                else f"failed ({trial.error})"
            )
            self._emit(
                "trial_finished",
                f"trial {trial.trial_id}/{self.spec.max_trial_count}: {outcome}",
                trial=trial.trial_id,
                status=trial.status,
                metric=trial.metric,
                seconds=trial.seconds,
                parameters=trial.parameters,
            )

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if self._read_logs():
                    self._emit("trials", "")

    def _read_logs(self) -> bool:
        """Read what the running trials' logs gained; whether a trial's latest `train` event changed."""
        changed = False
        for trial_id in self.running:
            offset, partial = self._read.get(trial_id, (0, ""))
            try:
                with open(os.path.join(self.base_dir, trial_id, "trial.log"), "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:  # not started yet
                continue
            *lines, partial = (partial + data.decode(errors="replace")).split("\n")
            self._read[trial_id] = (offset + len(data), partial)
            for line in lines:
                event = progress.parse(line)
                if event and event["stage"] == "train" and event["event"] in ("start", "step", "epoch"):
                    self.running[trial_id] = event
                    changed = True
        return changed

    def _trial_state(self, trial_id: str) -> str:
        event = self.running[trial_id]
        if event.get("event") == "epoch":
            val = f" val_accuracy {event['val_accuracy']:.4f}" if "val_accuracy" in event else ""
            return f"trial {trial_id} epoch {event['done']}/{event['total']}{val}"
        if event.get("event") == "step":
            accuracy = f" accuracy {event['accuracy']:.4f}" if "accuracy" in event else ""
            return (
                f"trial {trial_id} epoch {event['epoch']}/{event['epochs']} step {event['done']}/{event['total']}"
                + accuracy
            )
        if event.get("event") == "start":
            return f"trial {trial_id} epoch {event['epoch']}/{event['epochs']}"
        return f"trial {trial_id} starting"

    def _emit(self, event: str, news: str, **fields) -> None:
        """A line: `news`, then the trials running, how many finished, the best so far."""
        state = [
            "running: " + ", ".join(self._trial_state(t) for t in sorted(self.running, key=int))
            if self.running
            else "",
            f"{self.finished}/{self.spec.max_trial_count} finished",
            f"best {self.spec.metric_id} {self.best.metric:.4f} (trial {self.best.trial_id})"
            if self.best and self.best.metric is not None
            else "",
        ]
        self.out(
            progress.line(
                "study",
                event,
                "; ".join(part for part in (news, *state) if part),
                done=self.finished,
                total=self.spec.max_trial_count,
                unit="trials",
                running={
                    t: {k: e[k] for k in ("event", "epoch", "done", "total", "accuracy", "val_accuracy") if k in e}
                    for t, e in self.running.items()
                },
                best=self.best.metric if self.best else None,
                best_trial=self.best.trial_id if self.best else None,
                metric_id=self.spec.metric_id,
                **fields,
            )
        )


def _to_vizier(trial: Trial, spec: StudySpec, number: int):
    from vizier import pyvizier as vz

    t = vz.Trial(id=number, parameters=trial.parameters)
    if trial.status == "SUCCEEDED":
        t.complete(vz.Measurement({spec.metric_id: trial.metric}))
    else:
        t.complete(vz.Measurement(), infeasibility_reason=trial.error or "failed")
    return t


def best(trials: list[Trial], spec: StudySpec) -> Trial | None:
    done = [t for t in trials if t.status == "SUCCEEDED"]
    if not done:
        return None
    return (max if spec.goal == "maximize" else min)(done, key=lambda t: t.metric or 0.0)  # SUCCEEDED: has one


def run_study(
    spec: StudySpec,
    base_dir: str,
    fixed_args: list[str],
    module: str = TRAINER_MODULE,
    env: dict | None = None,
    seed: int = 0,
    log=progress.write,
    flags=command_line,
    output_base: str = "",
) -> dict:
    """Run the study; returns `{"trials": [...], "best": {...}, "seconds": ...}` and writes the results files. Each
    trial runs `module` with `fixed_args` and `flags(its values)`, its outputs under `output_base` (a local folder
    or gs:// prefix; default `base_dir`). `log` writes a line: the trials' news and the progress lines
    (`StudyProgress`; default stdout, flushed).
    Raises StudyFailed (after writing them) once `max_failed_trial_count` trials have failed (Vertex's definition:
    no trial starts after that; those running finish)."""
    started = time.time()
    # the runners import TensorFlow while Vizier loads (seconds of its own) and makes the first suggestions
    runners = RunnerPool(
        min(spec.parallel_trial_count, spec.max_trial_count),
        module,
        _runner_env(env),
        os.path.join(base_dir, "runners"),
    )
    try:
        return _study(spec, base_dir, fixed_args, module, env, seed, log, runners, started, flags, output_base)
    finally:
        runners.close()


def _study(spec, base_dir, fixed_args, module, env, seed, log, runners, started, flags, output_base) -> dict:
    from vizier import algorithms as vza

    designer = make_designer(spec, seed)
    trials: list[Trial] = []
    running: dict = {}
    failed = 0
    with StudyProgress(spec, base_dir, log) as study, ThreadPoolExecutor(spec.parallel_trial_count) as pool:
        while len(trials) < spec.max_trial_count or running:
            free = min(spec.parallel_trial_count - len(running), spec.max_trial_count - len(trials))
            if free > 0 and failed < spec.max_failed_trial_count:
                for suggestion in designer.suggest(free)[:free]:
                    parameters = _python_values(suggestion.parameters.as_dict(), spec)
                    trial = Trial(str(len(trials) + 1), parameters)
                    trials.append(trial)
                    log(f"[study] trial {trial.trial_id} started: {parameters}")
                    study.started(trial)
                    running[
                        pool.submit(
                            run_trial, trial, spec, base_dir, module, fixed_args, env or {}, runners, flags, output_base
                        )
                    ] = trial
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            completed = []
            for future in done:
                del running[future]
                completed.append(future.result())  # re-raises an unexpected error of the runner itself
            for trial in completed:
                failed += trial.status == "FAILED"
                log(
                    f"[study] trial {trial.trial_id} {trial.status.lower()} in {trial.seconds}s: "
                    f"{spec.metric_id}={trial.metric}" + (f" ({trial.error})" if trial.error else "")
                )
                study.finished_trial(trial, best(trials, spec))
            designer.update(
                vza.CompletedTrials([_to_vizier(t, spec, int(t.trial_id)) for t in completed]), vza.ActiveTrials()
            )
    result = {
        "spec": spec.model_dump(),
        "trials": [asdict(t) for t in trials],
        "failed_trials": failed,
        "best": asdict(b) if (b := best(trials, spec)) else None,
        "seconds": round(time.time() - started, 2),
        "trial_processes": runners.started,
    }
    write_results(result, base_dir)
    if failed >= spec.max_failed_trial_count:
        raise StudyFailed(
            f"{failed} trial(s) failed: the study fails once max_failed_trial_count="
            f"{spec.max_failed_trial_count} trials have failed; "
            f"see {os.path.join(base_dir, 'trials.json')}"
        )
    if result["best"] is None:
        raise StudyFailed(f"no trial succeeded; see {os.path.join(base_dir, 'trials.json')}")
    return result


def _python_values(values: dict, spec: StudySpec) -> dict:
    kinds = {p.parameter_id: p.type for p in spec.parameters}
    return {k: int(v) if kinds[k] == "integer" else v for k, v in values.items()}


def write_results(result: dict, out_dir: str) -> None:
    """trials.json, trials.csv and trials.png (metric per trial and best so far)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "trials.json"), "w") as f:
        json.dump(result, f, indent=2)
    names = [p["parameter_id"] for p in result["spec"]["parameters"]]
    with open(os.path.join(out_dir, "trials.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial_id", *names, result["spec"]["metric_id"], "status", "seconds"])
        for t in result["trials"]:
            writer.writerow(
                [t["trial_id"], *(t["parameters"].get(n) for n in names), t["metric"], t["status"], t["seconds"]]
            )
    plot_trials(result, os.path.join(out_dir, "trials.png"))


def plot_trials(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maximize = result["spec"]["goal"] == "maximize"
    xs, ys, best_so_far, current = [], [], [], None
    for t in result["trials"]:
        if t["metric"] is None:
            continue
        xs.append(int(t["trial_id"]))
        ys.append(t["metric"])
        current = t["metric"] if current is None else (max if maximize else min)(current, t["metric"])
        best_so_far.append(current)
    metric = result["spec"]["metric_id"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, ys, "o", label=metric)
    ax.step(xs, best_so_far, where="post", label="best so far")
    ax.set_title(f"Hyperparameter study: {metric} per trial ({result['spec']['goal']})")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def tune_hyperparameters(
    dataset: Input[Dataset],
    study_spec: dict,
    enabled: bool,
    trial_epochs: int,
    batch_size: int,
    learning_rate: float,
    model_builder: str,
    tuning: Output[Artifact],
) -> dict:
    """KFP step (self-hosted): run the study (when `enabled`) and return the hyperparameters for final training:
    the pipeline's `batch_size` and `learning_rate`, overridden by the best trial's values. Trials train
    `model_builder`'s model.

    Args:
        dataset: The prepared data (shards per split, stats.json).
        study_spec: The study: `StudySpec` as a dict (parameters, metric, goal, trial counts, algorithm).
        enabled: Run the study; otherwise return the pipeline's values.
        trial_epochs: Epochs of each trial.
        batch_size: The pipeline's batch size per replica.
        learning_rate: The pipeline's learning rate.
        model_builder: The network to train: `package.module:function` (the config's trainer.model).
    """
    from core.fast_exit import skip_exit_collection

    skip_exit_collection()

    from components.lib.study.spec import (
        StudySpec,
        best_trial_message,
        pipeline_hyperparameters,
        with_best_trial,
        write_skipped_study,
    )
    from components.tune_hyperparameters import run_study
    from trainer.flags import command_line

    hyperparameters = pipeline_hyperparameters(batch_size, learning_rate)
    if not enabled:
        write_skipped_study(tuning.path)
        return hyperparameters
    result = run_study(
        StudySpec.model_validate(study_spec),
        tuning.path,
        command_line({"epochs": trial_epochs, "batch_size": batch_size}, data_dir=dataset.path, model=model_builder),
    )
    hyperparameters = with_best_trial(hyperparameters, result["best"]["parameters"])
    tuning.metadata.update(
        best_metric=result["best"]["metric"],
        best_parameters=result["best"]["parameters"],
        trials=len(result["trials"]),
        seconds=result["seconds"],
    )
    best = result["best"]
    print(best_trial_message(best["trial_id"], study_spec["metric_id"], best["metric"], hyperparameters))
    return hyperparameters
