"""Kubeflow tuning step: the hyperparameter study as a Katib Experiment, from the same `StudySpec` as Vertex's
tuning job and the local study; the best trial's values override the pipeline's.

- Search space: Katib's double, int (`uniform`, or `logUniform` for a log scale), categorical and discrete. Refused:
  a reverse-log scale (Katib has none), with `bayesianoptimization` a double whose range reaches 0 (it samples
  every double log-uniformly: its suggestion service would fail), and with `grid` a `max_trial_count` above the
  grid's size (its suggestion service refuses it). Warned: a log-scaled integer under `bayesianoptimization`, which
  searches integers uniformly.
- Algorithm: `default` (Vizier's GP bandit) → `bayesianoptimization`; `random` and `grid` as they are. Metric,
  goal, trial counts as the spec says (`measurement` → the metric strategy `latest`, or `max` / `min`).
- Trials: a Job of the trainer image (one process) on the shared volume, the values as trainer flags. Their
  `CLOUD_ML_HP_METRIC_FILE` is the file of Katib's File metrics collector, whose `JSON` format parses
  `cloudml-hypertune`'s reports of the study's metric (`CLOUD_ML_HP_METRIC_TAG`) as written (string values, a float `timestamp`). The template says `retain: true`:
  Katib keeps a finished trial's Job (and its pod's log) rather than deleting it, so a failed study can quote it.
- Refused trials: Pod Security refusing the trials' pods shows nowhere in the Experiment (each trial's Job stays
  without a pod, its trial running): each poll reads the `FailedCreate` events of its running trials' Jobs (named
  after the trials), and the first that quotes a refusal fails the study in one line.
- The end: once the best trial is read, the failure reported (the first failed trial's last log lines quoted) or a
  refusal found, the Experiment is deleted (foreground: its trials, Jobs and pods with it) unless `keep` says
  otherwise. The trials' folders are deleted; with `study.warm_start` the best trial's `checkpoints/best` is first
  moved to the run's `tune-hyperparameters/best-checkpoint` (`volume.kept_checkpoint`), which the final training
  starts from (`warm_start_from`) and releases.
"""

import json
import os
import shutil
from typing import Any

from kfp.dsl import Artifact, Dataset, Input, Output

from trainer.environment import CHECKPOINT_RECORD, LEGACY_KERAS, best_checkpoint, output_dirs
from trainer.flags import METRIC_TAG_ENV, TRAINER_COMMAND, TrainerSetup, command_line, flag

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1beta1", "experiments", "Experiment"
MISSING_HINT = "install Katib (v0.19) or set platform.kubeflow.tuning: pod (trials as processes in the step's pod)"
CONTAINER = "training-container"
METRICS_FILE = "/var/log/katib/tfpipe/output.metrics"  # Katib mounts a volume at its folder for the collector
ALGORITHMS = {"default": "bayesianoptimization", "random": "random", "grid": "grid"}
NO_ISTIO = {"sidecar.istio.io/inject": "false"}
JOB_NAME = "batch.kubernetes.io/job-name"  # the label the Job controller gives a Job's pods: the trial's name
TAIL_LINES = 20


class StudyFailed(RuntimeError):
    """The Katib experiment failed or found no best trial (its own message). `trial_log`: `failed_trial_log`'s
    answer (the first failed trial, its pod and whole log), None when no trial failed."""

    def __init__(self, message: str, trial_log: dict | None = None):
        super().__init__(message)
        self.trial_log = trial_log


class TrialPodsRefused(StudyFailed):
    """The API server refuses the trials' pods (Pod Security): no trial can run."""


def trial_parameter_name(parameter_id: str) -> str:
    """`learning_rate` → `learningRate` (the trial parameter names of Katib's examples)."""
    head, *rest = parameter_id.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(value)


