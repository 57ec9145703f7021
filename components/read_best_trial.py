"""The best trial of a finished Vertex AI hyperparameter tuning job (GCPC 2.x ships no such helper).

`read_best_trial` takes the `gcp_resources` output of the tuning job step (GCPC's launcher: hyperparameter_tuning_job),
fetches the job with the Vertex AI API and picks the best succeeded, feasible trial by the study metric's goal.
"""

import json
from typing import NamedTuple


class NoFeasibleTrial(RuntimeError):
    """No trial succeeded with a value for the metric."""


def best_trial(trials, metric_id: str, goal: str) -> dict:
    """Best of `trials` (aiplatform_v1 `Trial` messages): SUCCEEDED, no infeasible reason, with a final
    `metric_id` value (Vertex marks failed trials INFEASIBLE)."""
    from google.cloud.aiplatform_v1.types import study

    if goal not in ("maximize", "minimize"):
        raise ValueError(f"unknown metric goal {goal!r}; use maximize or minimize")
    scored = []
    for trial in trials:
        if trial.state != study.Trial.State.SUCCEEDED or trial.infeasible_reason:
            continue
        values = [m.value for m in trial.final_measurement.metrics if m.metric_id == metric_id]
        if values:
            scored.append((values[0], trial))
    if not scored:
        raise NoFeasibleTrial(f"no succeeded, feasible trial reported {metric_id!r} (of {len(trials)} trials)")
    value, trial = (max if goal == "maximize" else min)(scored, key=lambda item: item[0])
    return {"trial_id": trial.id, "metric": value, "parameters": {p.parameter_id: p.value for p in trial.parameters}}


def tuning_job_name(gcp_resources: str) -> str:
    """`projects/.../locations/.../hyperparameterTuningJobs/ID` from a GCPC `gcp_resources` JSON."""
    uri = json.loads(gcp_resources)["resources"][0]["resourceUri"]
    name = uri.split("/v1/", 1)[-1]
    if "/hyperparameterTuningJobs/" not in name:
        raise ValueError(f"not a hyperparameter tuning job resource: {uri}")
    return name


def fetch_best_trial(gcp_resources: str, metric_id: str, goal: str) -> dict:
    from google.cloud import aiplatform_v1

    from core.retries import policy

    name = tuning_job_name(gcp_resources)
    location = name.split("/")[3]
    client = aiplatform_v1.JobServiceClient(client_options={"api_endpoint": f"{location}-aiplatform.googleapis.com"})
    job = client.get_hyperparameter_tuning_job(name=name, retry=policy())
    return {**best_trial(job.trials, metric_id, goal), "job": name, "trials": len(job.trials)}


def read_best_trial(
    gcp_resources: str, metric_id: str, goal: str, root: str, directory: str, warm_start: bool = False
) -> NamedTuple(
    "Outputs",
    [("best_parameters", dict), ("best_metric", float), ("best_trial_id", str), ("warm_start_from", str)],
):
    """KFP step (Vertex): the best trial's parameter values and metric, for the final training step; records the
    tuning job's folder as completed under its plan's `root` (later runs reuse it with the cached job).

    Args:
        gcp_resources: The tuning job's resource record (GCPC's `gcp_resources`).
        metric_id: The metric the study optimizes.
        goal: maximize or minimize.
        root: The plan's base output directory.
        directory: The tuning job's base output directory.
        warm_start: Also return the best trial's kept best checkpoint folder (`warm_start_from`; else "").
    """
    from collections import namedtuple

    from components.lib.vertex.output_dirs import record
    from components.read_best_trial import fetch_best_trial
    from trainer.environment import best_checkpoint

    best = fetch_best_trial(gcp_resources, metric_id, goal)
    record(root, directory, gcp_resources)
    print(f"best trial {best['trial_id']} of {best['trials']}: {metric_id}={best['metric']} {best['parameters']}")
    # a trial writes under the job's base output directory + its id (Vertex's AIP_* variables of a trial)
    warm = best_checkpoint(f"{directory.rstrip('/')}/{best['trial_id']}") if warm_start else ""
    Outputs = namedtuple("Outputs", ["best_parameters", "best_metric", "best_trial_id", "warm_start_from"])
    return Outputs(best["parameters"], best["metric"], best["trial_id"], warm)
