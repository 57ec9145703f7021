"""KServe 0.16 to 0.19 refuse every update of an InferenceService annotated with a deprecated mode name
(`RawDeployment`, `Serverless`) once its status reports the new one (`Standard`, `Knative`): the serving step's
update sets the annotation to the mode the status reports (tests/doubles/k8s/kserve.py models the refusal)."""

import pytest

from components.deploy_model_on_kserve import MODE, inference_service
from components.lib.kube import api as kube
from tests.contract.kubeflow.test_deploy_model_on_kserve import _uri, uri_predictor
from tests.contract.kubeflow.test_kserve_standard_cancel import URI, deploy, standard

__all__ = ["standard"]  # the fixture


@pytest.mark.parametrize(
    "default_mode, alias, reported",
    [("Standard", "RawDeployment", "Standard"), ("Serverless", "Serverless", "Knative")],
)
def test_an_update_of_a_service_annotated_with_an_alias_sets_the_mode_the_status_reports(
    standard, default_mode, alias, reported
):
    build, _ = standard
    api = build("0.16", default_mode)
    body = inference_service("digits", "ml", uri_predictor(URI.format(1)))
    body["metadata"]["annotations"][MODE] = alias  # as a tool written for KServe 0.15 made it
    objects = kube.custom(kube.api_client(api.url))
    objects.create_namespaced_custom_object("serving.kserve.io", "v1beta1", "ml", "inferenceservices", body)
    kube.poll(
        lambda: api.get("inferenceservices", "digits", "ml"),
        lambda o: o if kube.condition(o, "Ready") else None,
        0.02,
        10,
        "the first predictor",
    )
    assert api.get("inferenceservices", "digits", "ml")["status"]["deploymentMode"] == reported
    info = deploy(api, 2)
    assert info["deployment_mode"] == reported.lower()
    modes = [(call.body.get("metadata") or {}).get("annotations", {}).get(MODE) for call in api.calls("PATCH")]
    assert modes and modes[0] == reported and set(modes) <= {reported, None}  # no update keeps the alias
    isvc = api.get("inferenceservices", "digits", "ml")
    assert isvc["metadata"]["annotations"][MODE] == reported and _uri(isvc["spec"]["predictor"]) == URI.format(2)
