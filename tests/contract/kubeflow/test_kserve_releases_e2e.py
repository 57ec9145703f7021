"""The deploy component end to end on KServe 0.16 and 0.20 in Knative and Standard mode, the project's serving image
as every predictor's process, behind an API server that fails requests at a rate, in a namespace that enforces Pod
Security's `restricted` profile: a full rollout, a canary where the cluster honours it (Knative:
canaryTrafficPercent; 0.20 Standard: spec.canary) and its promotion by the next full rollout (0.20 Standard: a
canary itself, smoke-tested at 0 %, then promoted), and the canary
refused in one line on 0.16 in Standard mode."""

import re
import time

import pytest

from components.lib.deploy.model_repository import versions
from tests.doubles.k8s import KubeAPI, point_clients_at, shipped_rules
from tests.doubles.k8s.admission import ENFORCE
from tests.doubles.k8s.kserve_operator import KServeOperator, cluster, process_pods
from tests.doubles.k8s.network import Network
from tests.helpers.kubeflow_components import run_deploy_model_on_kserve

DEFAULT_MODES = {"knative": "Serverless", "standard": "Standard"}  # the config map's defaultDeploymentMode
FAULT_RATE = 0.2
RETRY_LINE = re.compile(
    r"Kubernetes API: (HTTP (429|500|503) [A-Za-z ]+|connection lost \([A-Za-z]+\)); retrying in \d+\.\d s \([1-7]/7\)"
)


@pytest.fixture
def kserve_release(request, monkeypatch, tmp_path, capsys):
    """`(version, mode, seed)` -> the double, the claim's folder, and a function returning the step's printed lines
    since the last call; every wait of the step cut to at most 50 ms."""
    version, mode, seed = request.param
    volume = tmp_path / "volume"
    network = Network()
    namespaces = {"ml": {ENFORCE: "restricted"}}
    operator = KServeOperator(
        network,
        process_pods({"tfpipe": str(volume)}, {"tfpipe/serving:dev": "serving.Dockerfile"}, namespaces=namespaces),
        version=version,
        default_mode=DEFAULT_MODES[mode],
    )
    api = KubeAPI(
        controllers=[operator],
        rbac=shipped_rules(),
        namespaces=namespaces,
        fault_rate=FAULT_RATE,
        fault_seed=seed,
        retry_after=0,
        **cluster(version, DEFAULT_MODES[mode]),
    )
    point_clients_at(api, monkeypatch, tmp_path / "home")
    for key, value in network.environ().items():
        monkeypatch.setenv(key, value)
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: real_sleep(min(s, 0.05)))

    def printed() -> list[str]:
        lines = capsys.readouterr().out.splitlines()
        assert [line for line in lines if line.startswith("Kubernetes API: ") and not RETRY_LINE.fullmatch(line)] == []
        return [line for line in lines if not line.startswith(("Kubernetes API: ", "InferenceService ml/iris: "))]

    yield api, volume, printed
    api.close()
    network.close()


def deploy(volume, model, traffic=100, tmp=None):
    return run_deploy_model_on_kserve(volume, model / "model", model.parent / "data", "iris", traffic=traffic, tmp=tmp)


def isvc(api) -> dict:
    return api.get("inferenceservices", "iris", "ml")


HONOURED = [("0.16", "knative", 1), ("0.20", "knative", 2), ("0.20", "standard", 3)]