def search_space(spec) -> list[dict]:
    """Katib's `parameters` for the study's search space."""
    out = []
    for p in spec.parameters:
        if getattr(p, "scale", "linear") == "reverse_log" and p.type in ("double", "integer"):
            raise ValueError(
                f"study parameter {p.parameter_id}: Katib has no reverse_log distribution; use linear "
                "or log, or platform.kubeflow.tuning: pod"
            )
        if p.type == "double" and ALGORITHMS[spec.algorithm] == "bayesianoptimization" and p.min <= 0:
            raise ValueError(
                f"study parameter {p.parameter_id}: Katib's bayesianoptimization (scikit-optimize) samples every "
                f"double log-uniformly, which cannot reach min={_number(p.min)}; use min > 0, a discrete "
                "parameter, algorithm random, or platform.kubeflow.tuning: pod"
            )
        if p.type == "double":
            feasible = {
                "min": _number(p.min),
                "max": _number(p.max),
                "distribution": "logUniform" if p.scale == "log" else "uniform",
            }
            out.append({"name": p.parameter_id, "parameterType": "double", "feasibleSpace": feasible})
        elif p.type == "integer":
            feasible = {
                "min": str(p.min),
                "max": str(p.max),
                "distribution": "logUniform" if p.scale == "log" else "uniform",
            }
            out.append({"name": p.parameter_id, "parameterType": "int", "feasibleSpace": feasible})
        elif p.type == "categorical":
            out.append(
                {"name": p.parameter_id, "parameterType": "categorical", "feasibleSpace": {"list": list(p.values)}}
            )
        else:
            out.append(
                {
                    "name": p.parameter_id,
                    "parameterType": "discrete",
                    "feasibleSpace": {"list": [_number(v) for v in p.values]},
                }
            )
    _check_grid(spec, out)
    return out


def grid_size(parameters: list[dict]) -> int:
    """The combinations Katib's grid enumerates over Katib `parameters` (its Optuna service): an int range counts
    every step from min to max (step 1 when unset, as here), a list its values."""
    size = 1
    for p in parameters:
        feasible = p["feasibleSpace"]
        if p["parameterType"] == "int":
            size *= len(range(int(feasible["min"]), int(feasible["max"]) + 1, int(feasible.get("step") or 1)))
        else:
            size *= len(feasible["list"])
    return size


def _check_grid(spec, parameters: list[dict]) -> None:
    """ValueError when Katib's grid would refuse the study: more trials than combinations."""
    if ALGORITHMS[spec.algorithm] != "grid" or spec.max_trial_count <= (size := grid_size(parameters)):
        return
    counts = " x ".join(
        f"{p['name']} {grid_size([p])}"
        + (
            f" (integers {p['feasibleSpace']['min']} to {p['feasibleSpace']['max']} by Katib's step 1)"
            if p["parameterType"] == "int"
            else ""
        )
        for p in parameters
    )
    raise ValueError(
        f"study: algorithm grid has {size} combinations ({counts}), fewer than max_trial_count="
        f"{spec.max_trial_count}, and Katib's grid refuses more trials than combinations; set max_trial_count "
        f"<= {size}, or platform.kubeflow.tuning: pod"
    )


def log_scale_warnings(spec) -> list[str]:
    """One warning line per log-scaled integer under `bayesianoptimization`: Katib's scikit-optimize service builds
    every int as `Integer(min, max)`, a uniform search, where Vertex honours the scale."""
    if ALGORITHMS[spec.algorithm] != "bayesianoptimization":
        return []
    return [
        f"warning: study parameter {p.parameter_id}: Katib's bayesianoptimization (scikit-optimize) searches "
        f"integers uniformly from {p.min} to {p.max}, not on the log scale the study asks (Vertex does); for a log "
        "search use algorithm random, or a discrete parameter of log-spaced values"
        for p in spec.parameters
        if p.type == "integer" and p.scale == "log"
    ]


def objective(spec) -> dict:
    strategy = "latest" if spec.measurement == "last" else ("max" if spec.goal == "maximize" else "min")
    return {
        "type": spec.goal,
        "objectiveMetricName": spec.metric_id,
        "metricStrategies": [{"name": spec.metric_id, "value": strategy}],
    }


