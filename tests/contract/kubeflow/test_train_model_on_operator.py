"""The kubeflow training step against a Kubernetes API double: the exact TFJob, and the step's behaviour on each
status transition (running → succeeded, failed with a message, cancelled, missing operator, a retried step)."""

import json
import os
import signal
import threading

import pytest
from kubernetes.client.exceptions import ApiException

from components.lib.kube import api as kube
from components.train_model_on_operator import TrainingJobFailed, as_dict, run_tfjob, tfjob, train_with_operator
from tests.doubles.k8s import KubeAPI
from tests.helpers.kubeflow_components import run_train_model_on_operator
from trainer.flags import TrainerSetup

TFJOBS = {"kubeflow.org/v1": {"tfjobs": "TFJob"}}
CREATED = {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "TFJob ml/x is created."}
RUNNING = {"type": "Running", "status": "True", "reason": "TFJobRunning", "message": "TFJob ml/x is running."}
SUCCEEDED = {
    "type": "Succeeded",
    "status": "True",
    "reason": "TFJobSucceeded",
    "message": "TFJob ml/x successfully completed.",
}
FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "TFJobFailed",
    "message": "TFJob ml/x has failed because 1 Chief replica(s) failed.",
}


@pytest.fixture
def api_server():
    server = KubeAPI(installed=dict(TFJOBS))
    yield server
    server.close()


def job(**overrides):
    values = dict(
        name="tfpipe-train-abc",
        namespace="ml",
        image="example.com/trainer:1",
        workers=3,
        args=["--data-dir", "/mnt/tfpipe/d", "--epochs", "5"],
        env={"AIP_MODEL_DIR": "/mnt/tfpipe/m"},
        resources={"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        claim_name="tfpipe",
        mount_path="/mnt/tfpipe",
        service_account="trainer",
        max_restarts=2,
        timeout_seconds=3600,
        labels={"tfpipe/run-id": "run-1"},
    )
    return tfjob(**{**values, **overrides})


def test_tfjob_one_chief_and_n_minus_one_workers_of_the_trainer_image():
    template = {
        "metadata": {"labels": {"tfpipe/run-id": "run-1"}, "annotations": {"sidecar.istio.io/inject": "false"}},
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "example.com/trainer:1",
                    "args": ["--data-dir", "/mnt/tfpipe/d", "--epochs", "5"],
                    "env": [{"name": "AIP_MODEL_DIR", "value": "/mnt/tfpipe/m"}],
                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
                    "volumeMounts": [{"name": "tfpipe-data", "mountPath": "/mnt/tfpipe"}],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
            "volumes": [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": "tfpipe"}}],
            "serviceAccountName": "trainer",
            # Pod Security's restricted profile; the images' uid 1000, to which the kubelet gives the claim's group
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 1000,
                "fsGroupChangePolicy": "OnRootMismatch",
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    }
    assert as_dict(job()) == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tfpipe-train-abc", "namespace": "ml", "labels": {"tfpipe/run-id": "run-1"}},
        "spec": {
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "restartPolicy": "ExitCode", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": template},
            },
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "ttlSecondsAfterFinished": 604800,
                "activeDeadlineSeconds": 3600,
            },
        },
    }
    single = as_dict(job(workers=1, claim_name="", service_account="", resources={}, timeout_seconds=0))
    assert set(single["spec"]["tfReplicaSpecs"]) == {"Chief"}
    assert single["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 604800,
    }
    pod = single["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    assert "volumes" not in pod and "serviceAccountName" not in pod
    assert set(pod["containers"][0]) == {"name", "image", "args", "env", "securityContext"}


def test_succeeds_streaming_each_condition_once(api_server):
    api_server.scripts["tfjobs"] = [
        {"conditions": [CREATED]},
        {"conditions": [CREATED, RUNNING]},
        {"conditions": [CREATED, RUNNING]},
        {"conditions": [CREATED, RUNNING, SUCCEEDED]},
    ]
    lines = []
    done = run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lines.append, sleep=lambda s: None)
    assert kube.condition(done, "Succeeded")
    (created,) = api_server.created("tfjobs")
    assert created == as_dict(job())
    assert api_server.calls("POST")[0].path == "/apis/kubeflow.org/v1/namespaces/ml/tfjobs"
    assert lines == [
        "created TFJob ml/tfpipe-train-abc: 1 chief + 2 worker(s) of example.com/trainer:1",
        "TFJob ml/tfpipe-train-abc: Created=True (TFJobCreated): TFJob ml/x is created.",
        "TFJob ml/tfpipe-train-abc: Running=True (TFJobRunning): TFJob ml/x is running.",
        "TFJob ml/tfpipe-train-abc: Succeeded=True (TFJobSucceeded): TFJob ml/x successfully completed.",
    ]
    assert not api_server.calls("DELETE")  # kept (ttlSecondsAfterFinished) for its logs


