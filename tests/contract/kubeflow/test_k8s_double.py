"""The strict Kubernetes API double refuses what the API server and the operators' webhooks refuse: schemas (unknown
fields, types, metadata), admission rules, patch content types, the status subresource, resourceVersion conflicts,
foreground deletion and RBAC. Each rule is exercised through the official client, as the steps use it."""

import json

import pytest
from kubernetes.client.exceptions import ApiException

from components.lib.kube import api as kube
from tests.doubles.k8s import KubeAPI, admission, schema, shipped_rules
from tests.doubles.k8s.katib import INJECTION
from tests.doubles.k8s.server import SCHEMAS

INSTALLED = {
    "kubeflow.org/v1": {"tfjobs": "TFJob"},
    "kubeflow.org/v1beta1": {"experiments": "Experiment"},
    "serving.kserve.io/v1beta1": {"inferenceservices": "InferenceService"},
}


@pytest.fixture
def api():
    server = KubeAPI(installed=dict(INSTALLED), namespaces={"ml": {INJECTION: "enabled"}, "bare": {}})
    yield server
    server.close()


def objects(server):
    return kube.custom(kube.api_client(server.url))


def tfjob(name="train", **spec):
    container = {"name": "tensorflow", "image": "example.com/trainer:1"}
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {"Chief": replica}, **spec},
    }


def isvc(name="digits", predictor=None):
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"predictor": predictor or {"containers": [{"name": "kserve-container", "image": "example.com/s:1"}]}},
    }


