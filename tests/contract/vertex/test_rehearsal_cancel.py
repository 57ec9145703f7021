"""Cancelling the double's jobs (pipelines/rehearsal/api): GCPC's launchers cancel their job over REST when their task
gets SIGTERM, and the double's `stop()` (a rehearsal ending or interrupted) leaves none of its jobs' processes
running: no replica restarted as a lost one, no trial runner started for the next trial."""

from __future__ import annotations

import json
import time

import psutil
import pytest
import requests
from google.cloud.aiplatform_v1.types import (
    custom_job as custom_job_pb,
    hyperparameter_tuning_job,
    job_service,
)

from pipelines.rehearsal import redirect
from pipelines.rehearsal.api import VertexDouble
from tests.contract.vertex.test_rehearsal_jobs import _val_loss_grid_job, custom_job

PROJECT, LOCATION = "p", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


@pytest.fixture
def double(tmp_path, monkeypatch):
    """The double, its jobs' outputs in local folders (Vertex's rules take gs:// only: not checked here)."""
    vertex = VertexDouble(str(tmp_path), str(tmp_path / "state.json"), PROJECT, "4711", LOCATION, log=lambda line: None)
    monkeypatch.setattr(vertex, "check", lambda request: None)
    vertex.start()
    yield vertex
    vertex.stop()


def _wait(condition, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline
        time.sleep(0.05)


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie has ended)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _job_children() -> list[str]:
    """The command lines of this process's descendants that are trainer replicas or trial runners."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if ("trainer.task" in command or "trial_runner" in command) and child.status() != psutil.STATUS_ZOMBIE:
            found.append(command)
    return found


def _long_custom_job(double: VertexDouble, data, tmp_path) -> dict:
    """A running custom job of many epochs (its replica started), as the double holds it."""
    request = job_service.CreateCustomJobRequest(
        parent=PARENT, custom_job=custom_job_pb.CustomJob(custom_job(data, tmp_path / "job", epochs=10_000))
    )
    job = double.job_service.jobs[double.job_service.create_job("custom_job", request).name]
    _wait(lambda: job["processes"])
    return job


def test_gcpcs_launcher_cancels_its_custom_job_over_rest_and_the_job_ends_cancelled(double, digits_data, tmp_path):
    """GCPC's job launcher's own cancel (`send_cancel_request`, what its SIGTERM handler calls) reaches the double
    as Vertex's `POST /v1/NAME:cancel`; the job ends CANCELLED (code 1) with no replica left running."""
    from google_cloud_pipeline_components.container.v1.gcp_launcher.job_remote_runner import JobRemoteRunner

    job = _long_custom_job(double, digits_data, tmp_path)
    with redirect.redirected(double.grpc_target, double.http_base, PROJECT):
        runner = JobRemoteRunner("CustomJob", PROJECT, LOCATION, str(tmp_path / "gcp_resources"))
        runner.send_cancel_request(job["name"])
    _wait(lambda: job["data"]["state"] in TERMINAL)
    assert (job["data"]["state"], job["data"]["error"]["code"]) == ("JOB_STATE_CANCELLED", 1)
    assert _running(job["processes"]) == [] and _job_children() == []
    job_id = job["name"].rsplit("/", 1)[-1]
    requests = [json.loads(line) for line in open(double.requests_path)]
    assert [(r["api"], r["method"], r["request"]) for r in requests if r["api"] == "rest"] == [
        ("rest", f"POST {job_id}:cancel", {})  # the body GCPC sends: empty
    ]


@pytest.mark.parametrize("collection", ["customJobs", "hyperparameterTuningJobs", "batchPredictionJobs"])
def test_a_rest_cancel_of_an_unknown_job_is_vertexs_404(double, collection):
    name = f"{PARENT}/{collection}/999"
    answer = requests.post(f"{double.http_base}/v1/{name}:cancel", data="", timeout=30)
    assert (answer.status_code, answer.json()) == (
        404,
        {"error": {"code": 404, "message": f"job {name} not found", "status": "NOT_FOUND"}},
    )


def test_stop_during_a_custom_job_leaves_none_of_its_replicas_running(double, digits_data, tmp_path):
    """The replica killed by the cancel's SIGTERM is not restarted, and `stop()` returns once the job has ended."""
    job = _long_custom_job(double, digits_data, tmp_path)
    double.stop()
    assert job["data"]["state"] == "JOB_STATE_CANCELLED"
    assert _running(job["processes"]) == [] and _job_children() == []


def test_stop_during_a_tuning_job_leaves_none_of_its_trial_runners_running(double, digits_data, tmp_path):
    """The trial runners get the cancel's SIGTERM, no runner starts for a next trial, and `stop()` returns once the
    study has ended."""
    spec = _val_loss_grid_job(digits_data, tmp_path / "tune", epochs=10_000, steps=5, rates=[0.001, 0.01, 0.1, 1.0])
    spec["parallel_trial_count"] = 2
    request = job_service.CreateHyperparameterTuningJobRequest(
        parent=PARENT, hyperparameter_tuning_job=hyperparameter_tuning_job.HyperparameterTuningJob(spec)
    )
    name = double.job_service.create_job("hyperparameter_tuning_job", request).name
    _wait(lambda: len(_job_children()) == 2)
    double.stop()
    job = double.job_service.jobs[name]
    assert job["data"]["state"] == "JOB_STATE_CANCELLED", job["data"].get("error")
    assert len(job["processes"]) >= 2 and _running(job["processes"]) == [] and _job_children() == []
