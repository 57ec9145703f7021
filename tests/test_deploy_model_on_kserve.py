"""The kubeflow serving step against a Kubernetes API double: the exact InferenceService, its rollout (first deploy,
canary, full rollout with old revisions deleted), and the rollback when the new revision is not Ready, its model
does not load or the smoke prediction fails."""

import pytest

from components.deploy_model_on_kserve import (
    ServingFailed,
    deploy_to_kserve,
    inference_service,
    predictor,
    served_url,
    storage_uri,
)
from components.lib import kube
from tests.kube_api import KubeAPI

KSERVE = {
    "serving.kserve.io/v1beta1": {"inferenceservices": "InferenceService"},
    "serving.knative.dev/v1": {"revisions": "Revision"},
}
READY = {"type": "Ready", "status": "True"}
NOT_READY = {
    "type": "Ready",
    "status": "False",
    "reason": "RevisionFailed",
    "message": 'Revision "digits-predictor-00002" failed with message: container exited: 1.',
}
BATCH, EXPECTED = [[0.0] * 64, [1.0] * 64], [3, 7]


def uri_predictor(uri="pvc://tfpipe/model-repository/digits/2", **overrides):
    values = dict(
        kind="serving_image",
        uri=uri,
        model_name="digits",
        image="example.com/serving:1",
        resources={"requests": {"cpu": "1"}},
        min_replicas=1,
        max_replicas=3,
    )
    return predictor(**{**values, **overrides})


@pytest.fixture
def api_server():
    server = KubeAPI(installed=dict(KSERVE))
    answers = {"class_ids": EXPECTED, "status": 200}

    def predict(body):
        server.predicted.append(body)
        if answers["status"] != 200:
            return answers["status"], {"error": "model not loaded"}
        return 200, {
            "predictions": [{"class_id": c, "probabilities": [0.1]} for c in answers["class_ids"]],
            "deployedModelId": "",
        }

    server.predicted, server.answers = [], answers
    server.routes[("POST", "/v1/models/digits:predict")] = predict
    server.routes[("POST", "/latest/v1/models/digits:predict")] = predict
    yield server
    server.close()


def status(server, ready=True, generation=1, revision="digits-predictor-00001", traffic=None, extra=None):
    s = {
        "observedGeneration": generation,
        "url": "http://digits.ml.example.com",
        "address": {"url": server.url},
        "conditions": [READY if ready else NOT_READY],
        "components": {
            "predictor": {
                "latestCreatedRevision": revision,
                "latestReadyRevision": revision,
                "traffic": traffic or [{"revisionName": revision, "percent": 100, "latestRevision": True}],
            }
        },
    }
    return {**s, **(extra or {})}


def deploy(server, traffic=100, keep_previous=0, spec=None):
    return deploy_to_kserve(
        kube.api_client(server.url),
        name="digits",
        namespace="ml",
        spec_predictor=spec or uri_predictor(),
        traffic_percentage=traffic,
        model_name="digits",
        batch=BATCH,
        expected=EXPECTED,
        keep_previous=keep_previous,
        labels={"tfpipe/run-id": "r2"},
        poll_seconds=0,
        timeout_seconds=5,
        log=lambda m: None,
        sleep=lambda s: None,
    )


def test_storage_uri_of_a_repository_version():
    assert (
        storage_uri("/mnt/tfpipe/model-repository/digits/3", "tfpipe", "/mnt/tfpipe")
        == "pvc://tfpipe/model-repository/digits/3"
    )
    assert storage_uri("gs://bucket/repo/digits/3", "tfpipe", "/mnt/tfpipe") == "gs://bucket/repo/digits/3"
    with pytest.raises(ValueError, match="put the model repository on the shared volume"):
        storage_uri("/tmp/repo/digits/3", "tfpipe", "/mnt/tfpipe")


def test_inference_service_with_this_projects_serving_image():
    assert inference_service("digits", "ml", uri_predictor(service_account="server"), {"tfpipe/run-id": "r2"}) == {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": "digits",
            "namespace": "ml",
            "labels": {"tfpipe/run-id": "r2"},
            "annotations": {"serving.kserve.io/enable-tag-routing": "true"},
        },
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 3,
                "serviceAccountName": "server",
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": "example.com/serving:1",
                        "env": [
                            {"name": "STORAGE_URI", "value": "pvc://tfpipe/model-repository/digits/2"},
                            {"name": "AIP_STORAGE_URI", "value": "/mnt/models"},
                            {"name": "AIP_HTTP_PORT", "value": "8080"},
                            {"name": "AIP_HEALTH_ROUTE", "value": "/v1/models/digits"},
                            {"name": "AIP_PREDICT_ROUTE", "value": "/v1/models/digits:predict"},
                        ],
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/v1/models/digits", "port": 8080}, "periodSeconds": 5},
                        "resources": {"requests": {"cpu": "1"}},
                    }
                ],
            }
        },
    }


