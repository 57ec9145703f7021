"""The KServe double by version and mode, as KServe v0.15.2, v0.16.0 and v0.20.0's sources decide them: the mode
each InferenceService gets, the annotation values each version accepts, Standard mode's Deployments (no revisions,
canaryTrafficPercent ignored) and 0.20's spec.canary."""

import pytest
from kubernetes.client.exceptions import ApiException

from components.lib.kube import api as kube
from tests.doubles.k8s import KubeAPI, admission, schema
from tests.doubles.k8s.kserve_operator import SCHEMA_FILES, KServeOperator, cluster
from tests.doubles.k8s.network import Network
from tests.doubles.k8s.pods import FakePod

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
MODE = "serving.kserve.io/deploymentMode"


def body(name="digits", annotations=None, **spec):
    container = {
        "name": "kserve-container",
        "image": "example.com/serving:1",
        "env": [{"name": "STORAGE_URI", "value": "pvc://tfpipe/m/1"}],
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"predictor": {"minReplicas": 2, "containers": [container]}, **spec},
    }


@pytest.fixture
def kserve_cluster():
    made = []

    def make(version, default_mode="Serverless"):
        network = Network()
        operator = KServeOperator(
            network, lambda isvc, name, spec: FakePod(lambda rows: [0]), version=version, default_mode=default_mode
        )
        api = KubeAPI(controllers=[operator], **cluster(version, default_mode))
        made.append((api, network))
        return api, kube.custom(kube.api_client(api.url))

    yield make
    for api, network in made:
        api.close()
        network.close()


def settled(api, objects, name="digits"):
    return kube.poll(
        lambda: objects.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, name),
        lambda o: o if kube.condition(o, "Ready") else None,
        0.02,
        5,
        name,
    )


def test_the_vendored_kserve_schemas_name_their_source_and_differ_where_the_releases_do():
    canary = {}
    for version, filename in SCHEMA_FILES.items():
        loaded = schema.custom_schema(filename)
        assert loaded.source["ref"].startswith(f"v{version}") and len(loaded.source["commit"]) == 40
        assert {c["path"]: c["rule"] for c in loaded.cel} == admission.PORTED_CEL[filename]
        canary[version] = "canary" in loaded.validator.schema["properties"]["spec"]["properties"]
    assert canary == {"0.15": False, "0.16": False, "0.20": True}


@pytest.mark.parametrize(
    "version, default_mode, annotation, mode",
    [
        ("0.15", "Serverless", None, "Serverless"),
        ("0.15", "Serverless", "RawDeployment", "RawDeployment"),
        ("0.15", "Serverless", "Standard", "Serverless"),  # a name 0.15 does not know: the default
        ("0.15", "RawDeployment", None, "RawDeployment"),
        ("0.16", "Serverless", None, "Knative"),  # the shipped config map's alias, read as its new name
        ("0.16", "Serverless", "Standard", "Standard"),
        ("0.16", "Serverless", "RawDeployment", "Standard"),
        ("0.16", "Standard", None, "Standard"),
        ("0.20", "Serverless", "Knative", "Knative"),
        ("0.20", "RawDeployment", None, "Standard"),
    ],
)
def test_each_version_gives_the_mode_its_sources_give(kserve_cluster, version, default_mode, annotation, mode):
    api, objects = kserve_cluster(version, default_mode)
    objects.create_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, body(annotations={MODE: annotation} if annotation else {})
    )
    isvc = settled(api, objects)
    assert isvc["status"]["deploymentMode"] == mode
    standard = mode in ("Standard", "RawDeployment")
    assert [d["metadata"]["name"] for d in api.items("deployments")] == (["digits-predictor"] if standard else [])
    assert [r["metadata"]["name"] for r in api.items("revisions")] == ([] if standard else ["digits-predictor-00001"])


def test_on_0_16_an_alias_annotation_is_refused_every_update_once_the_status_has_the_new_name(kserve_cluster):
    api, objects = kserve_cluster("0.16")
    objects.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body(annotations={MODE: "RawDeployment"}))
    settled(api, objects)
    with pytest.raises(ApiException) as e:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, "ml", PLURAL, "digits", {"metadata": {"labels": {"a": "b"}}}
        )
    assert (
        e.value.status == 403 and "deploymentMode cannot be changed from 'Standard' to 'RawDeployment'" in e.value.body
    )


def test_standard_mode_ignores_canary_traffic_percent_and_rolls_the_deployment(kserve_cluster):
    api, objects = kserve_cluster("0.16", "Standard")
    objects.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body())
    first = settled(api, objects)
    assert first["metadata"]["annotations"] == {MODE: "Standard"}  # the defaulter's
    patch = body()["spec"]
    patch["predictor"]["canaryTrafficPercent"] = 10
    patch["predictor"]["containers"][0]["env"][0]["value"] = "pvc://tfpipe/m/2"
    objects.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "digits", {"spec": patch})
    deployment = kube.poll(
        lambda: api.get("deployments", "digits-predictor", "ml"),
        lambda d: d if d["status"]["observedGeneration"] == 2 and d["status"]["updatedReplicas"] == 2 else None,
        0.02,
        5,
        "rollout",
    )
    assert deployment["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "pvc://tfpipe/m/2"
    assert (
        api.items("revisions") == []
        and "traffic" not in api.get(PLURAL, "digits", "ml")["status"]["components"]["predictor"]
    )


@pytest.mark.parametrize("version", ["0.16", "0.20"])
def test_a_canary_is_a_second_deployment_on_0_20_and_unknown_before(kserve_cluster, version):
    api, objects = kserve_cluster(version, "Standard")
    objects.create_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, body())
    settled(api, objects)
    canary = {
        "predictor": {"name": "v2", "containers": body()["spec"]["predictor"]["containers"]},
        "trafficPercent": 50,
    }
    if version == "0.16":
        with pytest.raises(ApiException) as e:
            objects.patch_namespaced_custom_object(
                GROUP, VERSION, "ml", PLURAL, "digits", {"spec": {"canary": [canary]}}
            )
        assert e.value.status == 422 and "spec: unknown field 'canary'" in e.value.body
        return
    objects.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "digits", {"spec": {"canary": [canary]}})
    isvc = kube.poll(
        lambda: api.get(PLURAL, "digits", "ml"),
        lambda o: o if (o["status"].get("canaryStatuses") or [{}])[0].get("ready") else None,
        0.02,
        5,
        "canary",
    )
    assert isvc["status"]["canaryStatuses"] == [{"name": "v2", "ready": True, "trafficPercent": 50}]
    assert {d["metadata"]["name"]: d["spec"]["replicas"] for d in api.items("deployments")} == {
        "digits-predictor": 1,
        "digits-v2-predictor": 1,
    }
    objects.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "digits", {"spec": {"canary": None}})
    kube.poll(lambda: api.items("deployments"), lambda d: d if len(d) == 1 else None, 0.02, 5, "canary removed")
