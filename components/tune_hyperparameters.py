"""Self-hosted hyperparameter study (local and kubeflow targets), the counterpart of Vertex AI's tuning job.

`run_study` runs at most `parallel_trial_count` trials at once (`components.lib.study.trials`: the trainer with the
trial's flags, environment and directories, as Vertex does), their values suggested by OSS Vizier's designers
(`components.lib.study.suggestions`: GP bandit, grid or random search). The trials run in as many warm runner
processes (`components.lib.study.runner_pool`), which import TensorFlow while Vizier loads and suggests, then run
trials one after another (a runner whose trial fails is replaced).

While it runs, the study writes progress lines (`components.lib.study.progress`): trial k of N started and finished,
the best so far, and each running trial's epoch; at the end, the results files (`components.lib.study.results`).
"""

import os
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict

from kfp.dsl import Artifact, Dataset, Input, Output

from components.lib.study.progress import StudyProgress
from components.lib.study.results import write_results
from components.lib.study.runner_pool import RunnerPool, runner_env
from components.lib.study.spec import StudySpec
from components.lib.study.suggestions import make_designer, python_values, to_vizier
from components.lib.study.trials import Trial, best, run_trial
from core import progress
from trainer.flags import TRAINER_MODULE, command_line


class StudyFailed(RuntimeError):
    """Too many trials failed (user-facing message)."""


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
    trial_env=None,
    on_start=None,
) -> dict:
    """Run the study; returns `{"trials": [...], "best": {...}, "seconds": ...}` and writes the results files. Each
    trial runs `module` with `fixed_args` and `flags(its values)`, its outputs under `output_base` (a local folder
    or gs:// prefix; default `base_dir`), `trial_env(trial id)` added to its environment (when given). `log` writes a line: the trials' news and the progress lines
    (`StudyProgress`; default stdout, flushed). `on_start(pid)` after each trial runner starts (RunnerPool): an
    error it raises ends the study, no trial started after it, those running waited for.
    Raises StudyFailed (after writing them) once `max_failed_trial_count` trials have failed (Vertex's definition:
    no trial starts after that; those running finish)."""
    started = time.time()
    # the runners import TensorFlow while Vizier loads (seconds of its own) and makes the first suggestions
    runners = RunnerPool(
        min(spec.parallel_trial_count, spec.max_trial_count),
        module,
        runner_env(env),
        os.path.join(base_dir, "runners"),
        on_start=on_start,
    )
    try:
        return _study(
            spec, base_dir, fixed_args, module, env, seed, log, runners, started, flags, output_base, trial_env
        )
    finally:
        runners.close()


def _study(spec, base_dir, fixed_args, module, env, seed, log, runners, started, flags, output_base, trial_env) -> dict:
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
                    parameters = python_values(suggestion.parameters.as_dict(), spec)
                    trial = Trial(str(len(trials) + 1), parameters)
                    trials.append(trial)
                    log(f"[study] trial {trial.trial_id} started: {parameters}")
                    study.started(trial)
                    running[
                        pool.submit(
                            run_trial,
                            trial,
                            spec,
                            base_dir,
                            module,
                            fixed_args,
                            env or {},
                            runners,
                            flags,
                            output_base,
                            trial_env,
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
                vza.CompletedTrials([to_vizier(t, spec, int(t.trial_id)) for t in completed]), vza.ActiveTrials()
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


def tune_hyperparameters(
    dataset: Input[Dataset],
    study_spec: dict,
    enabled: bool,
    trial_epochs: int,
    batch_size: int,
    learning_rate: float,
    workers: int,
    trainer: dict,
    tuning: Output[Artifact],
) -> dict:
    """KFP step (self-hosted): run the study (when `enabled`) and return the hyperparameters for final training:
    the pipeline's `batch_size` and `learning_rate`, overridden by the best trial's values. Trials train
    `trainer`'s model.

    Args:
        dataset: The prepared data (shards per split, stats.json).
        study_spec: The study: `StudySpec` as a dict (parameters, metric, goal, trial counts, algorithm).
        enabled: Run the study; otherwise return the pipeline's values.
        trial_epochs: Epochs of each trial.
        batch_size: The pipeline's batch size per replica.
        learning_rate: The pipeline's learning rate.
        workers: The final training's workers: each trial trains at their global batch.
        trainer: What the trainer trains: `TrainerSetup` as a dict (the config's trainer section: the model builder,
            mixed precision, fixed hyperparameter values).
    """
    from core.fast_exit import skip_exit_collection

    skip_exit_collection()

    from components.lib.study.spec import (
        StudySpec,
        best_trial_message,
        pipeline_hyperparameters,
        trial_flags,
        with_best_trial,
        write_skipped_study,
    )
    from components.tune_hyperparameters import run_study
    from trainer.environment import best_checkpoint
    from trainer.flags import TrainerSetup, command_line

    hyperparameters = pipeline_hyperparameters(batch_size, learning_rate)
    if not enabled:
        write_skipped_study(tuning.path)
        return hyperparameters
    spec = StudySpec.model_validate(study_spec)
    result = run_study(
        spec,
        tuning.path,
        command_line(
            trial_flags(trial_epochs, hyperparameters, workers, spec),
            data_dir=dataset.path,
            trainer=TrainerSetup.from_dict(trainer),
        ),
    )
    best = result["best"]
    warm = best_checkpoint(best["output_dir"]) if result["spec"]["warm_start"] else ""
    hyperparameters = with_best_trial(hyperparameters, best["parameters"], warm_start_from=warm)
    tuning.metadata.update(
        best_metric=result["best"]["metric"],
        best_parameters=result["best"]["parameters"],
        trials=len(result["trials"]),
        seconds=result["seconds"],
    )
    print(best_trial_message(best["trial_id"], study_spec["metric_id"], best["metric"], hyperparameters))
    return hyperparameters