def test_kserves_tensorflow_runtime_predictor():
    assert uri_predictor(kind="tensorflow", runtime_version="2.19.0") == {
        "minReplicas": 1,
        "maxReplicas": 3,
        "model": {
            "modelFormat": {"name": "tensorflow"},
            "storageUri": "pvc://tfpipe/model-repository/digits/2",
            "runtimeVersion": "2.19.0",
            "resources": {"requests": {"cpu": "1"}},
        },
    }


def test_first_deploy_creates_the_service_waits_for_ready_and_smoke_tests_it(api_server):
    api_server.scripts["inferenceservices"] = [
        {"conditions": [{"type": "Ready", "status": "Unknown"}]},
        status(api_server),
    ]
    info = deploy(api_server, traffic=10)  # nothing to canary against: all traffic
    (created,) = api_server.created("inferenceservices")
    assert created == inference_service("digits", "ml", uri_predictor(), {"tfpipe/run-id": "r2"})
    assert "canaryTrafficPercent" not in created["spec"]["predictor"]
    assert api_server.predicted == [{"instances": BATCH}]
    assert info["url"] == api_server.url and info["revision"] == "digits-predictor-00001" and not info["canary"]
    assert info["smoke"] == {"examples": 2, "class_ids": EXPECTED}


def test_canary_patches_the_predictor_and_smoke_tests_the_latest_revision(api_server):
    api_server.put(
        "serving.kserve.io/v1beta1",
        "ml",
        "inferenceservices",
        inference_service("digits", "ml", uri_predictor("pvc://tfpipe/model-repository/digits/1")),
    )
    traffic = [
        {"revisionName": "digits-predictor-00001", "percent": 90, "tag": "prev", "url": "http://x"},
        {
            "revisionName": "digits-predictor-00002",
            "percent": 10,
            "tag": "latest",
            "latestRevision": True,
            "url": f"{api_server.url}/latest",
        },
    ]
    api_server.scripts["inferenceservices"] = [
        status(api_server, generation=1),  # the rollback's reference read
        status(api_server, generation=2, revision="digits-predictor-00002", traffic=traffic),
    ]
    info = deploy(api_server, traffic=10)
    (patch,) = [r for r in api_server.calls("PATCH")]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["spec"]["predictor"] == {**uri_predictor(), "canaryTrafficPercent": 10}
    assert info["canary"] and info["url"] == f"{api_server.url}/latest" and info["deleted_revisions"] == []
    assert not api_server.calls("DELETE")  # the previous revision keeps 90 %


def test_full_rollout_deletes_older_revisions_but_keep_previous(api_server):
    api_server.put(
        "serving.kserve.io/v1beta1",
        "ml",
        "inferenceservices",
        {**inference_service("digits", "ml", {**uri_predictor(), "canaryTrafficPercent": 10})},
    )
    for n in (1, 2, 3):
        api_server.put(
            "serving.knative.dev/v1",
            "ml",
            "revisions",
            {
                "metadata": {
                    "name": f"digits-predictor-0000{n}",
                    "labels": {
                        "serving.kserve.io/inferenceservice": "digits",
                        "serving.knative.dev/configurationGeneration": str(n),
                    },
                }
            },
        )
    api_server.put(
        "serving.knative.dev/v1",
        "ml",
        "revisions",
        {"metadata": {"name": "other-predictor-00001", "labels": {"serving.kserve.io/inferenceservice": "other"}}},
    )
    api_server.scripts["inferenceservices"] = [
        status(api_server, generation=1),
        status(api_server, generation=2, revision="digits-predictor-00003"),
    ]
    info = deploy(api_server, traffic=100, keep_previous=1)
    (patch,) = api_server.calls("PATCH")
    assert patch.body["spec"]["predictor"]["canaryTrafficPercent"] is None  # removed: 100 % to the new revision
    assert info["deleted_revisions"] == ["digits-predictor-00001"]
    assert [r.path.rsplit("/", 1)[1] for r in api_server.calls("DELETE")] == ["digits-predictor-00001"]
    assert api_server.get("revisions", "other-predictor-00001", "ml")  # another service's revision is left alone


