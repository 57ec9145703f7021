"""What the double's jobs and deployed models do, with the project's local equivalents of Vertex AI's engines, each
given what Vertex gives its own:

- a custom job: the local multi-worker launcher, every replica with CLUSTER_SPEC and TF_CONFIG
  (`vertex_cluster_env`: pool 0 the chief, pool 1 the workers; a single replica too), restarted as the job's
  `scheduling` says (`restarts`, below);
- a hyperparameter tuning job: the local study over the job's study spec, each trial the trial pool's command with
  its values appended as Vertex appends them (`vertex_trial_flags`) and a CLUSTER_SPEC / TF_CONFIG whose task names
  the trial (`"trial": "<trial id>"`);
- a batch prediction job: the model's serving container, sent `batch_size` instances a request (batch.py);
- a deployed model: the serving container on a copy of the model's artifacts, deployed once its health route
  answers (`start_container`).
Each takes the request as a dict (proto field names) and raises `JobError` with the message Vertex would give. Every
location is a gs:// URI on the rehearsal's Cloud Storage (gcs.py).

Restarts, as Vertex AI documents them ("Understand the training service"): a replica that exits non-zero is
restarted at once in place (same address), at most 5 times a replica; when it fails again the whole job is retried,
at most 3 times, then fails. An error Vertex treats as permanent ends the job at once: here a replica exiting on its
own with an error status (a Python exception fails the same way again); a replica killed by a signal (preempted,
OOM-killed) is restarted. `scheduling.restart_job_on_worker_restart` restarts every replica with the one restarted;
`scheduling.disable_retries` (which overrides it) restarts nothing: the first failure fails the job;
`scheduling.timeout` (default 7 days) bounds the job's running time. A failed job's message is Vertex's: "The
replica workerpool0-0 exited with a non-zero status of 137. ..." (a signal N reported as 128 + N, as a container's
status). `Preemption` preempts one replica once, as a Spot VM's preemption does (SIGTERM, then SIGKILL after the
grace period).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from trainer import flags
from trainer.environment import output_dirs

TRAINER_COMMAND = list(flags.TRAINER_COMMAND)  # the trainer image's entry point
HEALTH_TIMEOUT = 300  # seconds a deployed container has to answer its health route
REPLICA_RESTARTS = 5  # in-place restarts of a replica exiting non-zero
JOB_RETRIES = 3  # retries of the whole job after a replica failed beyond its restarts
DEFAULT_TIMEOUT = 7 * 24 * 3600  # scheduling.timeout's default


class JobError(RuntimeError):
    """The job failed (its `error.message`)."""


def _pools(job_spec: dict) -> list[dict]:
    pools = job_spec.get("worker_pool_specs") or []
    if not pools or not any(p.get("replica_count") for p in pools):
        raise JobError("worker_pool_specs: at least one worker pool with replica_count > 0 is required")
    for index, pool in enumerate(pools):
        if not pool.get("machine_spec", {}).get("machine_type"):
            raise JobError(f"worker_pool_specs[{index}].machine_spec.machine_type is required")
        if not pool.get("container_spec", {}).get("image_uri"):
            raise JobError(f"worker_pool_specs[{index}].container_spec.image_uri is required")
    if int(pools[0].get("replica_count", 0)) != 1:
        raise JobError(
            f"worker_pool_specs[0] (the chief) must have replica_count 1, got {pools[0].get('replica_count')}"
        )
    if len(pools) > 2 and any(p.get("replica_count") for p in pools[2:]):
        raise JobError(
            "parameter servers and evaluators (worker pools 2 and 3) are not rehearsed: "
            "MultiWorkerMirroredStrategy uses pools 0 and 1"
        )
    return pools[:2]


def _trainer_args(pool: dict) -> list[str]:
    container = pool["container_spec"]
    command = container.get("command") or TRAINER_COMMAND  # no command: the image's ENTRYPOINT
    if command != TRAINER_COMMAND:
        raise JobError(f"container command {command}: a rehearsal runs the trainer image's {' '.join(TRAINER_COMMAND)}")
    return list(container.get("args", []))


def _container_env(pool: dict) -> dict:
    return {e["name"]: e.get("value", "") for e in pool["container_spec"].get("env", [])}


def aip_dirs(base: str) -> dict:
    """As Vertex AI sets them: with a trailing slash."""
    return {name: f"{value}/" for name, value in output_dirs(base.rstrip("/")).items()}


def vertex_cluster_env(ports: list[int], index: int, trial: str = "") -> dict:
    """Replica `index` of a job with pools 0 (one chief) and 1 (the rest), `ports` one a replica: CLUSTER_SPEC and
    TF_CONFIG as Vertex AI sets them on every replica (a single one too); `trial`: the tuning trial the replica
    runs, named in both tasks."""
    addresses = [f"localhost:{p}" for p in ports]
    pool, pool_index = ("workerpool0", 0) if index == 0 else ("workerpool1", index - 1)
    task: dict = {"type": pool, "index": pool_index, **({"trial": trial} if trial else {})}
    cluster_spec = {
        "cluster": {"workerpool0": addresses[:1], **({"workerpool1": addresses[1:]} if addresses[1:] else {})},
        "environment": "cloud",
        "task": task,
    }
    tf_config = {
        "cluster": {"chief": addresses[:1], **({"worker": addresses[1:]} if addresses[1:] else {})},
        "environment": "cloud",
        "task": {**task, "type": "chief" if index == 0 else "worker"},
    }
    return {"CLUSTER_SPEC": json.dumps(cluster_spec), "TF_CONFIG": json.dumps(tf_config)}


def replica_name(index: int) -> str:
    """Vertex's name of replica `index` (pool 0 the chief, pool 1 the rest): workerpool0-0, workerpool1-0, ..."""
    return "workerpool0-0" if index == 0 else f"workerpool1-{index - 1}"