def failed_chief(api_server) -> None:
    """The job's one pod, the chief, and its log ending with its error."""
    api_server.pods = [
        {
            "metadata": {
                "name": "tfpipe-train-abc-chief-0",
                "labels": {
                    "training.kubeflow.org/job-name": "tfpipe-train-abc",
                    "training.kubeflow.org/replica-type": "chief",
                },
            }
        }
    ]
    api_server.logs["tfpipe-train-abc-chief-0"] = "Epoch 1/5\nValueError: bad shape\n"


def test_fails_with_the_jobs_own_message_and_the_chiefs_log(api_server):
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING]}, {"conditions": [CREATED, FAILED]}]
    failed_chief(api_server)
    with pytest.raises(TrainingJobFailed) as e:
        run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lambda m: None, sleep=lambda s: None)
    assert str(e.value) == (
        "TFJob ml/tfpipe-train-abc failed: TFJob ml/x has failed because 1 Chief replica(s) "
        "failed.\nchief's last log lines:\nEpoch 1/5\nValueError: bad shape\n"
    )
    log_call = api_server.calls("GET", "log")[0]
    assert log_call.query == {"container": ["tensorflow"], "tailLines": ["20"], "previous": ["False"]}


def test_the_failed_replicas_log_is_read_through_failing_requests(api_server):
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, FAILED]}]
    failed_chief(api_server)
    api_server.faults = [("GET", 503, "/pods"), ("GET", 500, "/log")]
    lines: list[str] = []
    with pytest.raises(TrainingJobFailed) as e:
        run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lines.append, sleep=lambda s: None)
    assert str(e.value).endswith("failed.\nchief's last log lines:\nEpoch 1/5\nValueError: bad shape\n")
    assert [r.fault for r in api_server.calls("GET") if r.fault] == [503, 500]
    assert sum(line.startswith("Kubernetes API: ") for line in lines) == 2


@pytest.mark.parametrize(
    "chief",
    [
        {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        {"terminated": {"exitCode": 143, "reason": "Error"}},  # stopped once the worker failed, seen in the same poll
    ],
    ids=["chief-running", "chief-stopped"],
)
def test_fails_with_the_log_of_the_replica_that_failed_not_the_chiefs(api_server, chief):
    """A worker that crashed while the chief still runs, or that the controller stopped after it: the worker's lines
    are the ones that say why (the chief's would be the collective's error, or nothing yet)."""
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING]}, {"conditions": [CREATED, FAILED]}]

    def pod(replica, index, state, restarts=0):
        return {
            "metadata": {
                "name": f"tfpipe-train-abc-{replica}-{index}",
                "labels": {
                    "training.kubeflow.org/job-name": "tfpipe-train-abc",
                    "training.kubeflow.org/replica-type": replica,
                    "training.kubeflow.org/replica-index": str(index),
                },
            },
            "status": {
                "containerStatuses": [
                    {
                        "name": "tensorflow",
                        "image": "x",
                        "imageID": "",
                        "ready": False,
                        "restartCount": restarts,
                        "state": state,
                    }
                ]
            },
        }

    api_server.pods = [
        pod("chief", 0, chief),
        pod("worker", 1, {"terminated": {"exitCode": 1, "reason": "Error"}}),
    ]
    api_server.logs["tfpipe-train-abc-chief-0"] = "Epoch 1/5\n"
    api_server.logs["tfpipe-train-abc-worker-1"] = "ModuleNotFoundError: No module named 'models'\n"
    with pytest.raises(TrainingJobFailed) as e:
        run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lambda m: None, sleep=lambda s: None)
    assert str(e.value).endswith("\nworker 1's last log lines:\nModuleNotFoundError: No module named 'models'\n")
    assert {c.path.rsplit("/", 2)[-2] for c in api_server.calls("GET", "log")} == {"tfpipe-train-abc-worker-1"}


def test_missing_training_operator_fails_at_once_naming_the_kind():
    server = KubeAPI(installed={})
    try:
        with pytest.raises(
            kube.EngineMissing,
            match=r"^the cluster has no TFJob \(tfjobs.kubeflow.org/v1\): install "
            r"the Kubeflow training operator",
        ):
            run_tfjob(kube.api_client(server.url), job(), poll_seconds=0, log=lambda m: None)
        assert [r.method for r in server.requests] == ["GET"]  # discovery only: nothing created
    finally:
        server.close()