@pytest.mark.e2e
@pytest.mark.parametrize("kserve_release", HONOURED, indirect=True, ids=lambda p: f"{p[0]}-{p[1]}")
def test_a_rollout_a_canary_and_its_promotion_through_failing_requests_in_a_restricted_namespace(
    kserve_release, iris_model, tmp_path
):
    api, volume, printed = kserve_release
    first, outputs, record = deploy(volume, iris_model, tmp=tmp_path)
    mode = record["deployment_mode"]
    standard = mode == "standard"
    stable = "iris-predictor" if standard else "iris-predictor-00001"
    assert (record["revision"], record["canary"], outputs.version) == (stable, False, 1)
    assert record["smoke"]["signatures"] == ["serving_default"]
    assert printed() == [
        "created InferenceService ml/iris",
        f"InferenceService ml/iris runs in KServe's {mode.capitalize()} mode",
        f"InferenceService ml/iris serves {'Deployment' if standard else 'revision'} {stable} at "
        f"http://{'' if standard else 'latest-'}iris-predictor.ml.svc.cluster.local",
        f"serving iris version 1 on ml/iris: {record['url']}",
    ]

    _, outputs, record = deploy(volume, iris_model, traffic=30, tmp=tmp_path)
    canary = "iris-v2-predictor" if standard else "iris-predictor-00002"
    assert (record["revision"], record["canary"], outputs.version) == (canary, True, 2)
    if standard:
        assert isvc(api)["status"]["canaryStatuses"] == [{"name": "v2", "ready": True, "trafficPercent": 30}]
        assert api.get("deployments", "iris-v2-predictor", "ml") is not None
    else:
        assert {t["revisionName"]: t["percent"] for t in record["traffic"]} == {canary: 30, stable: 70}
    assert printed()[-2:] == [
        f"InferenceService ml/iris serves {'Deployment' if standard else 'revision'} {canary} at "
        f"http://{canary if standard else 'latest-iris-predictor'}.ml.svc.cluster.local (30 % canary)",
        f"serving iris version 2 on ml/iris: {record['url']}",
    ]

    _, outputs, record = deploy(volume, iris_model, tmp=tmp_path)  # the next run promotes its version to 100 %
    promoted = "iris-v3-predictor" if standard else "iris-predictor-00003"  # 0.20 Standard: a canary, promoted
    assert (record["revision"], record["canary"], outputs.version) == (promoted, False, 3)
    spec = isvc(api)["spec"]
    assert "canary" not in spec and "canaryTrafficPercent" not in spec["predictor"]
    if standard:
        assert [api.get("deployments", d, "ml") is None for d in ("iris-predictor", "iris-v2-predictor")] == [
            True,
            True,
        ]
        assert spec["predictor"]["name"] == "v3" and "canaryStatuses" not in isvc(api)["status"]
    else:
        assert {t["revisionName"]: t["percent"] for t in record["traffic"]} == {promoted: 100}
        assert record["deleted_revisions"] == ["iris-predictor-00001"]  # keep_previous 1
    assert versions(str(volume / "model-repository"), "iris") == [1, 2, 3]
    assert [r for r in api.requests if r.fault] != []  # the faults were met, and survived


@pytest.mark.e2e
@pytest.mark.parametrize("kserve_release", [("0.16", "standard", 4)], indirect=True, ids=["0.16-standard"])
def test_a_canary_on_0_16_in_standard_mode_is_refused_in_one_line_through_failing_requests(
    kserve_release, iris_model, tmp_path
):
    api, volume, printed = kserve_release
    deploy(volume, iris_model, tmp=tmp_path)
    printed()
    before = isvc(api)
    with pytest.raises(ValueError) as refused:
        deploy(volume, iris_model, traffic=30, tmp=tmp_path)
    assert str(refused.value) == (
        "InferenceService ml/iris runs in KServe's Standard mode, where this cluster's KServe cannot honour a "
        "canary: it ignores canaryTrafficPercent and its InferenceService has no spec.canary (KServe 0.20 adds it); "
        "set traffic_percentage to 100, or serve in Knative mode"
    )
    assert printed() == [
        "InferenceService ml/iris runs in KServe's Standard mode",
        f"removed version 2 from the model repository: {refused.value}",
    ]
    assert isvc(api)["spec"] == before["spec"] and isvc(api)["metadata"]["generation"] == 1
    assert versions(str(volume / "model-repository"), "iris") == [1]
    assert [r for r in api.requests if r.fault] != []