def _seconds(duration: str | None, default: float) -> float:
    """A google.protobuf.Duration in its JSON form ("3600s")."""
    return float(duration.rstrip("s")) if duration else default


def restarts(spec: dict) -> dict:
    """The launcher's restart settings (`launch` keywords) for a job spec's `scheduling`."""
    from components.train_model import InPlaceRestarts

    scheduling = spec.get("scheduling", {})
    timeout = _seconds(scheduling.get("timeout"), DEFAULT_TIMEOUT)
    if scheduling.get("disable_retries"):
        return {"max_restarts": 0, "in_place": None, "timeout": timeout}
    return {
        "max_restarts": JOB_RETRIES,
        "in_place": InPlaceRestarts(REPLICA_RESTARTS, bool(scheduling.get("restart_job_on_worker_restart"))),
        "timeout": timeout,
    }


def exit_status(code: int) -> int:
    """A process's exit status as a container reports it: 128 + N when killed by signal N."""
    return 128 - code if code < 0 else code


class Preemption:
    """Preempt replica `replica` once, when its output first shows `when` (default: its second epoch begins, the
    first epoch's checkpoint written): SIGTERM, then SIGKILL after `grace` seconds, as a Spot VM is preempted."""

    def __init__(self, replica: int, when: str = "Epoch 2/", grace: float = 30.0):
        self.replica, self.when, self.grace = replica, when, grace
        self.pid: int | None = None
        self.done = False
        self.lock = threading.Lock()

    def started(self, pids: list[int]) -> None:
        if self.replica >= len(pids):
            raise JobError(f"--preempt-replica {self.replica}: the job has {len(pids)} replica(s)")
        self.pid = pids[self.replica]

    def sink(self, sink):
        """`sink`, watching replica `replica`'s lines for `when`."""
        from components.train_model import task_name

        prefix, preemption = f"[{task_name(self.replica)}] ", self

        class Watch:
            def write(self, text: str) -> None:
                sink.write(text)
                if not preemption.done and text.startswith(prefix) and preemption.when in text:
                    preemption.preempt(sink)

            def flush(self) -> None:
                sink.flush()

        return Watch()

    def preempt(self, sink) -> None:
        with self.lock:
            if self.done or self.pid is None:
                return
            self.done, pid = True, self.pid
        sink.write(f"[vertex] preempting {replica_name(self.replica)} (Spot VM preemption: SIGTERM, then SIGKILL)\n")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return

        def kill() -> None:
            deadline = time.time() + self.grace
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.1)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        threading.Thread(target=kill, daemon=True).start()


def _base_output(spec: dict, field: str) -> str:
    """A job's base output directory (a gs:// URI: rules.locations)."""
    base = spec.get("base_output_directory", {}).get("output_uri_prefix", "")
    if not base:
        raise JobError(f"{field}.base_output_directory.output_uri_prefix is required (AIP_MODEL_DIR derives from it)")
    return base