def experiment(
    name: str,
    namespace: str,
    spec,
    image: str,
    fixed_args: list[str],
    trials_dir: str,
    resources: dict,
    claim_name: str,
    mount_path: str,
    service_account: str = "",
    labels: dict | None = None,
) -> dict:
    """The Katib Experiment (kubeflow.org/v1beta1) for `spec` (a StudySpec)."""
    from components.lib.kube import pod_security
    from components.lib.kube.api import volume_parts

    volumes, mounts = volume_parts(claim_name, mount_path)
    trial_dir = f"{trials_dir}/${{trialParameters.trialName}}"
    args = [
        *fixed_args,
        *command_line(job_dir=trial_dir),
        *(
            f"{flag(p.parameter_id)}=${{trialParameters.{trial_parameter_name(p.parameter_id)}}}"
            for p in spec.parameters
        ),
    ]
    env = {
        "CLOUD_ML_HP_METRIC_FILE": METRICS_FILE,
        METRIC_TAG_ENV: spec.metric_id,
        "CLOUD_ML_TRIAL_ID": "${trialParameters.trialName}",
        **output_dirs(trial_dir),
        **LEGACY_KERAS,
        "PYTHONUNBUFFERED": "1",
    }
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        # explicit, though it is the image's ENTRYPOINT: Katib's pod webhook wraps the command for its metrics
        # collector and, without one, reads the ENTRYPOINT from the image's registry, which a kind-loaded or
        # private image does not allow (every trial pod would then be refused)
        "command": list(TRAINER_COMMAND),
        "args": args,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "securityContext": pod_security.container_context(),
    }
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "securityContext": pod_security.pod_context(),
    }
    if volumes:
        pod["volumes"] = volumes
    if service_account:
        pod["serviceAccountName"] = service_account
    trial_parameters = [
        {
            "name": trial_parameter_name(p.parameter_id),
            "description": f"--{p.parameter_id}",
            "reference": p.parameter_id,
        }
        for p in spec.parameters
    ]
    trial_parameters.append(
        {"name": "trialName", "description": "the trial's name (its output folder)", "reference": "${trialSpec.Name}"}
    )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "objective": objective(spec),
            "algorithm": {"algorithmName": ALGORITHMS[spec.algorithm]},
            "parallelTrialCount": spec.parallel_trial_count,
            "maxTrialCount": spec.max_trial_count,
            "maxFailedTrialCount": spec.max_failed_trial_count,
            "metricsCollectorSpec": {
                "collector": {"kind": "File"},
                "source": {"fileSystemPath": {"path": METRICS_FILE, "kind": "File", "format": "JSON"}},
            },
            "parameters": search_space(spec),
            "trialTemplate": {
                "retain": True,  # Katib would delete each finished trial's Job, and the logs a failure needs
                "primaryContainerName": CONTAINER,
                "trialParameters": trial_parameters,
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "backoffLimit": 0,  # a failed trial is a result, not something to retry
                        "template": {
                            # no empty map: Katib converts the template to a typed Job and refuses what it drops
                            "metadata": {**({"labels": dict(labels)} if labels else {}), "annotations": dict(NO_ISTIO)},
                            "spec": pod,
                        },
                    },
                },
            },
        },
    }


def best_trial(obj: dict, spec) -> dict | None:
    """`{"trial": name, "parameters": {...typed...}, "metric": value}` from `status.currentOptimalTrial`, or None."""
    optimal = (obj.get("status") or {}).get("currentOptimalTrial") or {}
    if not optimal.get("bestTrialName"):
        return None
    kinds = {p.parameter_id: p.type for p in spec.parameters}
    parameters = {}
    for assignment in optimal.get("parameterAssignments") or []:
        kind, value = kinds.get(assignment["name"]), assignment["value"]
        parameters[assignment["name"]] = (
            int(float(value)) if kind == "integer" else value if kind == "categorical" else float(value)
        )
    key = "latest" if spec.measurement == "last" else ("max" if spec.goal == "maximize" else "min")
    metric = next(
        (
            m.get(key)
            for m in (optimal.get("observation") or {}).get("metrics") or []
            if m.get("name") == spec.metric_id
        ),
        None,
    )
    return {
        "trial": optimal["bestTrialName"],
        "parameters": parameters,
        "metric": float(metric) if metric not in (None, "") else None,
    }


def failed_trial_log(api, namespace: str, obj: dict, log=print, sleep=None) -> dict | None:
    """The first failed trial of the Experiment `obj` (Katib's `failedTrialList`, then `metricsUnavailableTrialList`)
    and its pod's primary-container log, read through the API: `{"trial", "pod", "log", "error"}`, `error` saying
    why the log could not be read (else empty); None when no trial failed."""

    from kubernetes import client

    from components.lib.kube import api as kube

    status = obj.get("status") or {}
    trial = next(iter([*(status.get("failedTrialList") or []), *(status.get("metricsUnavailableTrialList") or [])]), "")
    if not trial:
        return None
    core = client.CoreV1Api(api)
    found: dict = {"trial": trial, "pod": "", "log": "", "error": ""}
    try:
        pods = kube.call(
            core.list_namespaced_pod,
            namespace,
            label_selector=f"{JOB_NAME}={trial}",
            log=log,
            sleep=sleep,
        ).items
        if not pods:
            return {**found, "error": "its pod is gone"}
        found["pod"] = pods[0].metadata.name
        found["log"] = kube.call(
            core.read_namespaced_pod_log,
            found["pod"],
            namespace,
            container=CONTAINER,
            log=log,
            sleep=sleep,
        )
    except Exception as e:  # noqa: BLE001 (the experiment's message is the error; this adds to it)
        found["error"] = kube.describe(e)
    return found


