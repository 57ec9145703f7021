"""The serving step on KServe 0.16 and 0.20 in Knative and Standard mode (tests/doubles/k8s/kserve_operator.py):
the mode detected from the InferenceService's status, a canary refused in one line where the cluster cannot honour
it, 0.20's spec.canary in Standard mode (a canary, and a full rollout smoke-tested as a canary then promoted), a
Standard-mode rollout without Knative revisions before 0.20, and the rollback."""

import pytest
import requests

from components.deploy_model_on_kserve import ServingFailed, canary_spec, deploy_to_kserve, version_discarder
from components.lib.deploy.model_repository import versions
from components.lib.kube import api as kube
from tests.contract.kubeflow.test_deploy_model_on_kserve import CHECK, _uri, classify, repository, uri_predictor
from tests.doubles.k8s import KubeAPI, shipped_rules
from tests.doubles.k8s.kserve_operator import KServeOperator, cluster
from tests.doubles.k8s.network import Network
from tests.doubles.k8s.pods import FakePod

__all__ = ["repository"]  # the fixture
MODES = {"knative": "Serverless", "standard": "Standard"}  # the config map's defaultDeploymentMode
URI = "pvc://tfpipe/model-repository/digits/{}"
ISVC_PATH = "/apis/serving.kserve.io/v1beta1/namespaces/ml/inferenceservices/digits"
DEPLOYMENTS = "/apis/apps/v1/namespaces/ml/deployments/"


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
        spec_predictor=uri_predictor(URI.format(version)),
        traffic_percentage=traffic,
        model_name="digits",
        checks=[CHECK],
        labels={"tfpipe/model-version": str(version)},
        variant=f"v{version}",
        **{
            "timeout_seconds": 5,
            "poll_seconds": 0.02,
            "log": (lines if lines is not None else []).append,
            **overrides,
        },
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


def test_a_standard_mode_rollout_before_0_20_replaces_the_pods_says_why_it_serves_untested_and_a_failed_one_is_rolled_back(
    make,
):
    modes = {}
    api = make("0.16", "standard", modes)
    deploy(api, 1)
    lines = []
    info = deploy(api, 2, lines=lines)
    assert [line for line in lines if not line.startswith("InferenceService ml/digits: ")] == [
        "InferenceService ml/digits runs in KServe's Standard mode",
        "updated InferenceService ml/digits: its Deployment rolls the new version out, and it serves before its smoke "
        "test: in Standard mode this cluster's KServe splits no traffic and its InferenceService has no spec.canary "
        "(KServe 0.20 adds it), so nothing can hold the new version back; a failed smoke test restores the previous "
        "predictor",
        "InferenceService ml/digits serves Deployment digits-predictor at http://digits-predictor.ml.svc.cluster.local",
    ]
    refused, rollout = api.calls("PATCH")[-2:]  # the spec.canary this KServe lacks, then the predictor
    assert refused.query.get("fieldValidation") == ["Strict"] and "canary" in refused.body["spec"]
    assert _uri(rollout.body["spec"]["predictor"]) == URI.format(2)
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


def in_order(requests_made) -> list:
    """Each write as (method, path, query, body), the paths read between two writes as a set."""
    out: list = []
    for r in requests_made:
        if r.method != "GET":
            out.append((r.method, r.path, r.query, r.body))
        elif out and isinstance(out[-1], set):
            out[-1].add(r.path)
        else:
            out.append({r.path})
    return out


def stable_state(api) -> tuple[dict, dict]:
    """The stable predictor as stored, and its Deployment's spec and generation."""
    deployment = api.get("deployments", "digits-predictor", "ml")
    return isvc(api)["spec"]["predictor"], {"spec": deployment["spec"], **deployment["metadata"]}