def validate(kind: str, job: dict) -> None:
    """What Vertex AI checks when a job is created (raises JobError with its message)."""
    if kind == "custom_job":
        spec = job.get("job_spec", {})
        _base_output(spec, "job_spec")
        [_trainer_args(p) for p in _pools(spec) if p.get("replica_count")]
    elif kind == "hyperparameter_tuning_job":
        study_spec(job)
        _base_output(job.get("trial_job_spec", {}), "trial_job_spec")
        _pools(job.get("trial_job_spec", {}))
    else:
        if not job.get("model"):
            raise JobError("batch_prediction_job.model is required")
        batch_io(job)


# what Vertex AI takes of a model in its own serving container (Model.supported_input_storage_formats and
# supported_output_storage_formats): every input format; predictions as JSON Lines or BigQuery rows
SUPPORTED_INPUT_FORMATS = ("jsonl", "csv", "tf-record", "tf-record-gzip", "file-list", "bigquery")
SUPPORTED_OUTPUT_FORMATS = ("jsonl", "bigquery")


def batch_io(job: dict) -> None:
    """A batch job's input and output as BatchPredictionJob's InputConfig and OutputConfig take them: a format the
    model supports, read from `bigquery_source.input_uri` (instances_format bigquery) or `gcs_source.uris` (the
    others), written to `bigquery_destination.output_uri` (predictions_format bigquery) or
    `gcs_destination.output_uri_prefix` (jsonl). Raises JobError naming the field."""
    source, output = job.get("input_config", {}), job.get("output_config", {})
    given, written = source.get("instances_format", ""), output.get("predictions_format", "")
    if given not in SUPPORTED_INPUT_FORMATS:
        raise JobError(
            f"batch_prediction_job.input_config.instances_format {given!r} is not one of the model's "
            f"supported_input_storage_formats ({', '.join(SUPPORTED_INPUT_FORMATS)})"
        )
    if written not in SUPPORTED_OUTPUT_FORMATS:
        raise JobError(
            f"batch_prediction_job.output_config.predictions_format {written!r} is not one of the model's "
            f"supported_output_storage_formats ({', '.join(SUPPORTED_OUTPUT_FORMATS)})"
        )
    if given == "bigquery" and not source.get("bigquery_source", {}).get("input_uri"):
        raise JobError(
            "batch_prediction_job.input_config.bigquery_source.input_uri is required with instances_format bigquery"
        )
    if given != "bigquery" and not source.get("gcs_source", {}).get("uris"):
        raise JobError(f"batch_prediction_job.input_config.gcs_source.uris is required with instances_format {given}")
    if written == "bigquery" and not output.get("bigquery_destination", {}).get("output_uri"):
        raise JobError(
            "batch_prediction_job.output_config.bigquery_destination.output_uri is required with predictions_format "
            "bigquery"
        )
    if written != "bigquery" and not output.get("gcs_destination", {}).get("output_uri_prefix"):
        raise JobError(
            f"batch_prediction_job.output_config.gcs_destination.output_uri_prefix is required with predictions_format "
            f"{written}"
        )


def run_custom_job(job: dict, log_dir: str, on_start, sink, preemption: Preemption | None = None) -> None:
    """Run a custom job's replicas to completion as its `scheduling` says (module docstring); `on_start(attempt,
    pids)` after the replicas (re)start; `preemption`: preempt one replica once. Raises JobError with Vertex's
    message when the job fails."""
    from components.train_model import TrainingError, launch

    spec = job.get("job_spec", {})
    pools = _pools(spec)
    base = _base_output(spec, "job_spec")
    args = [_trainer_args(p) for p in pools if p.get("replica_count")]
    if any(a != args[0] for a in args):
        raise JobError("worker pools 0 and 1 run different arguments; MultiWorkerMirroredStrategy needs the same")
    workers = sum(int(p.get("replica_count", 0)) for p in pools)
    settings = restarts(spec)

    def started(attempt: int, pids: list[int]) -> None:
        if preemption:
            preemption.started(pids)
        on_start(attempt, pids)

    try:
        launch(
            workers,
            args[0],
            log_dir,
            env={**_container_env(pools[0]), **aip_dirs(base)},
            sink=preemption.sink(sink) if preemption else sink,
            on_start=started,
            cluster_env=vertex_cluster_env,
            **settings,
        )
    except TrainingError as e:
        if e.task is None or e.status is None:  # the job's time ran out
            raise JobError(f"The job ran longer than its scheduling.timeout of {settings['timeout']:g}s.") from None
        raise JobError(
            f"The replica {replica_name(e.task)} exited with a non-zero status of {exit_status(e.status)}. To find "
            f"out more about why your job exited please check the logs: {e.log}"
        ) from None