def refused_trials(api, namespace: str, what: str, obj: dict, log=print, sleep=None) -> None:
    """TrialPodsRefused quoting the first Pod Security refusal in the `FailedCreate` events of the Jobs of the
    Experiment `obj`'s running trials (Katib runs a trial once it has created its Job, named after the trial)."""
    from components.lib.kube import api as kube

    trials = (obj.get("status") or {}).get("runningTrialList") or []
    if refused := kube.pod_security_refusal(api, namespace, "Job", trials, "FailedCreate", log, sleep):
        raise TrialPodsRefused(f"{what} cannot run: the API server refuses its trials' pods: {refused}")


def failure_message(what: str, failed: dict, trials_failed: int, spec, trial_log: dict | None) -> str:
    """StudyFailed's message: Katib's, then the failed trial's last log lines (or why they are missing)."""
    message = (
        f"{what} failed: {failed.get('message') or failed.get('reason')} ({trials_failed} failed trial(s); "
        f"max_failed_trial_count={spec.max_failed_trial_count})"
    )
    if trial_log is None:
        return message
    if trial_log["error"] or not trial_log["log"]:
        reason = trial_log["error"] or "it is empty"
        return f"{message}\ntrial {trial_log['trial']} failed; its log could not be read: {reason}"
    tail = "".join(trial_log["log"].splitlines(keepends=True)[-TAIL_LINES:])
    return f"{message}\ntrial {trial_log['trial']}'s last log lines (pod {trial_log['pod']}):\n{tail}"


def run_experiment(
    api,
    body: dict,
    spec,
    poll_seconds: float = 10,
    timeout_seconds: float = 24 * 3600,
    log=print,
    sleep=None,
    keep: bool = False,
) -> dict:
    """Create (or adopt) the Experiment and wait: returns `best_trial(...)` once it has succeeded; raises
    StudyFailed with Katib's message and the first failed trial's last log lines, TrialPodsRefused once Pod Security
    refuses a trial's pod, TimeoutError or kube.Cancelled.
    The Experiment is deleted (foreground) at every end; after a success or a reported failure, not when `keep`."""

    from components.lib.kube import api as kube

    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    what = f"{KIND} {namespace}/{name}"
    kube.require(api, GROUP, VERSION, PLURAL, KIND, MISSING_HINT, log, sleep)
    kube.create_or_adopt(api, GROUP, VERSION, namespace, PLURAL, body, log, sleep)
    log(
        f"created {what}: {body['spec']['algorithm']['algorithmName']}, up to {spec.max_trial_count} trials, "
        f"{spec.parallel_trial_count} at a time"
    )
    for warning in log_scale_warnings(spec):
        log(warning)
    objects = kube.custom(api)
    follow = kube.Follower(what, log)
    progress: dict[str, Any] = {}

    def read():
        return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def done(obj):
        follow(obj)
        status = obj.get("status") or {}
        counts = {k: status.get(k, 0) for k in ("trials", "trialsSucceeded", "trialsFailed", "trialsRunning")}
        best = best_trial(obj, spec)
        if counts != progress.get("counts") or best != progress.get("best"):
            progress.update(counts=counts, best=best)
            log(
                f"{what}: {counts['trials']} trial(s): {counts['trialsSucceeded']} succeeded, "
                f"{counts['trialsFailed']} failed, {counts['trialsRunning']} running"
                + (f"; best {best['trial']}: {spec.metric_id}={best['metric']} {best['parameters']}" if best else "")
            )
        if failed := kube.condition(obj, "Failed"):
            trial_log = failed_trial_log(api, namespace, obj, log, sleep)
            raise StudyFailed(failure_message(what, failed, counts["trialsFailed"], spec, trial_log), trial_log)
        if kube.condition(obj, "Succeeded"):
            if best is None:
                raise StudyFailed(f"{what} ended without a best trial: no trial reported {spec.metric_id!r}")
            return {**best, "status": status}
        refused_trials(api, namespace, what, obj, log, sleep)
        return None

    def remove():
        if kube.delete(api, GROUP, VERSION, namespace, PLURAL, name, log, sleep):
            log(f"deleted {what} (and its trials)")

    def finish():
        """After a success or a reported failure: delete the Experiment (a failed delete only warns), or keep it."""
        hint = f"kubectl delete experiment -n {namespace} {name}"
        if keep:
            log(f"kept {what} (platform.kubeflow.keep_experiment); delete it with {hint}")
            return
        try:
            remove()
        except Exception as e:  # noqa: BLE001 (the study's outcome stands)
            log(f"warning: deleting {what} failed: {kube.describe(e)}; delete it with {hint}")

    try:
        best = kube.watch(read, done, remove, poll_seconds, timeout_seconds, what, log, sleep)
    except StudyFailed:
        finish()
        raise
    finish()
    return best


