"""The kubeflow training step on Kubeflow Trainer v2 against the Kubernetes API double: the TrainJob it creates on the
shipped runtime, each status transition (complete, failed with the job's message and the failing pod's log,
cancelled, timed out), a missing runtime, and the engine `auto` chooses from what the API server serves."""

import os
import signal
import threading

import pytest

from components.lib.kube import api as kube, trainjob as tj
from components.train_model_on_operator import TrainingJobFailed, choose_engine, run_trainjob
from tests.doubles.k8s import KubeAPI
from tests.helpers.kubeflow_components import run_train_model_on_operator

TRAINER = {"trainer.kubeflow.org/v1alpha1": {"trainjobs": "TrainJob", "trainingruntimes": "TrainingRuntime"}}
TFJOBS = {"kubeflow.org/v1": {"tfjobs": "TFJob"}}
WHAT = "TrainJob ml/tfpipe-train-abc"
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml"
COMPLETE = {
    "type": "Complete",
    "status": "True",
    "reason": "AllJobsCompleted",
    "message": "jobset completed successfully",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}
FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "FailJobSetFailurePolicyAction",
    "message": "applying FailJobSet failure policy action (first failed job: tfpipe-train-abc-node-0)",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}
RUNNING = {"jobsStatus": [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]}


@pytest.fixture
def api_server():
    server = KubeAPI(installed=dict(TRAINER))
    server.put(tj.API_VERSION, "ml", tj.RUNTIME_PLURAL, tj.training_runtime(2))
    yield server
    server.close()


def job(**overrides) -> dict:
    values = dict(
        name="tfpipe-train-abc",
        namespace="ml",
        image="example.com/trainer:1",
        workers=2,
        args=["--epochs", "5"],
        env={"AIP_MODEL_DIR": "/mnt/tfpipe/m"},
        resources={},
        claim_name="tfpipe",
        mount_path="/mnt/tfpipe",
        labels={"tfpipe/run-id": "run-1"},
    )
    return tj.trainjob(**{**values, **overrides})


def run(server, lines, max_restarts=2, **kwargs):
    kwargs = {"poll_seconds": 0, "sleep": lambda s: None, **kwargs}
    return run_trainjob(kube.api_client(server.url), job(), max_restarts, log=lines.append, **kwargs)