def test_a_failed_revision_restores_the_previous_predictor(api_server):
    old = uri_predictor("pvc://tfpipe/model-repository/digits/1")
    api_server.put("serving.kserve.io/v1beta1", "ml", "inferenceservices", inference_service("digits", "ml", old))
    api_server.scripts["inferenceservices"] = [status(api_server), status(api_server, ready=False, generation=2)]
    with pytest.raises(ServingFailed) as e:
        deploy(api_server, traffic=100)
    assert str(e.value) == (
        "InferenceService ml/digits did not serve the new version: Ready=False (RevisionFailed): Revision "
        '"digits-predictor-00002" failed with message: container exited: 1.; restored the previous predictor of '
        "InferenceService ml/digits (revision digits-predictor-00001)"
    )
    assert (
        api_server.objects[("serving.kserve.io/v1beta1", "ml", "inferenceservices", "digits")]["spec"]["predictor"]
        == old
    )  # traffic stays on (returns to) the previous model
    assert not api_server.predicted


def test_a_model_that_does_not_load_fails_fast(api_server):
    api_server.scripts["inferenceservices"] = [
        status(
            api_server,
            ready=False,
            extra={
                "modelStatus": {
                    "transitionStatus": "BlockedByFailedLoad",
                    "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "no saved_model.pb in /mnt/models"},
                }
            },
        )
    ]
    with pytest.raises(
        ServingFailed,
        match=r"the model did not load \(BlockedByFailedLoad\): no saved_model.pb in "
        r"/mnt/models; deleted InferenceService ml/digits \(it served nothing",
    ):
        deploy(api_server)
    assert not api_server.objects  # a first deploy that failed leaves nothing behind


def test_a_wrong_smoke_answer_rolls_back(api_server):
    old = uri_predictor("pvc://tfpipe/model-repository/digits/1")
    api_server.put("serving.kserve.io/v1beta1", "ml", "inferenceservices", inference_service("digits", "ml", old))
    api_server.scripts["inferenceservices"] = [status(api_server), status(api_server, generation=2)]
    api_server.answers["class_ids"] = [3, 1]
    with pytest.raises(
        ServingFailed, match=r"smoke prediction disagrees with the published model: \[3 1\] vs \[3, 7\]"
    ):
        deploy(api_server)
    assert (
        api_server.objects[("serving.kserve.io/v1beta1", "ml", "inferenceservices", "digits")]["spec"]["predictor"]
        == old
    )


def test_not_ready_in_time_rolls_back(api_server):
    api_server.scripts["inferenceservices"] = [{"conditions": [{"type": "Ready", "status": "Unknown"}]}]
    with pytest.raises(ServingFailed, match="new revision did not finish within 0 min; deleted InferenceService"):
        deploy_to_kserve(
            kube.api_client(api_server.url),
            name="digits",
            namespace="ml",
            spec_predictor=uri_predictor(),
            traffic_percentage=100,
            model_name="digits",
            batch=BATCH,
            expected=EXPECTED,
            poll_seconds=0,
            timeout_seconds=0,
            log=lambda m: None,
            sleep=lambda s: None,
        )


def test_kserve_missing_fails_at_once_naming_the_kind():
    server = KubeAPI(installed={})
    try:
        with pytest.raises(
            kube.EngineMissing,
            match=r"^the cluster has no InferenceService "
            r"\(inferenceservices.serving.kserve.io/v1beta1\): install KServe",
        ):
            deploy(server)
        assert [r.method for r in server.requests] == ["GET"]
    finally:
        server.close()


def test_served_url_prefers_the_latest_tag_then_the_cluster_address():
    assert served_url({"status": {"url": "http://a", "address": {"url": "http://b.svc"}}}) == "http://b.svc"
    assert served_url({"status": {"url": "http://a/"}}) == "http://a"
    assert (
        served_url(
            {
                "status": {
                    "url": "http://a",
                    "components": {"predictor": {"traffic": [{"tag": "latest", "url": "http://latest-a"}]}},
                }
            }
        )
        == "http://latest-a"
    )