def refused(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as e:
        call()
    return e.value.status, json.loads(e.value.body)["message"]


def create(server, body, plural="tfjobs", ns="ml"):
    group, version = body["apiVersion"].split("/")
    return objects(server).create_namespaced_custom_object(group, version, ns, plural, body)


def test_every_vendored_schema_names_its_source_and_its_cel_rules_are_ported():
    for filename in SCHEMAS.values():
        loaded = schema.custom_schema(filename)
        assert set(loaded.source) == {"repository", "ref", "commit", "path"} and len(loaded.source["commit"]) == 40
        ported = admission.PORTED_CEL.get(filename, {})
        assert {c["path"]: c["rule"] for c in loaded.cel} == ported, f"{filename}: port its CEL rules to admission.py"


@pytest.mark.parametrize(
    "body, plural, message",
    [
        (tfjob(runPolicy={"backoffLimits": 3}), "tfjobs", "spec.runPolicy: unknown field 'backoffLimits'"),
        (tfjob(runPolicy={"backoffLimit": "3"}), "tfjobs", "spec.runPolicy.backoffLimit: '3' is not of type 'integer'"),
        (
            isvc(predictor={"containers": [{"name": "kserve-container", "image": "i", "envs": []}]}),
            "inferenceservices",
            "unknown field 'envs'",
        ),
        (
            isvc(predictor={"minReplica": 1, "containers": [{"name": "c", "image": "i"}]}),
            "inferenceservices",
            "spec.predictor: unknown field 'minReplica'",
        ),
        ({**tfjob(), "metadata": {"name": "Train"}}, "tfjobs", "metadata.name: Invalid value: 'Train'"),
        (
            {**tfjob(), "metadata": {"name": "t", "labels": {"run": "a b"}}},
            "tfjobs",
            "metadata.labels: Invalid value: 'a b'",
        ),
    ],
)
def test_what_the_schemas_refuse(api, body, plural, message):
    code, text = refused(lambda: create(api, body, plural))
    assert code == 422 and message in text


def test_katibs_go_types_refuse_a_field_they_do_not_have(api):
    from components.lib.study.spec import DEFAULT_STUDY
    from components.tune_on_katib import experiment

    body = experiment("tune", "ml", DEFAULT_STUDY, "example.com/t:1", [], "/mnt/t/trials", {}, "tfpipe", "/mnt/t")
    body["spec"]["maxFailedTrialCounts"] = 3
    code, text = refused(lambda: create(api, body, "experiments"))
    assert code == 422 and "spec: unknown field 'maxFailedTrialCounts'" in text
    del body["spec"]["maxFailedTrialCounts"]
    assert create(api, body, "experiments")["spec"]["parallelTrialCount"] == 2


@pytest.mark.parametrize(
    "body, plural, ns, message",
    [
        (
            {
                **tfjob(),
                "spec": {
                    "tfReplicaSpecs": {
                        "Chief": {"template": {"spec": {"containers": [{"name": "main", "image": "i"}]}}}
                    }
                },
            },
            "tfjobs",
            "ml",
            'admission webhook "validator.tfjob.training-operator.kubeflow.org" denied the request: '
            "spec.tfReplicaSpecs[Chief].template.spec.containers: Required value: must have at least one container with name tensorflow",
        ),
        (
            {**tfjob(), "metadata": {"name": "a.b"}},
            "tfjobs",
            "ml",
            'metadata.name: Invalid value: "a.b": should match: a DNS-1035 label',
        ),
        (
            isvc(
                predictor={
                    "model": {"modelFormat": {"name": "tensorflow"}},
                    "containers": [{"name": "kserve-container", "image": "i"}],
                }
            ),
            "inferenceservices",
            "ml",
            "exactly one of [SKLearn, XGBoost, Tensorflow, PyTorch, Triton, ONNX, HuggingFace, PMML, LightGBM, Paddle, Model, WorkerSpec, PodSpec] must be specified in PredictorSpec",
        ),
        (
            isvc(predictor={"minReplicas": 3, "maxReplicas": 2, "containers": [{"name": "c", "image": "i"}]}),
            "inferenceservices",
            "ml",
            "'MinReplicas' cannot be greater than MaxReplicas",
        ),
    ],
)
def test_what_the_operators_webhooks_deny(api, body, plural, ns, message):
    code, text = refused(lambda: create(api, body, plural, ns))
    assert code == 403 and message in text


def test_katibs_webhook_needs_the_collector_label_and_consistent_counts(api):
    from components.lib.study.spec import DEFAULT_STUDY
    from components.tune_on_katib import experiment

    body = experiment("tune", "bare", DEFAULT_STUDY, "example.com/t:1", [], "/mnt/t/trials", {}, "tfpipe", "/mnt/t")
    code, text = refused(lambda: create(api, body, "experiments", "bare"))
    assert code == 403 and 'the namespace lacks label "katib.kubeflow.org/metrics-collector-injection: enabled"' in text
    body = experiment("tune", "ml", DEFAULT_STUDY, "example.com/t:1", [], "/mnt/t/trials", {}, "tfpipe", "/mnt/t")
    body["spec"]["parallelTrialCount"] = 9
    code, text = refused(lambda: create(api, body, "experiments"))
    assert "spec.parallelTrialCount: Invalid value: 9: should be less than or equal to spec.maxTrialCount" in text
    body["spec"]["parallelTrialCount"] = 2
    body["spec"]["trialTemplate"]["trialParameters"].pop()  # trialName: its placeholder is then undefined
    code, text = refused(lambda: create(api, body, "experiments"))
    assert "['${trialParameters.trialName}'" in text and "not found in spec.trialParameters" in text


def test_kserves_defaulter_names_the_container_and_fills_its_resources(api):
    created = create(api, isvc(predictor={"containers": [{"name": "server", "image": "i"}]}), "inferenceservices")
    (container,) = created["spec"]["predictor"]["containers"]
    assert container["name"] == "kserve-container"
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }


