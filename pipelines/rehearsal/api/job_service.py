"""The JobService's custom, hyperparameter tuning and batch prediction jobs over gRPC (their cancels over REST too:
app.py): created after Vertex's checks (Context.check, jobs.validate), each run in a thread of its own by the engines
of jobs.py, PENDING → RUNNING → SUCCEEDED / FAILED (with the error message) / CANCELLED. A cancelled job's processes
(replicas, trial runners, its batch container) get SIGTERM, and a replica or trial runner started after the cancel
stops at once (`_started`): neither is restarted. A batch prediction job runs its model's serving container on
Vertex's copy of the artifacts for the job's duration. A custom job's replica N is preempted once when asked
(`preempt`): the job restarts it as Vertex does (jobs.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
from google.cloud.aiplatform_v1.types import (
    batch_prediction_job,
    custom_job,
    hyperparameter_tuning_job,
    job_service as job_service_pb,
)
from google.protobuf import empty_pb2

from pipelines.rehearsal import gcs, jobs
from pipelines.rehearsal.api import messages
from pipelines.rehearsal.api.context import Context
from pipelines.rehearsal.registry import ApiError

JOB_KINDS = {  # request field → (message class, collection)
    "custom_job": (custom_job.CustomJob, "customJobs"),
    "hyperparameter_tuning_job": (hyperparameter_tuning_job.HyperparameterTuningJob, "hyperparameterTuningJobs"),
    "batch_prediction_job": (batch_prediction_job.BatchPredictionJob, "batchPredictionJobs"),
}
_TIMES = ("create_time", "start_time", "end_time")


def _message(job: dict):
    message = JOB_KINDS[job["kind"]][0](**{k: v for k, v in job["data"].items() if k not in _TIMES})
    for field in _TIMES:
        if field in job["data"]:
            setattr(message, field, messages.timestamp(job["data"][field]))
    return message


def _signal(job: dict, number: int) -> None:
    """Send signal `number` to the job's processes still running (psutil: never to a pid reused since)."""
    for process in list(job["processes"]):
        try:
            process.send_signal(number)
        except psutil.NoSuchProcess:
            pass


def _cancel(job: dict) -> None:
    job["cancelled"] = True
    _signal(job, signal.SIGTERM)