def test_a_retried_step_follows_its_own_job_and_refuses_another_runs(api_server):
    api = kube.api_client(api_server.url)
    api_server.put("kubeflow.org/v1", "ml", "tfjobs", as_dict(job()))
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING, SUCCEEDED]}]
    lines = []
    run_tfjob(api, job(), poll_seconds=0, log=lines.append, sleep=lambda s: None)
    assert "TFJob ml/tfpipe-train-abc exists already (a retry of this step): following it" in lines
    other = job(labels={"tfpipe/run-id": "run-2"})
    with pytest.raises(RuntimeError, match="belongs to another run"):
        run_tfjob(api, other, poll_seconds=0, log=lambda m: None, sleep=lambda s: None)


def test_throttling_server_errors_and_dropped_connections_are_retried_and_a_lost_create_adopted(api_server):
    # discovery throttled (429, Retry-After: 1); the create handled but its answer lost, so the retry meets 409
    # and adopts the job; then a read answered 503, one whose connection drops, one answered 500
    api_server.faults = [429, ("POST", "lost"), ("GET", 503), ("GET", "reset"), ("GET", 500)]
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING]}, {"conditions": [CREATED, RUNNING, SUCCEEDED]}]
    lines, sleeps = [], []
    done = run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lines.append, sleep=sleeps.append)
    assert kube.condition(done, "Succeeded")
    faulted = [(r.method, r.path.rsplit("/", 1)[-1], r.fault) for r in api_server.requests if r.fault]
    assert faulted == [
        ("GET", "v1", 429),
        ("POST", "tfjobs", "lost"),
        ("GET", "tfpipe-train-abc", 503),
        ("GET", "tfpipe-train-abc", "reset"),
        ("GET", "tfpipe-train-abc", 500),
    ]
    assert len(api_server.created("tfjobs")) == 3  # the lost create, its retry and the adopting create: 409s
    assert [key[3] for key in api_server.objects if key[2] == "tfjobs"] == ["tfpipe-train-abc"]
    assert "TFJob ml/tfpipe-train-abc exists already (a retry of this step): following it" in lines
    # the 429 and its Retry-After: waited out and retried by the client's urllib3; the others by kube.call
    retries = [line.split(";")[0] for line in lines if line.startswith("Kubernetes API: ")]
    assert retries == [
        "Kubernetes API: connection lost (RemoteDisconnected)",
        "Kubernetes API: HTTP 503 Service Unavailable",
        "Kubernetes API: HTTP 500 Internal Server Error",
    ]
    assert len(sleeps) == 3 and all(0 < s <= 2.0 for s in sleeps)
    assert not api_server.calls("DELETE")


def test_an_api_server_that_stays_unavailable_ends_the_wait_and_deletes_the_job(api_server):
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING]}]
    lines, sleeps = [], []

    def unavailable_once_running(obj):
        if not api_server.faults and not api_server.calls("DELETE"):
            api_server.faults.extend([("GET", 503, "/tfjobs/")] * kube.CALL_ATTEMPTS)

    api_server.on_get["tfjobs"] = unavailable_once_running
    with pytest.raises(ApiException) as failed:
        run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lines.append, sleep=sleeps.append)
    assert failed.value.status == 503
    assert len([r for r in api_server.requests if r.fault == 503]) == kube.CALL_ATTEMPTS
    assert "TFJob ml/tfpipe-train-abc: giving up (HTTP 503 Service Unavailable); deleting it" in lines
    (deleted,) = [r for r in api_server.calls("DELETE") if r.fault is None]
    assert deleted.path == "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/tfpipe-train-abc"
    assert lines[-1] == "deleted TFJob ml/tfpipe-train-abc"
    poll_wait, *backoff = sleeps
    assert poll_wait == 0 and len(backoff) == kube.CALL_ATTEMPTS - 1 and all(0 < s <= 30 for s in backoff)


def test_a_failed_job_is_kept_for_its_logs_while_a_forbidden_read_fails_at_once(api_server):
    api_server.faults = []
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING, FAILED]}]
    with pytest.raises(TrainingJobFailed):
        run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0, log=lambda m: None, sleep=lambda s: None)
    assert not api_server.calls("DELETE")
    assert not kube.transient(RuntimeError("no status"))