_ALGORITHMS = {"GRID_SEARCH": "grid", "RANDOM_SEARCH": "random"}


def study_spec(job: dict):
    """This project's StudySpec for a HyperparameterTuningJob request."""
    from pydantic import ValidationError

    from components.lib.study.spec import StudySpec

    study = job.get("study_spec", {})
    metrics = study.get("metrics", [])
    if len(metrics) != 1:
        raise JobError(f"study_spec.metrics: exactly one metric is rehearsed, got {len(metrics)}")
    parameters = []
    for p in study.get("parameters", []):
        scale = {"UNIT_LOG_SCALE": "log", "UNIT_REVERSE_LOG_SCALE": "reverse_log"}.get(p.get("scale_type"), "linear")
        if "double_value_spec" in p or "integer_value_spec" in p:
            kind = "double" if "double_value_spec" in p else "integer"
            bounds = p[f"{kind}_value_spec"]
            parameters.append(
                {
                    "type": kind,
                    "parameter_id": p["parameter_id"],
                    "scale": scale,
                    "min": float(bounds.get("min_value", 0)),
                    "max": float(bounds.get("max_value", 0)),
                }
            )
        elif "categorical_value_spec" in p:
            parameters.append(
                {
                    "type": "categorical",
                    "parameter_id": p["parameter_id"],
                    "values": p["categorical_value_spec"].get("values", []),
                }
            )
        elif "discrete_value_spec" in p:
            parameters.append(
                {
                    "type": "discrete",
                    "parameter_id": p["parameter_id"],
                    "scale": scale,
                    "values": p["discrete_value_spec"].get("values", []),
                }
            )
        else:
            raise JobError(f"study_spec.parameters: {p.get('parameter_id')!r} has no value spec")
    max_trials = int(job.get("max_trial_count", 0))
    try:
        return StudySpec(
            metric_id=metrics[0]["metric_id"],
            goal=metrics[0].get("goal", "MAXIMIZE").lower(),
            parameters=parameters,
            max_trial_count=max_trials,
            parallel_trial_count=int(job.get("parallel_trial_count", 0)),
            # 0: Vertex decides; the rehearsal lets every trial fail before the job does
            max_failed_trial_count=int(job.get("max_failed_trial_count", 0)) or max_trials,
            algorithm=_ALGORITHMS.get(study.get("algorithm", ""), "default"),
            measurement="best" if study.get("measurement_selection_type") == "BEST_MEASUREMENT" else "last",
        )
    except ValidationError as e:
        raise JobError(f"invalid study: {e.errors()[0]['msg']}") from None


def vertex_trial_flags(parameters: dict) -> list[str]:
    """A trial's values as Vertex AI's tuning service appends them to the trial pool's arguments:
    `--PARAMETER_ID=VALUE`, the parameter id as it is and every number a double (an integer or discrete value too)."""

    def text(value):
        return repr(float(value)) if isinstance(value, int | float) and not isinstance(value, bool) else str(value)

    return [f"--{name}={text(value)}" for name, value in parameters.items()]