def pod(index: int, state: dict) -> dict:
    return {
        "metadata": {
            "name": f"tfpipe-train-abc-node-0-{index}-x1y2z",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "tfpipe-train-abc",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "status": {
            "containerStatuses": [
                {"name": "node", "image": "x", "imageID": "", "ready": False, "restartCount": 0, "state": state}
            ]
        },
    }


def test_creates_the_trainjob_on_the_runtime_and_follows_it_to_complete(api_server):
    api_server.scripts["trainjobs"] = [RUNNING, RUNNING, {**RUNNING, "conditions": [COMPLETE]}]
    lines: list[str] = []
    done = run(api_server, lines)
    assert kube.condition(done, "Complete")
    assert [(r.method, r.path) for r in api_server.requests[:3]] == [
        ("GET", "/apis/trainer.kubeflow.org/v1alpha1"),
        ("GET", f"{PATH}/trainingruntimes/tfpipe-tensorflow-distributed"),
        ("POST", f"{PATH}/trainjobs"),
    ]
    assert api_server.created("trainjobs") == [job()]
    assert lines == [
        f"created {WHAT}: 2 worker(s) of example.com/trainer:1",
        f"{WHAT}: Complete=True (AllJobsCompleted): jobset completed successfully",
    ]
    assert not api_server.calls("DELETE")


def test_fails_with_the_jobs_message_and_the_log_of_the_worker_that_failed(api_server):
    api_server.scripts["trainjobs"] = [RUNNING, {**RUNNING, "conditions": [FAILED]}]
    api_server.pods = [
        pod(0, {"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
        pod(1, {"terminated": {"exitCode": 1, "reason": "Error"}}),
    ]
    api_server.logs["tfpipe-train-abc-node-0-1-x1y2z"] = "ValueError: bad shape\n"
    with pytest.raises(TrainingJobFailed) as e:
        run(api_server, [])
    assert str(e.value) == (
        f"{WHAT} failed: applying FailJobSet failure policy action (first failed job: tfpipe-train-abc-node-0)\n"
        "worker 1's last log lines:\nValueError: bad shape\n"
    )
    (listing,) = {
        tuple(r.query["labelSelector"]) for r in api_server.calls("GET", "pods") if "labelSelector" in r.query
    }
    assert listing == ("jobset.sigs.k8s.io/jobset-name=tfpipe-train-abc",)
    assert {tuple(r.query["container"]) for r in api_server.calls("GET", "log")} == {("node",)}
    assert not api_server.calls("DELETE")  # kept for its pods' logs


def test_a_missing_runtime_fails_at_once_naming_it_and_what_to_apply(api_server):
    api_server.objects.clear()
    with pytest.raises(kube.EngineMissing) as e:
        run(api_server, [])
    assert str(e.value) == (
        "the namespace ml has no TrainingRuntime tfpipe-tensorflow-distributed: apply it there "
        "(kubectl apply -k manifests/kubeflow/trainer-v2 -n ml)"
    )
    assert not api_server.calls("POST")


def test_a_runtime_with_other_restarts_is_followed_with_a_one_line_warning(api_server):
    api_server.scripts["trainjobs"] = [{**RUNNING, "conditions": [COMPLETE]}]
    lines: list[str] = []
    run(api_server, lines, max_restarts=5)
    assert lines[0] == (
        "warning: TrainingRuntime ml/tfpipe-tensorflow-distributed restarts the workers at most 2 time(s), not "
        "max_restarts=5: its failure policy decides"
    )


def test_a_cancelled_run_deletes_the_trainjob(api_server):
    api_server.scripts["trainjobs"] = [RUNNING]
    sent = []

    def cancel_once_running(obj):
        if not sent:
            sent.append(1)
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()

    api_server.on_get["trainjobs"] = cancel_once_running
    lines: list[str] = []
    with pytest.raises(kube.Cancelled):
        run(api_server, lines, poll_seconds=0.02, sleep=None)
    (deleted,) = api_server.calls("DELETE")
    assert (deleted.path, deleted.body) == (f"{PATH}/trainjobs/tfpipe-train-abc", {"propagationPolicy": "Foreground"})
    assert lines[-2:] == ["received SIGTERM: the run was cancelled", f"deleted {WHAT}"]


def test_a_trainjob_past_its_timeout_is_deleted(api_server):
    api_server.scripts["trainjobs"] = [RUNNING]
    lines: list[str] = []
    with pytest.raises(TimeoutError, match=f"^{WHAT} did not finish within 0 min$"):
        run(api_server, lines, timeout_seconds=0)
    assert [r.path for r in api_server.calls("DELETE")] == [f"{PATH}/trainjobs/tfpipe-train-abc"]
    assert lines[-2:] == [
        f"{WHAT}: giving up (TimeoutError: {WHAT} did not finish within 0 min); deleting it",
        f"deleted {WHAT}",
    ]


@pytest.mark.parametrize(
    "installed, engine, line",
    [
        (
            {**TRAINER, **TFJOBS},
            "trainjob",
            "training engine: TrainJob (the cluster serves trainjobs.trainer.kubeflow.org/v1alpha1)",
        ),
        (
            TFJOBS,
            "tfjob",
            "training engine: TFJob (the cluster serves tfjobs.kubeflow.org/v1, not "
            "trainjobs.trainer.kubeflow.org/v1alpha1)",
        ),
    ],
)
def test_auto_chooses_what_the_cluster_serves_and_says_why(installed, engine, line):
    server = KubeAPI(installed=dict(installed))
    try:
        lines: list[str] = []
        assert choose_engine(kube.api_client(server.url), "auto", lines.append) == engine
        assert lines == [line]
        assert all(r.method == "GET" and r.path.count("/") == 3 for r in server.requests)  # discovery only
    finally:
        server.close()


def test_auto_without_either_kind_fails_in_one_line_naming_what_to_install():
    server = KubeAPI(installed={"kubeflow.org/v1beta1": {"experiments": "Experiment"}})
    try:
        with pytest.raises(kube.EngineMissing) as e:
            choose_engine(kube.api_client(server.url), "auto", lambda m: None)
        assert str(e.value) == (
            "the cluster serves neither TrainJob (trainjobs.trainer.kubeflow.org/v1alpha1) nor TFJob "
            "(tfjobs.kubeflow.org/v1): install Kubeflow Trainer v2 and apply manifests/kubeflow/trainer-v2, or set "
            "platform.kubeflow.training: pod"
        )
        assert [r.path for r in server.requests] == ["/apis/trainer.kubeflow.org/v1alpha1", "/apis/kubeflow.org/v1"]
    finally:
        server.close()


def test_a_configured_engine_is_used_without_discovery():
    server = KubeAPI(installed={})
    try:
        assert choose_engine(kube.api_client(server.url), "tfjob", lambda m: None) == "tfjob"
        assert not server.requests
    finally:
        server.close()


@pytest.fixture
def trainer_cluster(monkeypatch, tmp_path):
    """Trainer v2's double behind an API server that fails one request in five, the runtime applied to `ml`, the
    namespace labelled Pod Security restricted, the Role the repository ships."""
    from tests.doubles.k8s import point_clients_at, shipped_rules
    from tests.doubles.k8s.kubelet import Claim, Kubelet
    from tests.doubles.k8s.trainer_controller import TrainerController

    volume = tmp_path / "volume"
    volume.mkdir()
    controller = TrainerController(
        Kubelet({"tfpipe": Claim(str(volume))}, {"tfpipe/trainer:dev": "trainer.Dockerfile"})
    )
    api = KubeAPI(
        installed={**TRAINER, **TFJOBS},
        controllers=[controller],
        rbac=shipped_rules(),
        namespaces={"ml": {"pod-security.kubernetes.io/enforce": "restricted"}},
        fault_rate=0.2,
        fault_seed=7,
        retry_after=0,
    )
    api.put(tj.API_VERSION, "ml", tj.RUNTIME_PLURAL, tj.training_runtime(1))
    point_clients_at(api, monkeypatch, tmp_path / "home")
    yield api, volume
    api.close()


@pytest.mark.e2e
def test_the_component_trains_a_chief_and_a_worker_as_a_trainjob_through_faults(
    trainer_cluster, digits_data, tmp_path, capsys
):
    api, volume = trainer_cluster
    outputs = run_train_model_on_operator(volume, digits_data, tmp_path)
    (job,) = api.items("trainjobs")
    name = job["metadata"]["name"]
    assert job["status"]["conditions"][-1]["type"] == "Complete"
    assert sorted(p["spec"]["hostname"] for p in api.pods) == [f"{name}-node-0-0", f"{name}-node-0-1"]
    assert (tmp_path / "model" / "saved_model.pb").is_file() and 0 < outputs.metrics.logged["val_accuracy"] <= 1
    assert outputs.model.metadata["trainjob"] == f"ml/{name}"
    assert any(r.fault for r in api.requests)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (
        "training engine: TrainJob (the cluster serves trainjobs.trainer.kubeflow.org/v1alpha1)"
    ) or printed[0].startswith("Kubernetes API: ")
    assert f"TrainJob ml/{name}: Complete=True (AllJobsCompleted): jobset completed successfully" in printed
    assert list(volume.iterdir()) == [volume / "runs"] and not any((volume / "runs").iterdir())