class JobService:
    # gRPC method → (the permission it needs, the request field naming the resource it is checked on)
    PERMISSIONS = {
        f"{verb}{kind}": (f"aiplatform.{collection}.{verb.lower()}", "parent" if verb == "Create" else "name")
        for kind, collection in (
            ("CustomJob", "customJobs"),
            ("HyperparameterTuningJob", "hyperparameterTuningJobs"),
            ("BatchPredictionJob", "batchPredictionJobs"),
        )
        for verb in ("Create", "Get", "Cancel")
    }

    def __init__(self, context: Context, preempt: int | None = None):
        """`preempt`: the replica every custom job preempts once (jobs.Preemption; None: none)."""
        self.context, self.registry, self.preempt = context, context.registry, preempt
        # name → {"kind": a JOB_KINDS key, "name", "data": the job's fields, "processes": its psutil.Processes,
        # "cancelled", "thread": the one running it}
        self.jobs: dict[str, dict] = {}

    def rpcs(self) -> dict:
        """The service's gRPC methods: name → (request class, response class, handler)."""
        return {
            "CreateCustomJob": (
                job_service_pb.CreateCustomJobRequest,
                custom_job.CustomJob,
                lambda r: self.create_job("custom_job", r),
            ),
            "GetCustomJob": (job_service_pb.GetCustomJobRequest, custom_job.CustomJob, self.get_job),
            "CancelCustomJob": (job_service_pb.CancelCustomJobRequest, empty_pb2.Empty, self.cancel_job),
            "CreateHyperparameterTuningJob": (
                job_service_pb.CreateHyperparameterTuningJobRequest,
                hyperparameter_tuning_job.HyperparameterTuningJob,
                lambda r: self.create_job("hyperparameter_tuning_job", r),
            ),
            "GetHyperparameterTuningJob": (
                job_service_pb.GetHyperparameterTuningJobRequest,
                hyperparameter_tuning_job.HyperparameterTuningJob,
                self.get_job,
            ),
            "CancelHyperparameterTuningJob": (
                job_service_pb.CancelHyperparameterTuningJobRequest,
                empty_pb2.Empty,
                self.cancel_job,
            ),
            "CreateBatchPredictionJob": (
                job_service_pb.CreateBatchPredictionJobRequest,
                batch_prediction_job.BatchPredictionJob,
                lambda r: self.create_job("batch_prediction_job", r),
            ),
            "GetBatchPredictionJob": (
                job_service_pb.GetBatchPredictionJobRequest,
                batch_prediction_job.BatchPredictionJob,
                self.get_job,
            ),
            "CancelBatchPredictionJob": (
                job_service_pb.CancelBatchPredictionJobRequest,
                empty_pb2.Empty,
                self.cancel_job,
            ),
        }

    def stop(self, grace: float = 5.0) -> None:
        """Cancel every job and return once its thread has ended, so no process of it runs: those left `grace`
        seconds after the cancel's SIGTERM get SIGKILL."""
        jobs_now = list(self.jobs.values())
        for job in jobs_now:
            _cancel(job)
        deadline = time.time() + grace
        for job in jobs_now:
            while job["thread"].is_alive():
                if time.time() > deadline:
                    _signal(job, signal.SIGKILL)
                job["thread"].join(0.1)

    def job_dir(self, name: str) -> str:
        """The folder of a job's logs (and of a tuning job's study records, `study/`)."""
        return os.path.join(self.context.directory, "jobs", name.rsplit("/", 1)[-1])

    def create_job(self, kind: str, request):
        """`kind`: the request's job field (a JOB_KINDS key); the job is answered PENDING, its work started."""
        self.registry.check_parent(request.parent)
        data = messages.to_dict(getattr(request, kind))
        if not data.get("display_name"):
            raise ApiError("INVALID_ARGUMENT", f"{kind}.display_name is required")
        self.context.check(data)
        try:
            jobs.validate(kind, data)
        except jobs.JobError as e:
            raise ApiError("INVALID_ARGUMENT", str(e)) from None
        name = f"{self.registry.parent}/{JOB_KINDS[kind][1]}/{self.registry.new_id()}"
        job: dict = {
            "kind": kind,
            "name": name,
            "data": {**data, "name": name, "state": "JOB_STATE_PENDING", "create_time": time.time()},
            "processes": [],
            "cancelled": False,
        }
        job["thread"] = threading.Thread(target=self._work, args=(job,), daemon=True, name=f"job-{name}")
        self.jobs[name] = job
        job["thread"].start()
        return _message(job)

    def _job(self, name: str) -> dict:
        canonical = self.registry.canonical(name)
        if canonical not in self.jobs:
            raise ApiError("NOT_FOUND", f"job {name} not found")
        return self.jobs[canonical]

    def get_job(self, request):
        return _message(self._job(request.name))

    def cancel_job(self, request) -> empty_pb2.Empty:
        _cancel(self._job(request.name))
        return empty_pb2.Empty()

    def _work(self, job: dict) -> None:
        data, kind = job["data"], job["kind"]
        log_dir = self.job_dir(data["name"])
        os.makedirs(log_dir, exist_ok=True)
        data.update(state="JOB_STATE_RUNNING", start_time=time.time())
        self.context.log(f"[vertex] {kind} {data['display_name']} running ({data['name']}); logs in {log_dir}")
        try:
            with open(os.path.join(log_dir, "job.log"), "w") as sink:
                if kind == "custom_job":
                    preemption = jobs.Preemption(self.preempt) if self.preempt is not None else None
                    jobs.run_custom_job(data, log_dir, lambda attempt, pids: self._started(job, pids), sink, preemption)
                elif kind == "hyperparameter_tuning_job":
                    data["trials"] = jobs.run_tuning_job(
                        data, os.path.join(log_dir, "study"), sink, lambda pid: self._started(job, [pid])
                    )
                else:
                    self._batch(job, log_dir)
            data["state"] = "JOB_STATE_SUCCEEDED"
        except (jobs.JobError, ApiError) as e:
            data["state"] = "JOB_STATE_CANCELLED" if job["cancelled"] else "JOB_STATE_FAILED"
            data["error"] = {"code": 1 if job["cancelled"] else 3, "message": str(e)}
            self.context.error(f"{kind} {data['display_name']}", str(e))
        except Exception as e:  # noqa: BLE001 (an unexpected failure is the job's INTERNAL error, as on Vertex)
            data.update(state="JOB_STATE_FAILED", error={"code": 13, "message": f"{type(e).__name__}: {e}"})
            self.context.error(f"{kind} {data['display_name']}", f"{type(e).__name__}: {e}")
        data["end_time"] = time.time()
        self.context.log(f"[vertex] {kind} {data['display_name']}: {data['state']}")

    @staticmethod
    def _started(job: dict, pids: list[int]) -> None:
        """A job's processes started (a custom job's replicas, a tuning job's trial runner): recorded for a cancel;
        cancelled meanwhile, raises JobError, and the engine stops them (neither restarts them)."""
        for pid in pids:
            try:
                job["processes"].append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        if job["cancelled"]:
            raise jobs.JobError("the job was cancelled")

    def _batch(self, job: dict, log_dir: str) -> None:
        """A batch prediction job: the model's container on a copy of its artifacts, for the job's duration."""
        data = job["data"]
        jobs.check_runnable_batch(data)
        version = self.registry.version(data.get("model", ""))
        job_id = data["name"].rsplit("/", 1)[-1]
        copy = gcs.copy_folder(version["artifact_uri"], self.context.model_copy(f"batchPredictionJobs/{job_id}"))
        try:
            process, url = jobs.start_container(copy, job_id, job_id, os.path.join(log_dir, "container.log"))
            job["processes"].append(psutil.Process(process.pid))
            try:
                data.update(jobs.run_batch_job(data, url, version["display_name"]))
            finally:
                jobs.stop_container(process)
        finally:
            gcs.delete_folder(copy)
