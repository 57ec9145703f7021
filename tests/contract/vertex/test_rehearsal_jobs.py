"""The rehearsal's custom jobs and tuning trials as strict as Vertex AI's (pipelines/rehearsal/jobs.py): CLUSTER_SPEC
and TF_CONFIG on every replica and trial, replicas restarted as the job's `scheduling` says, a preempted replica
restarted and resuming from its last checkpoint. Jobs run the real trainer on the digits, one replica, 1-2 short
epochs."""

from __future__ import annotations

import io
import json
import os
import signal

import pytest

from components.lib.study.spec import StudySpec
from components.tune_hyperparameters import run_study
from pipelines.rehearsal import jobs
from trainer.distribute import Cluster, cluster_from_env

PORTS = [2222, 2223, 2224]


@pytest.mark.parametrize(
    "replicas, index, trial, cluster_spec, tf_config, cluster",
    [
        (  # a single-replica custom job
            1,
            0,
            "",
            {
                "cluster": {"workerpool0": ["localhost:2222"]},
                "environment": "cloud",
                "task": {"type": "workerpool0", "index": 0},
            },
            {"cluster": {"chief": ["localhost:2222"]}, "environment": "cloud", "task": {"type": "chief", "index": 0}},
            Cluster("chief", 0, 1, has_chief=True),
        ),
        (  # the chief of three replicas
            3,
            0,
            "",
            {
                "cluster": {"workerpool0": ["localhost:2222"], "workerpool1": ["localhost:2223", "localhost:2224"]},
                "environment": "cloud",
                "task": {"type": "workerpool0", "index": 0},
            },
            {
                "cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]},
                "environment": "cloud",
                "task": {"type": "chief", "index": 0},
            },
            Cluster("chief", 0, 3, has_chief=True),
        ),
        (  # the second worker of three replicas
            3,
            2,
            "",
            {
                "cluster": {"workerpool0": ["localhost:2222"], "workerpool1": ["localhost:2223", "localhost:2224"]},
                "environment": "cloud",
                "task": {"type": "workerpool1", "index": 1},
            },
            {
                "cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]},
                "environment": "cloud",
                "task": {"type": "worker", "index": 1},
            },
            Cluster("worker", 1, 3, has_chief=True),
        ),
        (  # a tuning job's trial 7 (one replica)
            1,
            0,
            "7",
            {
                "cluster": {"workerpool0": ["localhost:2222"]},
                "environment": "cloud",
                "task": {"type": "workerpool0", "index": 0, "trial": "7"},
            },
            {
                "cluster": {"chief": ["localhost:2222"]},
                "environment": "cloud",
                "task": {"type": "chief", "index": 0, "trial": "7"},
            },
            Cluster("chief", 0, 1, has_chief=True),
        ),
    ],
)
def test_every_replica_and_trial_gets_cluster_spec_and_tf_config(
    replicas, index, trial, cluster_spec, tf_config, cluster
):
    """As Vertex sets them on every replica (a single one too), the trial named in a tuning job's; the trainer reads
    its place in the cluster from either."""
    env = jobs.vertex_cluster_env(PORTS[:replicas], index, trial=trial)
    assert {name: json.loads(value) for name, value in env.items()} == {
        "CLUSTER_SPEC": cluster_spec,
        "TF_CONFIG": tf_config,
    }
    assert cluster_from_env({"CLUSTER_SPEC": env["CLUSTER_SPEC"]}) == cluster
    assert cluster_from_env(dict(env)) == cluster