def test_patches_by_content_type_and_the_status_subresource(api):
    client = objects(api)
    created = create(api, tfjob())
    version = created["metadata"]["resourceVersion"]
    # a merge patch that tries to write the status changes only what is not status; generation counts spec changes
    patched = client.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "tfjobs", "train", {"spec": {"runPolicy": {"backoffLimit": 2}}, "status": {"x": 1}}
    )
    assert "status" not in patched and patched["metadata"]["generation"] == 2
    labelled = client.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "tfjobs", "train", {"metadata": {"labels": {"a": "b"}}}
    )
    assert labelled["metadata"]["generation"] == 2 and labelled["metadata"]["resourceVersion"] != version
    same = client.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "tfjobs", "train", {"metadata": {"labels": {"a": "b"}}}
    )
    assert same["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]  # a no-op
    status = client.patch_namespaced_custom_object_status(
        "kubeflow.org",
        "v1",
        "ml",
        "tfjobs",
        "train",
        {"status": {"conditions": [{"type": "Created", "status": "True"}]}},
    )
    assert status["status"]["conditions"][0]["type"] == "Created" and status["metadata"]["generation"] == 2
    # JSON patch (RFC 6902) when the client sends a list
    jsonpatched = client.api_client.call_api(
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/train",
        "PATCH",
        header_params={"Content-Type": "application/json-patch+json", "Accept": "application/json"},
        body=[{"op": "replace", "path": "/spec/runPolicy/backoffLimit", "value": 5}],
        response_type="object",
        _return_http_data_only=True,
    )
    assert jsonpatched["spec"]["runPolicy"]["backoffLimit"] == 5
    code, text = refused(
        lambda: client.api_client.call_api(
            "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/train",
            "PATCH",
            header_params={"Content-Type": "application/strategic-merge-patch+json"},
            body={"spec": {}},
            response_type="object",
        )
    )
    assert (
        code == 415
        and "accepted media types include: application/json-patch+json, application/merge-patch+json" in text
    )


def test_updates_need_the_current_resource_version(api):
    client = objects(api)
    created = create(api, tfjob())
    stale = dict(created, spec={**created["spec"], "runPolicy": {"backoffLimit": 1}})
    client.replace_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", "train", stale)
    code, text = refused(
        lambda: client.replace_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", "train", stale)
    )
    assert code == 409 and "the object has been modified; please apply your changes to the latest version" in text
    unversioned = {**stale, "metadata": {"name": "train"}}
    code, text = refused(
        lambda: client.replace_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", "train", unversioned)
    )
    assert code == 422 and "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" in text


def test_foreground_deletion_keeps_the_object_until_its_dependents_are_gone(api):
    api.foreground_seconds = 0.5
    create(api, tfjob())
    assert kube.delete(kube.api_client(api.url), "kubeflow.org", "v1", "ml", "tfjobs", "train")
    terminating = objects(api).get_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", "train")
    assert (
        terminating["metadata"]["finalizers"] == ["foregroundDeletion"]
        and "deletionTimestamp" in terminating["metadata"]
    )
    code, text = refused(lambda: create(api, tfjob()))
    assert code == 409 and 'tfjobs.kubeflow.org "train" already exists' in text
    kube.poll(lambda: api.get("tfjobs", "train", "ml"), lambda o: True if o is None else None, 0.05, 5, "deletion")
    assert create(api, tfjob())["metadata"]["generation"] == 1


def test_rbac_allows_only_what_the_shipped_role_grants(api):
    api.rbac = shipped_rules()
    create(api, tfjob())
    code, text = refused(
        lambda: objects(api).replace_namespaced_custom_object("kubeflow.org", "v1", "ml", "tfjobs", "train", tfjob())
    )
    assert code == 403 and text == (
        'tfjobs.kubeflow.org "train" is forbidden: User "system:serviceaccount:kubeflow:pipeline-runner" cannot '
        'update resource "tfjobs" in API group "kubeflow.org" in the namespace "ml"'
    )


def test_core_objects_against_kubernetes_schemas():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i", "commands": ["x"]}]},
    }
    assert schema.core_errors(pod) == ["spec.containers[0]: unknown field 'commands' (not in the schema)"]
    pod["spec"]["containers"][0] = {"name": "c", "image": "i", "command": ["x"]}
    assert schema.core_errors(pod) == []