def test_a_full_rollout_on_0_20_in_standard_mode_is_smoke_tested_as_a_canary_then_promoted(make):
    api = make("0.20", "standard")
    deploy(api, 1)
    stable_before, seen, lines, start = stable_state(api), [], [], len(api.requests)

    def post(url, **kwargs):
        seen.append((url, stable_state(api) == stable_before))
        return requests.post(url, **kwargs)

    info = deploy(api, 2, lines=lines, post=post)
    assert seen == [("http://digits-v2-predictor.ml.svc.cluster.local/v1/models/digits:predict", True)]
    assert in_order(api.requests[start:]) == [
        {"/apis/serving.kserve.io/v1beta1", "/api/v1/namespaces/ml", ISVC_PATH},
        (
            "PATCH",
            ISVC_PATH,
            {"fieldValidation": ["Strict"]},
            {
                "metadata": {"annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
                "spec": {"canary": canary_spec(uri_predictor(URI.format(2)), "v2", 0)},
            },
        ),
        {ISVC_PATH, DEPLOYMENTS + "digits-v2-predictor"},  # ready at 0 %: the smoke test, then the promotion
        (
            "PATCH",
            ISVC_PATH,
            {},
            {
                "metadata": {"labels": {"tfpipe/model-version": "2"}},
                "spec": {"predictor": {**uri_predictor(URI.format(2)), "name": "v2"}, "canary": None},
            },
        ),
        {ISVC_PATH, DEPLOYMENTS + "digits-v2-predictor", DEPLOYMENTS + "digits-predictor"},
    ]
    assert [line for line in lines if not line.startswith("InferenceService ml/digits: ")] == [
        "InferenceService ml/digits runs in KServe's Standard mode",
        "added the canary v2 to InferenceService ml/digits with no traffic (trafficPercent 0) until it has answered",
        "promoted the canary v2 on InferenceService ml/digits: spec.predictor is now its predictor, spec.canary removed",
        "InferenceService ml/digits serves Deployment digits-v2-predictor at "
        "http://digits-v2-predictor.ml.svc.cluster.local",
    ]
    assert (info["revision"], info["canary"], info["smoke_url"]) == (
        "digits-v2-predictor",
        False,
        "http://digits-v2-predictor.ml.svc.cluster.local",
    )
    found = isvc(api)
    assert "canary" not in found["spec"] and "canaryStatuses" not in found["status"]
    assert found["spec"]["predictor"]["name"] == "v2" and _uri(found["spec"]["predictor"]) == URI.format(2)
    assert api.get("deployments", "digits-predictor", "ml") is None  # KServe deletes the previous stable one
    deployment = api.get("deployments", "digits-v2-predictor", "ml")
    assert _uri(deployment["spec"]["template"]["spec"]) == URI.format(2)
    assert deployment["spec"]["replicas"] == deployment["status"]["updatedReplicas"] == 1


def test_a_full_rollout_on_0_20_in_standard_mode_that_fails_its_smoke_test_never_touches_the_stable_predictor(
    make, repository
):
    api = make("0.20", "standard", {URI.format(2): "wrong"})
    deploy(api, 1)
    stable_before, lines = stable_state(api), []
    with pytest.raises(ServingFailed) as e:
        deploy(api, 2, lines=lines, discard=version_discarder(repository, "digits", 2, lines.append))
    assert str(e.value) == (
        "InferenceService ml/digits did not serve the new version: smoke prediction on serving_default disagrees with "
        "the published model: [1 5 3] vs [0 4 2]; removed the canary v2 from InferenceService ml/digits; its stable "
        "predictor served all along"
    )
    assert [r.body for r in api.calls("PATCH")][-2:] == [
        {
            "metadata": {"annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
            "spec": {"canary": canary_spec(uri_predictor(URI.format(2)), "v2", 0)},
        },
        {"spec": {"canary": None}},
    ]
    assert stable_state(api) == stable_before
    assert "canary" not in isvc(api)["spec"] and api.get("deployments", "digits-v2-predictor", "ml") is None
    assert versions(repository, "digits") == [1]
    assert lines[-1] == (
        "removed version 2 from the model repository: InferenceService ml/digits did not serve it: smoke prediction "
        "on serving_default disagrees with the published model: [1 5 3] vs [0 4 2]"
    )