def test_each_trial_gets_its_own_cluster_spec(tmp_path):
    """A study's trials run with the environment `trial_env` gives their id (the rehearsal's: a CLUSTER_SPEC and
    TF_CONFIG naming the trial)."""
    spec = StudySpec.model_validate(
        {
            "parameters": [{"type": "discrete", "parameter_id": "learning_rate", "values": [0.01, 0.1]}],
            "algorithm": "grid",
            "metric_id": "accuracy",
            "max_trial_count": 2,
            "parallel_trial_count": 1,
        }
    )
    run_study(
        spec,
        str(tmp_path / "study"),
        [],
        module="tests.helpers.env_probe",
        log=lambda line: None,
        flags=lambda parameters: [],
        output_base=str(tmp_path / "out"),
        trial_env=lambda trial_id: jobs.vertex_cluster_env([2222], 0, trial=trial_id),
    )
    for trial_id in ("1", "2"):
        seen = json.loads((tmp_path / "out" / trial_id / "model" / "cluster.json").read_text())
        assert seen == {
            name: json.loads(value) for name, value in jobs.vertex_cluster_env([2222], 0, trial=trial_id).items()
        }
        assert seen["CLUSTER_SPEC"]["task"] == {"type": "workerpool0", "index": 0, "trial": trial_id}


def custom_job(data, base, scheduling: dict | None = None, epochs: int = 1) -> dict:
    """A single-replica CustomJob request (a dict of proto field names) on local folders."""
    args = ["--data-dir", str(data), "--job-dir", str(base), "--epochs", str(epochs), "--steps-per-epoch", "5"]
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "container_spec": {"image_uri": "trainer:1", "args": args},
    }
    spec = {"worker_pool_specs": [pool], "base_output_directory": {"output_uri_prefix": str(base)}}
    return {"display_name": "j", "job_spec": {**spec, **({"scheduling": scheduling} if scheduling else {})}}


def kill_first_start():
    """An `on_start` that kills replica 0 of the job's first start (SIGKILL: a lost replica), then lets it be."""
    starts: list[list[int]] = []

    def on_start(attempt, pids):
        starts.append(pids)
        if len(starts) == 1:
            os.kill(pids[0], signal.SIGKILL)

    return on_start, starts


def history(base) -> list[int]:
    return [json.loads(line)["epoch"] for line in (base / "history.jsonl").read_text().splitlines()]


def test_a_replica_lost_once_restarts_in_place_and_the_job_completes(digits_data, tmp_path):
    """Vertex restarts a replica exiting non-zero at once, in place (at most 5 times a replica)."""
    base, logs, sink = tmp_path / "job", tmp_path / "logs", io.StringIO()
    on_start, starts = kill_first_start()
    jobs.run_custom_job(custom_job(digits_data, base), str(logs), on_start, sink)
    assert len(starts) == 2 and starts[0] != starts[1]  # the replica's process, then its restart's
    assert "[launcher] chief exited with code -9 (killed by a signal: lost); restarting it in place (1/5)" in (
        sink.getvalue()
    )
    assert "attempt 2:" not in sink.getvalue()  # restarted in place, not the job retried
    assert sorted(os.listdir(logs)) == ["chief.attempt-1.log", "chief.attempt-1.restart-1.log"]
    assert history(base) == [1]
    assert json.loads((base / "metrics.json").read_text())["num_workers"] == 1


def test_retries_disabled_the_job_fails_with_vertexs_message(digits_data, tmp_path):
    """`scheduling.disable_retries`: nothing is restarted; the job fails with the replica's status (137: SIGKILL)."""
    logs, sink = tmp_path / "logs", io.StringIO()
    on_start, starts = kill_first_start()
    with pytest.raises(jobs.JobError) as failure:
        jobs.run_custom_job(
            custom_job(digits_data, tmp_path / "job", {"disable_retries": True}), str(logs), on_start, sink
        )
    assert str(failure.value) == (
        "The replica workerpool0-0 exited with a non-zero status of 137. To find out more about why your job exited "
        f"please check the logs: {logs / 'chief.attempt-1.log'}"
    )
    assert len(starts) == 1 and os.listdir(logs) == ["chief.attempt-1.log"]


