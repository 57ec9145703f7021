"""Pod Security where the cluster enforces it: KServe's double creates each predictor pod through the namespace's
`restricted` check, as the ReplicaSet controller does (the InferenceService itself is admitted); a refused pod
leaves the Deployment without it (Standard mode: ReplicaFailure FailedCreate; Knative mode: the revision fails), and
the serving step fails quoting the API server's refusal, then rolls back."""

import re

import pytest

from components.deploy_model_on_kserve import ServingFailed
from tests.contract.kubeflow.test_deploy_model_on_kserve import uri_predictor
from tests.contract.kubeflow.test_kserve_standard_cancel import URI, deploy, standard
from tests.doubles.k8s.admission import ENFORCE

__all__ = ["standard"]  # the fixture
VIOLATION = (
    r'pods "{pod}-[0-9a-f]{{10}}-[0-9a-f]{{5}}" is forbidden: violates PodSecurity "restricted:latest": '
    r'allowPrivilegeEscalation != false \(container "kserve-container" must set '
    r"securityContext.allowPrivilegeEscalation=false\)"
)


def privileged(spec: dict) -> dict:
    """The predictor with its container allowed to escalate privileges."""
    (container,) = spec["containers"]
    return {
        **spec,
        "containers": [
            {**container, "securityContext": {**container["securityContext"], "allowPrivilegeEscalation": True}}
        ],
    }


@pytest.mark.parametrize(
    "version, default_mode, pod, failure",
    [
        (
            "0.16",
            "Standard",
            "digits-predictor",
            r"Deployment digits-predictor cannot create its pods \(FailedCreate\): ",
        ),
        (
            "0.16",
            "Serverless",
            "digits-predictor-00002-deployment",
            r'PredictorConfigurationReady=False \(RevisionFailed\): Revision "digits-predictor-00002" failed with message: ',
        ),
    ],
)
def test_a_predictor_pod_refused_by_pod_security_fails_the_step_quoting_the_refusal(
    standard, monkeypatch, version, default_mode, pod, failure
):
    from tests.contract.kubeflow import test_deploy_on_kserve_modes  # its deploy builds the predictor

    build, _ = standard
    api = build(version, default_mode)
    api.namespaces = {"ml": {ENFORCE: "restricted"}}
    deploy(api, 1)
    monkeypatch.setattr(test_deploy_on_kserve_modes, "uri_predictor", lambda uri: privileged(uri_predictor(uri)))
    with pytest.raises(ServingFailed) as failed:
        deploy(api, 2)
    assert re.search(failure + VIOLATION.format(pod=pod), str(failed.value)), str(failed.value)
    isvc = api.get("inferenceservices", "digits", "ml")
    assert isvc["spec"]["predictor"]["containers"][0]["env"][0]["value"] == URI.format(1)