def test_a_cancelled_run_deletes_the_job(api_server):
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING]}]
    sent = []

    def cancel_once_running(obj):
        if not sent:
            sent.append(1)
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()

    api_server.on_get["tfjobs"] = cancel_once_running
    lines = []
    with pytest.raises(kube.Cancelled):
        run_tfjob(kube.api_client(api_server.url), job(), poll_seconds=0.02, log=lines.append)
    (deleted,) = api_server.calls("DELETE")
    assert deleted.path == "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/tfpipe-train-abc"
    assert deleted.body == {"propagationPolicy": "Foreground"}
    assert lines[-2:] == ["received SIGTERM: the run was cancelled", "deleted TFJob ml/tfpipe-train-abc"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the step's handler is gone afterwards


def test_a_job_past_its_timeout_is_deleted(api_server):
    api_server.scripts["tfjobs"] = [{"conditions": [CREATED, RUNNING]}]
    with pytest.raises(TimeoutError, match="did not finish"):
        run_tfjob(
            kube.api_client(api_server.url),
            job(),
            poll_seconds=0,
            timeout_seconds=0,
            log=lambda m: None,
            sleep=lambda s: None,
        )
    assert [r.path.rsplit("/", 1)[1] for r in api_server.calls("DELETE")] == ["tfpipe-train-abc"]


def test_train_with_operator_stages_the_data_and_collects_the_chiefs_outputs(api_server, tmp_path):
    mount = tmp_path / "volume"
    data = tmp_path / "artifacts" / "dataset"
    data.mkdir(parents=True)
    (data / "stats.json").write_text("{}")
    run_dir = mount / "runs" / "tfpipe-training-x1"

    staged = []

    def chief_writes_its_outputs(obj):  # what the TFJob's chief leaves on the volume
        staged.append((run_dir / "dataset" / "stats.json").read_text())  # the replicas read the copy on the volume
        job_dir = run_dir / "train-model"
        (job_dir / "model").mkdir(parents=True, exist_ok=True)
        (job_dir / "model" / "saved_model.pb").write_text("pb")
        (job_dir / "metrics.json").write_text(
            json.dumps({"val_accuracy": 0.95, "val_loss": 0.2, "train_accuracy": 0.97, "train_loss": 0.1})
        )
        (job_dir / "history.jsonl").write_text("{}\n")
        obj["status"] = {"conditions": [SUCCEEDED]}

    api_server.on_get["tfjobs"] = chief_writes_its_outputs
    summary = train_with_operator(
        kube.api_client(api_server.url),
        str(data),
        str(tmp_path / "out" / "model"),
        str(tmp_path / "out" / "t"),
        workers=2,
        epochs=4,
        hyperparameters={"batch_size": 32.0, "learning_rate": 0.01},
        trainer=TrainerSetup("tests.helpers.custom_model:build_small_cnn", "mixed_bfloat16", {"conv_blocks": 2}),
        max_restarts=1,
        image="example.com/trainer:1",
        namespace="ml",
        service_account="",
        claim_name="tfpipe",
        mount_path=str(mount),
        resources={},
        run_id="tfpipe-training-x1",
        poll_seconds=0,
        log=lambda m: None,
        sleep=lambda s: None,
    )
    name = kube.object_name("tfpipe-train", "tfpipe-training-x1", "train-model")
    assert summary == {
        "val_accuracy": 0.95,
        "val_loss": 0.2,
        "train_accuracy": 0.97,
        "train_loss": 0.1,
        "tfjob": f"ml/{name}",
    }
    (created,) = api_server.created("tfjobs")
    container = created["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    job_dir = str(run_dir / "train-model")
    assert container["args"] == [
        "--data-dir",
        str(run_dir / "dataset"),
        "--job-dir",
        job_dir,
        "--model",
        "tests.helpers.custom_model:build_small_cnn",
        "--mixed-precision",
        "mixed_bfloat16",
        "--conv-blocks",
        "2",
        "--batch-size",
        "32",
        "--learning-rate",
        "0.01",
        "--epochs",
        "4",
    ]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "AIP_MODEL_DIR": f"{job_dir}/model",
        "AIP_CHECKPOINT_DIR": f"{job_dir}/checkpoints",
        "AIP_TENSORBOARD_LOG_DIR": f"{job_dir}/logs",
        "CLOUD_ML_HP_METRIC_FILE": f"{job_dir}/hypertune/output.metrics",
        "TF_USE_LEGACY_KERAS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    assert created["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "tfpipe",
        "tfpipe/run-id": "tfpipe-training-x1",
        "tfpipe/step": "train-model",
    }
    assert staged and set(staged) == {"{}"}
    assert not run_dir.exists()  # once collected, the job's folder and the staged copy leave the volume
    assert (tmp_path / "out" / "model" / "saved_model.pb").read_text() == "pb"
    assert json.loads((tmp_path / "out" / "t" / "metrics.json").read_text())["tfjob"] == f"ml/{name}"
    assert (tmp_path / "out" / "t" / "history.jsonl").exists()


def test_object_names_are_dns_labels_stable_per_run_and_task():
    a = kube.object_name("tfpipe-train", "run-1", "train-model")
    assert (
        a
        == kube.object_name("tfpipe-train", "run-1", "train-model")
        != kube.object_name("tfpipe-train", "run-2", "train-model")
    )
    assert a.startswith("tfpipe-train-") and len(a) == len("tfpipe-train-") + 10
    long = kube.object_name("My_Model.Name" * 10, "r")
    assert len(long) <= 50 and long[0].isalpha() and long == long.lower()
    assert kube.label_value("{{run}}/x" + "y" * 80) == ("run-x" + "y" * 80)[:63]


@pytest.fixture
def training_cluster(monkeypatch, tmp_path):
    """The double with the training operator's double, failing one request in five; the claim `tfpipe` a folder
    owned by root, as a fresh volume."""
    from tests.doubles.k8s import point_clients_at, shipped_rules
    from tests.doubles.k8s.kubelet import Claim, Kubelet
    from tests.doubles.k8s.training_operator import TrainingOperator

    volume = tmp_path / "volume"
    volume.mkdir()
    operator = TrainingOperator(Kubelet({"tfpipe": Claim(str(volume))}, {"tfpipe/trainer:dev": "trainer.Dockerfile"}))
    api = KubeAPI(
        installed={"kubeflow.org/v1": {"tfjobs": "TFJob"}},
        controllers=[operator],
        rbac=shipped_rules(),
        fault_rate=0.2,  # an API server under load: 429 (no wait asked), 500, 503, dropped connections
        fault_seed=3,
        retry_after=0,
    )
    point_clients_at(api, monkeypatch, tmp_path / "home")
    yield api, volume
    api.close()


@pytest.fixture(scope="module")
def iris_for_two(tmp_path_factory):
    """builtin:iris prepared for 2 workers (a tabular model's data)."""
    from components.prepare_data import prepare

    out = tmp_path_factory.mktemp("iris2") / "data"
    prepare("builtin:iris", str(out), num_workers=2, val_fraction=0.2, test_fraction=0.2)
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("data", ["digits_data", "iris_for_two"])
def test_the_component_trains_a_chief_and_a_worker_on_the_shared_volume(training_cluster, data, request, tmp_path):
    """An image model (digits) and a tabular one (iris)."""
    api, volume = training_cluster
    data_dir = request.getfixturevalue(data)
    outputs = run_train_model_on_operator(volume, data_dir, tmp_path)
    (job,) = api.items("tfjobs")
    assert job["status"]["conditions"][-1]["type"] == "Succeeded"
    assert job["status"]["conditions"][-1]["message"] == f"TFJob ml/{job['metadata']['name']} successfully completed."
    assert sorted(p["metadata"]["name"] for p in api.pods) == [
        f"{job['metadata']['name']}-{r}-0" for r in ("chief", "worker")
    ]
    assert (tmp_path / "model" / "saved_model.pb").is_file() and 0 < outputs.metrics.logged["val_accuracy"] <= 1
    assert outputs.model.metadata["tfjob"] == f"ml/{job['metadata']['name']}"
    assert any(r.fault for r in api.requests)
    assert list(volume.iterdir()) == [volume / "runs"] and not any((volume / "runs").iterdir())  # nothing left behind


@pytest.mark.e2e
def test_a_failing_trainer_fails_the_component_with_the_jobs_message_and_the_chiefs_log(
    training_cluster, digits_data, tmp_path
):
    api, volume = training_cluster
    with pytest.raises(TrainingJobFailed) as e:
        run_train_model_on_operator(volume, digits_data, tmp_path, model="models.missing:build", max_restarts=0)
    assert "replica(s) failed." in str(e.value)  # max_restarts 0: restartPolicy Never
    assert "last log lines" in str(e.value) and "models.missing" in str(e.value)  # whichever replica failed first


@pytest.mark.e2e
def test_data_prepared_for_fewer_workers_fails_in_one_line(training_cluster, iris_model, tmp_path):
    api, volume = training_cluster  # iris_model's data was prepared for one worker: one shard per split
    with pytest.raises(TrainingJobFailed) as e:
        run_train_model_on_operator(volume, iris_model.parent / "data", tmp_path, max_restarts=0)
    assert "has 1 train shard(s) for 2 workers: prepare it with num_workers >= 2" in str(e.value)