def test_a_preempted_replica_restarts_and_resumes_from_its_last_checkpoint(digits_data, tmp_path):
    """The double preempts replica 0 once, as its second epoch begins (SIGTERM, then SIGKILL); restarted in place,
    the trainer resumes from the first epoch's checkpoint: no epoch is trained twice."""
    base, logs, sink = tmp_path / "job", tmp_path / "logs", io.StringIO()
    preemption = jobs.Preemption(0, grace=5)
    jobs.run_custom_job(custom_job(digits_data, base, epochs=2), str(logs), lambda a, p: None, sink, preemption)
    out = sink.getvalue()
    assert "[vertex] preempting workerpool0-0 (Spot VM preemption: SIGTERM, then SIGKILL)" in out
    assert "[launcher] chief exited with code -15 (killed by a signal: lost); restarting it in place (1/5)" in out
    assert history(base) == [1, 2]
    restarted = (logs / "chief.attempt-1.restart-1.log").read_text()
    assert "resuming from the last checkpoint at epoch 2/2" in restarted and "Epoch 1/2" not in restarted
    assert (base / "model" / "saved_model.pb").exists()


def test_the_double_preempts_the_replica_rehearse_names(tmp_path):
    """`rehearse --preempt-replica N` reaches every custom job the double runs: one with fewer replicas fails with the
    option's line."""
    import time

    from google.cloud.aiplatform_v1.types import custom_job, job_service

    from pipelines.rehearsal.api import VertexDouble

    double = VertexDouble(
        str(tmp_path), str(tmp_path / "state.json"), "p", "4711", "us-central1", log=lambda line: None, preempt=1
    )
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "container_spec": {"image_uri": "trainer:1", "args": ["--data-dir", "gs://b/d"]},
    }
    spec = {"worker_pool_specs": [pool], "base_output_directory": {"output_uri_prefix": "gs://b/job"}}
    request = job_service.CreateCustomJobRequest(
        parent="projects/p/locations/us-central1", custom_job=custom_job.CustomJob(display_name="j", job_spec=spec)
    )
    name = double.job_service.create_job("custom_job", request).name
    deadline = time.time() + 60
    while double.job_service.jobs[name]["data"]["state"] not in ("JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"):
        assert time.time() < deadline, double.job_service.jobs[name]["data"]
        time.sleep(0.1)
    double.stop()
    data = double.job_service.jobs[name]["data"]
    assert (data["state"], data["error"]["message"]) == (
        "JOB_STATE_FAILED",
        "--preempt-replica 1: the job has 1 replica(s)",
    )


def test_a_tuning_job_minimizing_val_loss_reads_back_the_trial_with_the_lowest(digits_data, tmp_path):
    """A HyperparameterTuningJob with `metric_id: val_loss, goal: MINIMIZE` on the real trainer: each trial's final
    measurement is its last epoch's val_loss, and `read_best_trial` picks the lowest of them."""
    from google.cloud.aiplatform_v1.types import study

    from components.read_best_trial import best_trial

    base = tmp_path / "tune"
    job = _val_loss_grid_job(digits_data, base, epochs=1, steps=3, rates=[0.0001, 0.003, 3.0])
    trials = jobs.run_tuning_job(job, str(tmp_path / "work"), io.StringIO())
    val_loss = {
        t["id"]: json.loads((base / t["id"] / "history.jsonl").read_text().splitlines()[-1])["val_loss"] for t in trials
    }
    assert {t["id"]: t["final_measurement"]["metrics"] for t in trials} == {
        trial_id: [{"metric_id": "val_loss", "value": value}] for trial_id, value in val_loss.items()
    }
    best = best_trial([study.Trial(t) for t in trials], "val_loss", "minimize")
    assert (best["trial_id"], best["metric"]) == (min(val_loss, key=val_loss.get), min(val_loss.values()))


