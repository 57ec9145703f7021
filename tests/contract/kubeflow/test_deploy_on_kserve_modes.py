"""The serving step on KServe 0.16 and 0.20 in Knative and Standard mode (tests/doubles/k8s/kserve_operator.py):
the mode detected from the InferenceService's status, a canary refused in one line where the cluster cannot honour
it, 0.20's spec.canary in Standard mode, a Standard-mode rollout without Knative revisions, and the rollback."""

import pytest

from components.deploy_model_on_kserve import ServingFailed, deploy_to_kserve
from components.lib.kube import api as kube
from tests.contract.kubeflow.test_deploy_model_on_kserve import CHECK, _uri, classify, uri_predictor
from tests.doubles.k8s import KubeAPI, shipped_rules
from tests.doubles.k8s.kserve_operator import KServeOperator, cluster
from tests.doubles.k8s.network import Network
from tests.doubles.k8s.pods import FakePod

MODES = {"knative": "Serverless", "standard": "Standard"}  # the config map's defaultDeploymentMode


@pytest.fixture
def make(monkeypatch):
    made = []

    def build(version, mode, modes=None):
        network = Network()
        modes = modes if modes is not None else {}
        operator = KServeOperator(
            network,
            lambda isvc, name, spec: FakePod(classify, modes.get(_uri(spec), "ok")),
            version=version,
            default_mode=MODES[mode],
        )
        api = KubeAPI(controllers=[operator], rbac=shipped_rules(), **cluster(version, MODES[mode]))
        for key, value in network.environ().items():
            monkeypatch.setenv(key, value)
        made.append((api, network))
        return api

    yield build
    for api, network in made:
        api.close()
        network.close()


def deploy(api, version, traffic=100, lines=None, **overrides):
    return deploy_to_kserve(
        kube.api_client(api.url),
        name="digits",
        namespace="ml",
        spec_predictor=uri_predictor(f"pvc://tfpipe/model-repository/digits/{version}"),
        traffic_percentage=traffic,
        model_name="digits",
        checks=[CHECK],
        labels={"tfpipe/model-version": str(version)},
        variant=f"v{version}",
        timeout_seconds=5,
        **{"poll_seconds": 0.02, "log": (lines if lines is not None else []).append, **overrides},
    )


def isvc(api):
    return api.get("inferenceservices", "digits", "ml")


@pytest.mark.parametrize("version", ["0.16", "0.20"])
@pytest.mark.parametrize("mode", ["knative", "standard"])
def test_the_mode_is_detected_from_the_status_and_logged(make, version, mode):
    api = make(version, mode)
    lines = []
    info = deploy(api, 1, lines=lines)
    assert info["deployment_mode"] == mode
    assert (
        "InferenceService ml/digits runs in KServe's " + {"knative": "Knative", "standard": "Standard"}[mode] + " mode"
        in lines
    )
    revisions = [r for r in api.requests if "/serving.knative.dev/" in r.path and r.path.endswith("/revisions")]
    assert bool(revisions) == (mode == "knative")  # no revisions API in Standard mode


def test_a_required_mode_the_existing_service_does_not_run_is_refused_before_any_change(make):
    api = make("0.16", "knative")
    deploy(api, 1)
    patches = len(api.calls("PATCH"))
    with pytest.raises(
        ValueError,
        match=r"^InferenceService ml/digits runs in KServe's Knative mode, not standard as platform.kubeflow.serving_mode says",
    ):
        deploy(api, 2, serving_mode="standard")
    assert len(api.calls("PATCH")) == patches


def test_a_canary_in_standard_mode_before_0_20_is_refused_in_one_line_and_nothing_changes(make):
    api = make("0.16", "standard")
    deploy(api, 1)
    spec = isvc(api)["spec"]
    with pytest.raises(ValueError) as e:
        deploy(api, 2, traffic=20)
    assert str(e.value) == (
        "InferenceService ml/digits runs in KServe's Standard mode, where this cluster's KServe cannot honour a "
        "canary: it ignores canaryTrafficPercent and its InferenceService has no spec.canary (KServe 0.20 adds it); "
        "set traffic_percentage to 100, or serve in Knative mode"
    )
    assert isvc(api)["spec"] == spec
    (refused,) = [r for r in api.calls("PATCH")]
    assert refused.query.get("fieldValidation") == ["Strict"]


def test_a_canary_on_0_20_in_standard_mode_is_a_spec_canary_smoke_tested_before_its_share(make):
    api = make("0.20", "standard")
    deploy(api, 1)
    info = deploy(api, 2, traffic=20)
    assert info["canary"] and info["revision"] == "digits-v2-predictor"
    assert info["smoke_url"] == "http://digits-v2-predictor.ml.svc.cluster.local"
    bodies = [r.body for r in api.calls("PATCH")]
    assert (
        bodies[0]["spec"]["canary"][0]["trafficPercent"] == 0
        and bodies[-1]["spec"]["canary"][0]["trafficPercent"] == 20
    )
    assert bodies[0]["metadata"]["annotations"] == {"serving.kserve.io/deploymentMode": "Standard"}
    assert isvc(api)["status"]["canaryStatuses"] == [{"name": "v2", "ready": True, "trafficPercent": 20}]
    assert _uri(isvc(api)["spec"]["predictor"]) == "pvc://tfpipe/model-repository/digits/1"  # the stable one


@pytest.mark.parametrize("version", ["0.16", "0.20"])
def test_a_standard_mode_rollout_replaces_the_pods_and_a_failed_one_is_rolled_back(make, version):
    modes = {}
    api = make(version, "standard", modes)
    deploy(api, 1)
    info = deploy(api, 2)
    assert info["revision"] == "digits-predictor" and not info["canary"] and info["deleted_revisions"] == []
    deployment = api.get("deployments", "digits-predictor", "ml")
    assert _uri(deployment["spec"]["template"]["spec"]) == "pvc://tfpipe/model-repository/digits/2"
    modes["pvc://tfpipe/model-repository/digits/3"] = "fail"
    with pytest.raises(
        ServingFailed, match=r"PredictorReady=False \(ProgressDeadlineExceeded\)|BlockedByFailedLoad"
    ) as e:
        deploy(api, 3)
    assert "restored the previous predictor of InferenceService ml/digits (Deployment digits-predictor)" in str(e.value)
    assert _uri(isvc(api)["spec"]["predictor"]) == "pvc://tfpipe/model-repository/digits/2"
    assert not [r for r in api.requests if "revisions" in r.path]
