"""A trial of the self-hosted study: its record (`Trial`), running it (`run_trial`) and the best of a study's
trials (`best`).

Each trial runs `python -m <module>` (the trainer) with the trial's flags, a distinct `CLOUD_ML_TRIAL_ID`, the
study's metric as `CLOUD_ML_HP_METRIC_TAG` (as Vertex sets it), its own `CLOUD_ML_HP_METRIC_FILE` and trial-scoped `AIP_*` directories (`<base>/<trial_id>/model|checkpoints|logs`, as
Vertex does); its metric is read from the file the real `hypertune` library wrote.
"""

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from components.lib.study.hypertune_metrics import trial_metric
from components.lib.study.runner_pool import RunnerPool, runner_env
from components.lib.study.spec import StudySpec
from trainer.environment import output_dirs
from trainer.flags import METRIC_TAG_ENV, command_line


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
    trial_env=None,
) -> Trial:
    """Run one trial to completion (in a warm runner of `runners`, else a fresh `python -m module` process), its
    values given as `flags(parameters)`; never raises for a failing trainer (the trial is marked FAILED). Its log
    and metric file go to `base_dir/ID`, its AIP_* output directories under `output_base/ID` (default `base_dir`);
    `trial_env(ID)`: more of its environment (when given)."""
    out = os.path.join(base_dir, trial.trial_id)
    os.makedirs(out, exist_ok=True)
    outputs = f"{output_base.rstrip('/')}/{trial.trial_id}" if output_base else out
    metric_file = os.path.join(out, "hypertune", "output.metrics")
    trial_vars = {
        "CLOUD_ML_TRIAL_ID": trial.trial_id,
        "CLOUD_ML_HP_METRIC_FILE": metric_file,
        METRIC_TAG_ENV: spec.metric_id,
        **output_dirs(outputs),
        **(trial_env(trial.trial_id) if trial_env else {}),
    }
    argv = [*fixed_args, *flags(trial.parameters)]
    log_path = os.path.join(out, "trial.log")
    trial.output_dir, trial.started = outputs, time.time()
    if runners is not None:
        code = runners.run(argv, trial_vars, log_path)
    else:
        with open(log_path, "w") as log:
            code = subprocess.run(
                [sys.executable, "-m", module, *argv],
                env={**runner_env(env), **trial_vars},
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
    trial.ended = time.time()
    trial.seconds = round(trial.ended - trial.started, 2)
    trial.metric = trial_metric(metric_file, spec.metric_id, spec.measurement, spec.goal)
    if code != 0 or trial.metric is None:
        trial.status = "FAILED"
        trial.error = f"exit code {code}" if code != 0 else f"no {spec.metric_id!r} reported"
        if os.path.exists(log_path):  # not when its runner died before the trial began
            with open(log_path, errors="replace") as f:
                trial.log_tail = f.read().splitlines()[-20:]
    else:
        trial.status = "SUCCEEDED"
    return trial


def best(trials: list[Trial], spec: StudySpec) -> Trial | None:
    """The succeeded trial with the best metric for the spec's goal; None when none succeeded."""
    done = [t for t in trials if t.status == "SUCCEEDED"]
    if not done:
        return None
    return (max if spec.goal == "maximize" else min)(done, key=lambda t: t.metric or 0.0)  # SUCCEEDED: has one