def test_a_warm_started_tuning_job_hands_the_training_its_best_trials_best_checkpoint(
    digits_data, tmp_path, monkeypatch
):
    """`study.warm_start` on Vertex: the tuning job's real trainer trials keep their checkpoints under
    `<base>/<trial id>/checkpoints` (Vertex's AIP_CHECKPOINT_DIR of a trial); `read_best_trial`, reading the job
    through the Job Service's gRPC stub, names the best trial's `best` folder, which holds that trial's epoch of
    lowest val_loss; the merged hyperparameters put it on the training's command line."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.aiplatform_v1.services.job_service.transports.grpc import JobServiceGrpcTransport
    from google.cloud.aiplatform_v1.types import hyperparameter_tuning_job, study

    from components.merge_hyperparameters import merge_hyperparameters
    from components.plan_vertex_training import worker_pool_specs
    from components.read_best_trial import read_best_trial
    from tests.doubles.gapic import FakeStub
    from trainer import checkpoints

    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "p"))
    base = tmp_path / "tune"
    job = _val_loss_grid_job(digits_data, base, epochs=3, steps=5, rates=[0.003, 0.03])
    trials = jobs.run_tuning_job(job, str(tmp_path / "work"), io.StringIO())
    name = "projects/p/locations/europe-west4/hyperparameterTuningJobs/5"
    FakeStub(
        lambda request: hyperparameter_tuning_job.HyperparameterTuningJob(
            name=request.name, trials=[study.Trial(t) for t in trials]
        )
    ).bind(JobServiceGrpcTransport, "get_hyperparameter_tuning_job", monkeypatch)
    resources = json.dumps(
        {"resources": [{"resourceUri": f"https://europe-west4-aiplatform.googleapis.com/v1/{name}"}]}
    )
    outputs = read_best_trial(resources, "val_loss", "minimize", str(tmp_path / "root"), str(base), warm_start=True)
    measured = {t["id"]: t["final_measurement"]["metrics"][0]["value"] for t in trials}
    best_id = min(measured, key=measured.get)
    assert outputs.warm_start_from == f"{base}/{best_id}/checkpoints/best"
    epochs = [json.loads(line) for line in (base / best_id / "history.jsonl").read_text().splitlines()]
    kept = checkpoints.read(outputs.warm_start_from)
    assert kept is not None and kept.epoch == min(epochs, key=lambda h: h["val_loss"])["epoch"]
    hyperparameters = merge_hyperparameters(
        {"batch_size": 32, "learning_rate": 0.001}, outputs.best_parameters, outputs.warm_start_from
    )
    container = worker_pool_specs("trainer:1", "gs://b/data", 1, "n1-standard-4", hyperparameters)[0]["container_spec"]
    assert container["args"] == [
        "--data-dir",
        "gs://b/data",
        "--batch-size",
        "32",
        "--learning-rate",
        str(outputs.best_parameters["learning_rate"]),
        "--warm-start-from",
        f"{base}/{best_id}/checkpoints/best",
    ]
    unwarmed = read_best_trial(resources, "val_loss", "minimize", str(tmp_path / "root"), str(base))
    assert unwarmed.warm_start_from == "" and unwarmed.best_trial_id == best_id


def _val_loss_grid_job(data, base, epochs: int, steps: int, rates: list) -> dict:
    """A HyperparameterTuningJob of one-replica trainer trials minimizing val_loss over a grid of learning rates,
    writing under `base`."""
    args = ["--data-dir", str(data), "--epochs", str(epochs), "--steps-per-epoch", str(steps)]
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4"},
        "replica_count": 1,
        "container_spec": {"image_uri": "trainer:1", "args": args},
    }
    return {
        "display_name": "t",
        "study_spec": {
            "metrics": [{"metric_id": "val_loss", "goal": "MINIMIZE"}],
            "parameters": [{"parameter_id": "learning_rate", "discrete_value_spec": {"values": rates}}],
            "algorithm": "GRID_SEARCH",
        },
        "max_trial_count": len(rates),
        "parallel_trial_count": 1,
        "trial_job_spec": {"worker_pool_specs": [pool], "base_output_directory": {"output_uri_prefix": str(base)}},
    }