def tune_with_katib(
    api,
    data_path: str,
    tuning_path: str,
    *,
    spec,
    trial_epochs: int,
    hyperparameters: dict,
    workers: int,
    trainer: TrainerSetup,
    image: str,
    namespace: str,
    service_account: str,
    claim_name: str,
    mount_path: str,
    resources: dict,
    run_id: str,
    poll_seconds: float = 10,
    timeout_seconds: float = 24 * 3600,
    keep_experiment: bool = False,
    log=print,
    sleep=None,
) -> dict:
    """Stage the data on the volume, run the experiment, record it: the best trial, its `warm_start_from` the best
    trial's kept best checkpoint with `spec.warm_start` (else ""). When the study fails, the failed trial's whole log
    is saved on the volume, next to the trials' folder, and the step's log names it."""
    from components.lib.kube import api as kube
    from components.lib.kube.volume import kept_checkpoint, stage_dataset, study_folder
    from components.lib.study.spec import trial_flags

    name = kube.object_name("tfpipe-tune", run_id, "tune-hyperparameters")
    run_dir = os.path.join(mount_path, "runs", kube.label_value(run_id) or "run")
    data_dir = stage_dataset(data_path, run_dir, mount_path)
    trials_dir = os.path.join(study_folder(run_dir), "trials")
    os.makedirs(trials_dir, exist_ok=True)
    body = experiment(
        name,
        namespace,
        spec,
        image,
        command_line(trial_flags(trial_epochs, hyperparameters, workers, spec), data_dir=data_dir, trainer=trainer),
        trials_dir,
        resources,
        claim_name,
        mount_path,
        service_account,
        kube.run_labels(run_id, "tune-hyperparameters"),
    )
    try:
        best = run_experiment(api, body, spec, poll_seconds, timeout_seconds, log, sleep, keep_experiment)
    except StudyFailed as e:
        save_trial_log(e.trial_log, os.path.dirname(trials_dir), claim_name, log)
        raise
    warm = ""
    if spec.warm_start:
        warm = keep_best_checkpoint(os.path.join(trials_dir, best["trial"]), best["trial"], kept_checkpoint(run_dir))
        log(f"kept trial {best['trial']}'s best checkpoint for the training: {warm} (on the claim {claim_name})")
    # the trials' models and checkpoints are of no further use: run after run they would fill the volume
    shutil.rmtree(trials_dir if warm else os.path.dirname(trials_dir), ignore_errors=True)
    os.makedirs(tuning_path, exist_ok=True)
    with open(os.path.join(tuning_path, "trials.json"), "w") as f:
        json.dump(
            {
                "engine": "katib",
                "experiment": f"{namespace}/{name}",
                "spec": spec.model_dump(),
                "best": {k: best[k] for k in ("trial", "parameters", "metric")},
                "warm_start_from": warm,
                "status": best["status"],
            },
            f,
            indent=2,
        )
    return {**best, "warm_start_from": warm}


def keep_best_checkpoint(trial_dir: str, trial: str, destination: str) -> str:
    """Move the trial's kept best checkpoint folder (`checkpoints/best` under `trial_dir`, whose trials' folders go
    next) to `destination` on the same claim, replacing an earlier attempt's: `destination`. StudyFailed naming the trial and the folder when that folder
    holds no complete checkpoint (its record)."""
    source = best_checkpoint(trial_dir)
    if not os.path.isfile(os.path.join(source, CHECKPOINT_RECORD)):
        raise StudyFailed(
            f"study.warm_start: the best trial {trial} kept no best checkpoint: no {CHECKPOINT_RECORD} in {source}"
        )
    shutil.rmtree(destination, ignore_errors=True)
    shutil.move(source, destination)
    return destination