def run_tuning_job(job: dict, work_dir: str, sink, on_start=None) -> list[dict]:
    """Run the study (its own records, the trials' logs and metric files, in `work_dir`; the trials' outputs under
    the job's base output directory); return the job's `trials` (Vertex's Trial fields). `on_start(pid)` after each
    trial runner starts; an error it raises (a cancelled job) ends the study with it (run_study)."""
    from components.tune_hyperparameters import StudyFailed, run_study

    spec = study_spec(job)
    trial = job.get("trial_job_spec", {})
    pools = _pools(trial)
    if sum(int(p.get("replica_count", 0)) for p in pools) != 1:
        raise JobError("the rehearsal runs single-replica trials (worker pool 0, replica_count 1)")
    base = _base_output(trial, "trial_job_spec")
    try:
        result = run_study(
            spec,
            work_dir,
            _trainer_args(pools[0]),
            env=_container_env(pools[0]),
            log=lambda line: sink.write(line + "\n"),
            flags=vertex_trial_flags,
            output_base=base,
            trial_env=lambda trial_id: vertex_cluster_env([free_port()], 0, trial=trial_id),
            on_start=on_start,
        )
    except StudyFailed as e:
        raise JobError(str(e)) from None
    trials = []
    for t in result["trials"]:
        done = t["status"] == "SUCCEEDED"
        trials.append(
            {
                "id": t["trial_id"],
                "state": "SUCCEEDED" if done else "INFEASIBLE",
                "parameters": [{"parameter_id": k, "value": v} for k, v in t["parameters"].items()],
                **(
                    {"final_measurement": {"metrics": [{"metric_id": spec.metric_id, "value": t["metric"]}]}}
                    if done
                    else {"infeasible_reason": t.get("error") or "failed"}
                ),
            }
        )
    return trials


def check_runnable_batch(job: dict) -> None:
    """JobError for a batch job the rehearsal cannot run: one that reads or writes BigQuery (it has none)."""
    if "bigquery" in (
        job.get("input_config", {}).get("instances_format"),
        job.get("output_config", {}).get("predictions_format"),
    ):
        raise JobError(
            "the rehearsal has no BigQuery: a batch job that reads or writes BigQuery is checked and recorded, not run"
        )


def run_batch_job(job: dict, predict_url: str, display_name: str) -> dict:
    """Send the job's instances, converted as Vertex converts them (batch_input.py), to the model's container at
    `predict_url` (batch.py); return `output_info` and `completion_stats`."""
    from components.lib.batch.instances import expand_inputs
    from components.lib.batch.outputs import vertex_output_directory
    from pipelines.rehearsal.batch import predict_files
    from pipelines.rehearsal.batch_input import vertex_instance_config

    source = job.get("input_config", {})
    instances_format = source.get("instances_format", "jsonl")
    try:
        config = vertex_instance_config(instances_format, job.get("instance_config", {}))
        files = expand_inputs(",".join(source.get("gcs_source", {}).get("uris", [])))
    except (ValueError, FileNotFoundError) as e:
        raise JobError(f"batch prediction failed: {e}") from None
    output = vertex_output_directory(job["output_config"]["gcs_destination"]["output_uri_prefix"], display_name)
    batch_size = int(job.get("manual_batch_tuning_parameters", {}).get("batch_size") or 64)
    try:
        succeeded, failed = predict_files(
            predict_url, files, instances_format, config, batch_size, job.get("model_parameters") or {}, output
        )
    except ValueError as e:  # an input file that gives no instances (a CSV header lacking a named column)
        raise JobError(f"batch prediction failed: {e}") from None
    return {
        "output_info": {"gcs_output_directory": output},
        "completion_stats": {"successful_count": str(succeeded), "failed_count": str(failed)},
    }


def free_port() -> int:
    from components.train_model import free_ports

    return free_ports(1)[0]


def start_container(artifact_uri: str, endpoint_id: str, deployed_model_id: str, log_path: str):
    """The serving container for a deployed model, with the environment Vertex AI gives it; returns (process, the
    predict route's URL) once its health route answers 200."""
    port = free_port()
    from serving.vertex_container import vertex_routes

    health, predict = vertex_routes(endpoint_id, deployed_model_id)
    env = {
        **os.environ,
        "AIP_STORAGE_URI": artifact_uri,
        "AIP_HTTP_PORT": str(port),
        "AIP_ENDPOINT_ID": endpoint_id,
        "AIP_DEPLOYED_MODEL_ID": deployed_model_id,
        "AIP_HEALTH_ROUTE": health,
        "AIP_PREDICT_ROUTE": predict,
    }
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.vertex_container"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + HEALTH_TIMEOUT
    while time.time() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}{health}", timeout=2) as response:
                if response.status == 200:
                    return process, f"{url}{predict}"
        except OSError:
            pass
        time.sleep(0.5)
    stop_container(process)
    with open(log_path) as f:
        tail = " | ".join(f.read().strip().splitlines()[-3:])
    raise JobError(f"the model server never became healthy (container exit code {process.returncode}): {tail}")


def stop_container(process) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
