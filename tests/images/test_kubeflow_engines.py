"""The Kubeflow engine steps' component functions with the built images: the Kubernetes double's kubelet runs each
pod's container in its image (`runtime="podman"`), so the TFJob replicas, the Katib trials and the InferenceService
predictor run exactly what a cluster would pull, as the pod's user, on the claim as the kubelet gives it to them."""

from __future__ import annotations

import pytest

from components.lib.kube import api as kube
from tests.doubles.k8s import KubeAPI, point_clients_at, shipped_rules
from tests.doubles.k8s.kubelet import Claim, Kubelet
from tests.helpers.kubeflow_components import (
    KSERVE,
    katib_api,
    run_deploy_model_on_kserve,
    run_train_model_on_operator,
    run_tune_on_katib,
)
from tests.helpers.podman import image

TRAINER = {"tfpipe/trainer:dev": image("trainer")}


@pytest.fixture
def volume(tmp_path):
    """The claim `tfpipe`: a fresh volume, owned by root."""
    folder = tmp_path / "volume"
    folder.mkdir()
    return folder


@pytest.fixture
def prepared_dir(prepared, storage):
    """The data the components image prepared (its files owned by the image's user)."""
    return storage.host(prepared[1])


def test_the_tfjob_trains_a_chief_and_a_worker_in_the_trainer_image(monkeypatch, tmp_path, volume, prepared_dir):
    from tests.doubles.k8s.training_operator import TrainingOperator

    operator = TrainingOperator(Kubelet({"tfpipe": Claim(str(volume))}, TRAINER, runtime="podman"))
    api = KubeAPI(installed={"kubeflow.org/v1": {"tfjobs": "TFJob"}}, controllers=[operator], rbac=shipped_rules())
    point_clients_at(api, monkeypatch, tmp_path / "home")
    try:
        outputs = run_train_model_on_operator(volume, prepared_dir, tmp_path)
        (job,) = api.items("tfjobs")
        assert job["status"]["conditions"][-1]["type"] == "Succeeded"
        chief, worker = (api.logs[f"{job['metadata']['name']}-{r}-0"] for r in ("chief", "worker"))
    finally:
        api.close()
    assert (tmp_path / "model" / "saved_model.pb").is_file() and 0 < outputs.metrics.logged["val_accuracy"] <= 1
    assert "Traceback" not in chief + worker, chief + worker
    assert list(volume.iterdir()) == [volume / "runs"] and not any((volume / "runs").iterdir())


def test_katib_trials_run_the_trainer_image_and_report_through_the_collector(
    monkeypatch, tmp_path, volume, prepared_dir
):
    kubelet = Kubelet({"tfpipe": Claim(str(volume))}, TRAINER, runtime="podman")
    api, operator = katib_api(kubelet, monkeypatch, tmp_path / "home")
    try:
        hyperparameters, tuning = run_tune_on_katib(volume, prepared_dir, tmp_path)
        (experiment,) = api.items("experiments")
    finally:
        api.close()
    assert experiment["status"]["trialsSucceeded"] == 2 and operator.events == []
    best = experiment["status"]["currentOptimalTrial"]
    assert 0 < float(best["observation"]["metrics"][0]["latest"]) <= 1
    assert tuning.metadata["best_trial"] == best["bestTrialName"]
    assert hyperparameters["learning_rate"] == float(
        next(a["value"] for a in best["parameterAssignments"] if a["name"] == "learning_rate")
    )


def test_the_inference_service_serves_the_trained_model_in_the_serving_image(
    monkeypatch, tmp_path, volume, prepared_dir, trained_model_uri, storage
):
    from tests.doubles.k8s.kserve_operator import KServeOperator, process_pods
    from tests.doubles.k8s.network import Network

    network = Network()
    operator = KServeOperator(
        network, process_pods({"tfpipe": str(volume)}, {"tfpipe/serving:dev": image("serving")}, runtime="podman")
    )
    api = KubeAPI(installed=dict(KSERVE), controllers=[operator], rbac=shipped_rules())
    point_clients_at(api, monkeypatch, tmp_path / "home")
    for key, value in network.environ().items():
        monkeypatch.setenv(key, value)
    try:
        model = storage.host(trained_model_uri)
        version, outputs, record = run_deploy_model_on_kserve(volume, model, prepared_dir, "digits", tmp=tmp_path)
        assert record["smoke"]["signatures"] == ["serving_default", "serving_image_bytes"]
        assert record["revision"] == "digits-predictor-00001" and outputs.version == version.number
        second, _, record = run_deploy_model_on_kserve(volume, model, prepared_dir, "digits", traffic=30, tmp=tmp_path)
        assert record["canary"] and {t["revisionName"]: t["percent"] for t in record["traffic"]} == {
            "digits-predictor-00002": 30,
            "digits-predictor-00001": 70,
        }
    finally:
        api.close()
        network.close()


@pytest.mark.parametrize("security, code", [({}, 1), (kube.VOLUME_SECURITY, 0)])
def test_the_images_user_writes_a_fresh_claim_only_through_fs_group(volume, security, code):
    """The step pods' fsGroup (components/lib/kube/api.py) is what lets uid 1000 write the root-owned volume."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "writer", "namespace": "ml"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "tfpipe/trainer:dev",
                    "command": ["python", "-c", "open('/mnt/tfpipe/written', 'w').write('x')"],
                    "volumeMounts": [{"name": "data", "mountPath": "/mnt/tfpipe"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "tfpipe"}}],
            "securityContext": security,
            "restartPolicy": "Never",
        },
    }
    started = Kubelet({"tfpipe": Claim(str(volume))}, TRAINER, runtime="podman").start(pod, "main")
    assert started.process.wait(120) == code, started.log()
    assert (volume / "written").exists() is (code == 0)
    if code:
        assert "PermissionError: [Errno 13] Permission denied: '/mnt/tfpipe/written'" in started.log()
    started.stop()