def save_trial_log(trial_log: dict | None, folder: str, claim_name: str, log=print) -> None:
    """Write a failed trial's whole log to `folder/<trial>.log` and log where it is."""
    if not trial_log or not trial_log["log"]:
        return
    path = os.path.join(folder, f"{trial_log['trial']}.log")
    with open(path, "w") as f:
        f.write(trial_log["log"])
    log(f"trial {trial_log['trial']}'s whole log: {path} (on the claim {claim_name})")


def tune_on_katib(
    dataset: Input[Dataset],
    study_spec: dict,
    enabled: bool,
    trial_epochs: int,
    batch_size: int,
    learning_rate: float,
    workers: int,
    trainer: dict,
    trainer_image: str,
    namespace: str,
    service_account: str,
    claim_name: str,
    mount_path: str,
    resources: dict,
    poll_seconds: float,
    timeout_minutes: int,
    tuning: Output[Artifact],
    keep_experiment: bool = False,
) -> dict:
    """KFP step (kubeflow, tuning: katib): run the study as a Katib Experiment (when `enabled`) and return the
    hyperparameters for final training: the pipeline's `batch_size` and `learning_rate`, overridden by the best
    trial's values, and with `study_spec`'s warm_start the trainer's `warm_start_from`: the best trial's best
    checkpoint, kept on the volume for the training. Trials train `trainer`'s model.

    Args:
        dataset: The prepared data (shards per split, stats.json).
        study_spec: The study: `StudySpec` as a dict (parameters, metric, goal, trial counts, algorithm, warm start).
        enabled: Run the study; otherwise return the pipeline's values.
        trial_epochs: Epochs of each trial.
        batch_size: The pipeline's batch size per replica.
        learning_rate: The pipeline's learning rate.
        workers: The final training's workers: each trial trains at their global batch.
        trainer_image: The trainer image the trials run.
        namespace: Namespace of the created objects (empty: the run's namespace).
        service_account: Service account of their pods (empty: the namespace's default).
        claim_name: The shared PersistentVolumeClaim the pods mount (where the dataset and outputs live).
        mount_path: Where the pods mount the claim (paths under it are the same in every pod).
        resources: Kubernetes resources of every trial (requests, limits).
        poll_seconds: How often the step reads the objects' status, in seconds.
        timeout_minutes: The step fails when the Experiment has not finished by then.
        keep_experiment: Keep the Experiment (its trials, their Jobs and pods) once it has ended; else it is deleted.
        trainer: What the trainer trains: `TrainerSetup` as a dict (the config's trainer section: the model builder,
            mixed precision, fixed hyperparameter values).
    """

    from components.lib.kube import api as kube
    from components.lib.study.spec import (
        StudySpec,
        best_trial_message,
        pipeline_hyperparameters,
        with_best_trial,
        write_skipped_study,
    )
    from components.tune_on_katib import tune_with_katib
    from trainer.flags import TrainerSetup

    hyperparameters = pipeline_hyperparameters(batch_size, learning_rate)
    if not enabled:
        write_skipped_study(tuning.path)
        return hyperparameters
    best = tune_with_katib(
        kube.api_client(),
        dataset.path,
        tuning.path,
        spec=StudySpec.model_validate(study_spec),
        trial_epochs=trial_epochs,
        hyperparameters=hyperparameters,
        workers=workers,
        trainer=TrainerSetup.from_dict(trainer),
        image=trainer_image,
        namespace=namespace or kube.own_namespace(),
        service_account=service_account,
        claim_name=claim_name,
        mount_path=mount_path,
        resources=resources,
        run_id=kube.run_id(),
        poll_seconds=poll_seconds,
        timeout_seconds=timeout_minutes * 60,
        keep_experiment=keep_experiment,
        log=kube.log_to_stdout,
    )
    hyperparameters = with_best_trial(hyperparameters, best["parameters"], best["warm_start_from"])
    tuning.metadata.update(best_metric=best["metric"], best_parameters=best["parameters"], best_trial=best["trial"])
    print(best_trial_message(best["trial"], study_spec["metric_id"], best["metric"], hyperparameters))
    return hyperparameters
