"""The kubeflow serving step through the strict Kubernetes API double and a KServe/Knative operator double: the
exact InferenceService, then the rollout as KServe performs it (revisions, traffic split, tags, rolled-out
revisions, KServe's status), the smoke test over the cluster's network, and the rollback on every kind of failure.
The component itself is driven end to end with the project's serving image as the predictor's process."""

import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from components.deploy_model_on_kserve import (
    ServingFailed,
    deploy_to_kserve,
    inference_service,
    predictor,
    smoke_url,
    storage_uri,
)
from components.lib.deploy.smoke import SmokeCheck
from components.lib.kube import api as kube
from tests.doubles.k8s import KubeAPI, point_clients_at, shipped_rules
from tests.doubles.k8s.kserve_operator import KServeOperator
from tests.doubles.k8s.network import Network
from tests.doubles.k8s.pods import FakePod
from tests.helpers.kubeflow_components import KSERVE, run_deploy_model_on_kserve

ISVC = ("serving.kserve.io/v1beta1", "ml", "inferenceservices", "digits")
ROWS = np.array([[0.0] * 64, [1.0] * 64, [0.5] * 64], np.float32)


def classify(instances) -> list[int]:
    """The published model's answer in these tests: a class id from the example's sum."""
    return [int(sum(row)) % 10 for row in instances]


CHECK = SmokeCheck("serving_default", ROWS, np.array(classify(ROWS)))


@dataclass
class Cluster:
    api: KubeAPI
    network: Network
    operator: KServeOperator
    modes: dict = field(default_factory=dict)  # storage URI -> FakePod mode
    ready_after: dict = field(default_factory=dict)  # storage URI -> seconds
    history: list = field(default_factory=list)  # every traffic split KServe reported, in order


def _uri(spec: dict) -> str:
    return next(e["value"] for e in spec["containers"][0]["env"] if e["name"] == "STORAGE_URI")


@pytest.fixture
def cluster(monkeypatch):
    network = Network()
    box: dict = {}

    def start_pod(isvc, revision, spec):
        uri = _uri(spec)
        return FakePod(classify, box["cluster"].modes.get(uri, "ok"), box["cluster"].ready_after.get(uri, 0.0))

    operator = KServeOperator(network, start_pod)
    api = KubeAPI(installed=dict(KSERVE), controllers=[operator], rbac=shipped_rules())
    box["cluster"] = cluster = Cluster(api, network, operator)
    writes = api.write_status

    def record(key, status):
        traffic = ((status.get("components") or {}).get("predictor") or {}).get("traffic")
        if traffic and (not cluster.history or cluster.history[-1] != traffic):
            cluster.history.append(traffic)
        writes(key, status)

    api.write_status = record
    for key, value in network.environ().items():
        monkeypatch.setenv(key, value)
    yield cluster
    api.close()
    network.close()


def deploy(cluster, version=2, traffic=100, keep_previous=0, timeout=20, name="digits", **overrides):
    return deploy_to_kserve(
        kube.api_client(cluster.api.url),
        name=name,
        namespace="ml",
        spec_predictor=uri_predictor(f"pvc://tfpipe/model-repository/digits/{version}"),
        traffic_percentage=traffic,
        model_name=name,
        checks=[CHECK],
        keep_previous=keep_previous,
        labels={"tfpipe/run-id": f"r{version}", "tfpipe/model-version": str(version)},
        timeout_seconds=timeout,
        **{"poll_seconds": 0.02, "log": lambda m: None, **overrides},
    )


def isvc(cluster) -> dict:
    return cluster.api.objects[ISVC]


def traffic(cluster) -> list[dict]:
    return isvc(cluster)["status"]["components"]["predictor"]["traffic"]


def split(cluster) -> dict:
    return {t["revisionName"]: t["percent"] for t in traffic(cluster)}


def uri_predictor(uri="pvc://tfpipe/model-repository/digits/2", **overrides):
    values = dict(
        uri=uri,
        model_name="digits",
        image="example.com/serving:1",
        resources={"requests": {"cpu": "1"}},
        min_replicas=1,
        max_replicas=3,
    )
    return predictor(**{**values, **overrides})


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
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 1000,
                    "runAsGroup": 1000,
                    "fsGroup": 1000,
                    "fsGroupChangePolicy": "OnRootMismatch",
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
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
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "resources": {"requests": {"cpu": "1"}},
                    }
                ],
            }
        },
    }


def test_first_deploy_creates_the_service_and_smoke_tests_it_on_the_cluster_network(cluster):
    info = deploy(cluster, version=1, traffic=10)  # nothing to canary against: all traffic
    (created,) = cluster.api.created("inferenceservices")
    labels = {"tfpipe/run-id": "r1", "tfpipe/model-version": "1"}
    assert created == inference_service("digits", "ml", uri_predictor("pvc://tfpipe/model-repository/digits/1"), labels)
    assert info["revision"] == "digits-predictor-00001" and not info["canary"]
    assert split(cluster) == {"digits-predictor-00001": 100}
    # the smoke test reached the new revision at its tag's cluster-local name, not the reported example.com URL
    assert info["smoke_url"] == "http://latest-digits-predictor.ml.svc.cluster.local"
    assert [url for _, url in cluster.network.requests] == [
        "http://latest-digits-predictor.ml.svc.cluster.local/v1/models/digits:predict"
    ]
    pod = cluster.operator.revision("digits-predictor-00001").pod
    assert pod.requests == [
        ("/v1/models/digits:predict", {"instances": ROWS.tolist(), "parameters": {"signature_name": "serving_default"}})
    ]
    assert info["url"] == "http://digits.ml.svc.cluster.local"
    assert info["smoke"] == {
        "examples": len(ROWS),
        "class_ids": classify(ROWS),
        "signature_name": "serving_default",
        "signatures": ["serving_default"],
    }


def test_a_canary_gets_its_share_only_after_answering_and_is_promoted_later(cluster):
    deploy(cluster, version=1)
    info = deploy(cluster, version=2, traffic=20)
    assert info["canary"] and info["revision"] == "digits-predictor-00002" and info["deleted_revisions"] == []
    assert split(cluster) == {"digits-predictor-00002": 20, "digits-predictor-00001": 80}
    # the new revision had 0 % (all on the last rolled-out one) until its smoke test passed
    shares = [{t["revisionName"]: t["percent"] for t in split_} for split_ in cluster.history]
    assert [share for share in shares if share.get("digits-predictor-00002")] == [split(cluster)]
    assert {"digits-predictor-00002": 0, "digits-predictor-00001": 100} in shares
    assert isvc(cluster)["metadata"]["labels"]["tfpipe/model-version"] == "2"  # the label follows the version
    patches = [r for r in cluster.api.calls("PATCH")]
    assert {r.content_type for r in patches} == {"application/merge-patch+json"}
    assert patches[0].body["spec"]["predictor"]["canaryTrafficPercent"] == 0
    # promotion, as a user does it (kubectl patch ... canaryTrafficPercent: null): the canary gets everything
    kube.custom(kube.api_client(cluster.api.url)).patch_namespaced_custom_object(
        "serving.kserve.io",
        "v1beta1",
        "ml",
        "inferenceservices",
        "digits",
        {"spec": {"predictor": {"canaryTrafficPercent": None}}},
    )
    promoted = kube.poll(
        lambda: isvc(cluster),
        lambda o: o if split(cluster) == {"digits-predictor-00002": 100} else None,
        0.02,
        5,
        "promotion",
    )
    assert promoted["status"]["components"]["predictor"]["latestRolledoutRevision"] == "digits-predictor-00002"
    assert promoted["status"]["components"]["predictor"]["previousRolledoutRevision"] == "digits-predictor-00001"


def test_a_full_rollout_deletes_older_revisions_but_keep_previous(cluster):
    deploy(cluster, version=1)
    deploy(cluster, version=2)
    info = deploy(cluster, version=3, keep_previous=1)
    assert split(cluster) == {"digits-predictor-00003": 100}
    assert info["deleted_revisions"] == ["digits-predictor-00001"]
    kept = [r["metadata"]["name"] for r in cluster.api.items("revisions") if "deletionTimestamp" not in r["metadata"]]
    assert sorted(kept) == [
        "digits-predictor-00002",
        "digits-predictor-00003",
    ]


@pytest.mark.parametrize(
    "mode, message",
    [
        ("wrong", r"smoke prediction on serving_default disagrees with the published model"),
        ("error", r"smoke prediction on serving_default failed \(500\): the model server failed"),
        ("refuse", r"Connection aborted|RemoteDisconnected|ConnectionError"),
        ("fail", r"the model did not load \(BlockedByFailedLoad\): container exited with code 1"),
    ],
)
def test_any_failure_rolls_back_and_the_rejected_revision_never_serves(cluster, mode, message):
    deploy(cluster, version=1)
    cluster.modes["pvc://tfpipe/model-repository/digits/2"] = mode
    with pytest.raises(ServingFailed, match=message) as e:
        deploy(cluster, version=2, traffic=20)
    assert "restored the previous predictor of InferenceService ml/digits (revision digits-predictor-00003)" in str(
        e.value
    )
    spec = isvc(cluster)["spec"]["predictor"]
    assert _uri(spec) == "pvc://tfpipe/model-repository/digits/1" and "canaryTrafficPercent" not in spec
    assert isvc(cluster)["metadata"]["labels"] == {"tfpipe/run-id": "r1", "tfpipe/model-version": "1"}
    assert split(cluster) == {"digits-predictor-00003": 100}
    served = [t["revisionName"] for split_ in cluster.history for t in split_ if t["percent"] > 0]
    assert "digits-predictor-00002" not in served  # not for a moment, not during the rollback either


def test_not_ready_in_time_rolls_back(cluster):
    deploy(cluster, version=1)
    cluster.ready_after["pvc://tfpipe/model-repository/digits/2"] = 60
    with pytest.raises(ServingFailed, match="new revision did not finish within"):
        deploy(cluster, version=2, timeout=0.5)
    assert _uri(isvc(cluster)["spec"]["predictor"]) == "pvc://tfpipe/model-repository/digits/1"


def test_a_failed_first_deploy_deletes_the_service_and_the_next_waits_until_it_is_gone(cluster):
    cluster.modes["pvc://tfpipe/model-repository/digits/1"] = "wrong"
    cluster.api.foreground_seconds = 1.5  # its revisions take a while to go
    with pytest.raises(ServingFailed, match=r"deleted InferenceService ml/digits \(it served nothing before\)"):
        deploy(cluster, version=1)
    assert "deletionTimestamp" in isvc(cluster)["metadata"]  # foreground deletion: gone once its revisions are
    info = deploy(cluster, version=2)
    assert info["revision"] == "digits-predictor-00001" and split(cluster) == {"digits-predictor-00001": 100}


def test_readiness_does_not_compare_the_knative_generation_with_the_inference_services(cluster):
    deploy(cluster, version=1)
    isvc(cluster)["metadata"]["generation"] = 7  # e.g. spec edits that never reached the Knative Service
    info = deploy(cluster, version=2)
    assert isvc(cluster)["status"]["observedGeneration"] < isvc(cluster)["metadata"]["generation"]
    assert info["revision"] == "digits-predictor-00002"


def recording(sleeps: list):
    """A step's `sleep` that records each wait and sleeps a poll's worth at most (the operator double's pace)."""

    def sleep(seconds):
        sleeps.append(seconds)
        time.sleep(min(seconds, 0.02))

    return sleep


def test_a_failing_api_server_is_retried_a_lost_create_adopted_and_a_lost_patch_repeated(cluster):
    lines, sleeps = [], []
    # the create handled but its answer lost: its retry meets 409 and adopts this run's InferenceService
    cluster.api.faults = [("POST", "lost"), ("GET", 503, "/inferenceservices/digits")]
    deploy(cluster, version=1, log=lines.append, sleep=recording(sleeps))
    lost, retried = cluster.api.created("inferenceservices")  # the retry met 409: no third create
    assert (
        lost
        == retried
        == inference_service(
            "digits",
            "ml",
            uri_predictor("pvc://tfpipe/model-repository/digits/1"),
            {"tfpipe/run-id": "r1", "tfpipe/model-version": "1"},
        )
    )
    assert "InferenceService ml/digits exists already (a retry of this step): following it" in lines
    # the update answered 503, a read reset, the traffic patch handled but its answer lost, the prune's calls failing
    cluster.api.faults = [
        ("PATCH", 503),
        ("GET", "reset", "/inferenceservices/"),
        ("PATCH", "lost"),
        ("GET", 500, "/revisions"),
        ("DELETE", 503, "/revisions/"),
    ]
    info = deploy(cluster, version=2, log=lines.append, sleep=recording(sleeps))
    assert info["revision"] == "digits-predictor-00002" and info["cleanup_error"] == ""
    assert info["deleted_revisions"] == ["digits-predictor-00001"]
    assert split(cluster) == {"digits-predictor-00002": 100}
    assert _uri(isvc(cluster)["spec"]["predictor"]) == "pvc://tfpipe/model-repository/digits/2"
    assert "canaryTrafficPercent" not in isvc(cluster)["spec"]["predictor"]
    assert isvc(cluster)["metadata"]["labels"] == {"tfpipe/run-id": "r2", "tfpipe/model-version": "2"}
    faulted = [(r.method, r.path.rsplit("/", 1)[-1], r.fault) for r in cluster.api.requests if r.fault]
    assert faulted == [
        ("POST", "inferenceservices", "lost"),
        ("GET", "digits", 503),
        ("PATCH", "digits", 503),
        ("GET", "digits", "reset"),
        ("PATCH", "digits", "lost"),
        ("GET", "revisions", 500),
        ("DELETE", "digits-predictor-00001", 503),
    ]
    # no rollback: the update and the traffic patch, each sent again with the same body, nothing else
    patches = [r.body for r in cluster.api.calls("PATCH")]
    assert len(patches) == 4 and patches[0] == patches[1] and patches[2] == patches[3]
    assert patches[2] == {"spec": {"predictor": {"canaryTrafficPercent": None}}}
    assert not cluster.api.calls("DELETE", "inferenceservices")
    retries = [line.split(";")[0] for line in lines if line.startswith("Kubernetes API: ")]
    assert retries == [
        "Kubernetes API: connection lost (RemoteDisconnected)",
        "Kubernetes API: HTTP 503 Service Unavailable",
        "Kubernetes API: HTTP 503 Service Unavailable",
        "Kubernetes API: connection lost (RemoteDisconnected)",
        "Kubernetes API: HTTP 500 Internal Server Error",
        "Kubernetes API: HTTP 503 Service Unavailable",
    ]
    assert len([s for s in sleeps if s != 0.02]) == len(retries)


@pytest.fixture
def repository(tmp_path):
    """A local model repository with versions 1 and 2 of `digits`."""
    from components.lib.deploy.model_repository import publish

    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"model")
    base = str(tmp_path / "model-repository")
    for _ in (1, 2):
        publish(str(model), base, "digits", {})
    return base


def test_a_failed_prune_after_the_rollout_keeps_the_serving_version_and_is_reported(cluster, repository):
    from components.deploy_model_on_kserve import version_discarder
    from components.lib.deploy.model_repository import versions

    deploy(cluster, version=1)
    # a Role that may not delete revisions: the prune fails once version 2 serves all the traffic
    cluster.api.rbac = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != "delete"]} if "revisions" in rule["resources"] else rule
        for rule in shipped_rules()
    ]
    lines = []
    info = deploy(
        cluster, version=2, log=lines.append, discard=version_discarder(repository, "digits", 2, lines.append)
    )
    error = (
        "pruning the older revisions of InferenceService ml/digits failed: HTTP 403 Forbidden: "
        'revisions.serving.knative.dev "digits-predictor-00001" is forbidden: User "'
        f'{cluster.api.user}" cannot delete resource "revisions" in API group "serving.knative.dev" in the '
        'namespace "ml"'
    )
    assert info["cleanup_error"] == error and info["deleted_revisions"] == []
    assert lines[-1] == (
        f"warning: {error}; revision digits-predictor-00002 serves all the same (the next full rollout prunes them)"
    )
    assert not [line for line in lines if line.startswith("removed version")]
    assert versions(repository, "digits") == [1, 2]
    assert split(cluster) == {"digits-predictor-00002": 100}


def test_a_cancelled_run_removes_the_version_first_and_rolls_back_within_the_grace_period(cluster, repository):
    import os
    import signal

    from components.deploy_model_on_kserve import version_discarder
    from components.lib.deploy.model_repository import versions

    deploy(cluster, version=1)
    cluster.ready_after["pvc://tfpipe/model-repository/digits/2"] = 60  # never ready in this test
    cluster.ready_after["pvc://tfpipe/model-repository/digits/1"] = 60  # nor the restored predictor's revision
    now, sleeps, lines, patched_at_removal = [0.0], [], [], []

    def sleep(seconds):  # a fake clock: no real waiting; the run is cancelled during the third wait
        sleeps.append(seconds)
        now[0] += seconds
        if len(sleeps) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    remove = version_discarder(repository, "digits", 2, lines.append)

    def discard(reason):
        patched_at_removal.append(len(cluster.api.calls("PATCH")))
        remove(reason)

    with pytest.raises(kube.Cancelled):
        deploy(cluster, version=2, poll_seconds=5, log=lines.append, sleep=sleep, clock=lambda: now[0], discard=discard)
    assert versions(repository, "digits") == [1]
    assert patched_at_removal == [1]  # the version was gone before the rollback's first request
    restore = cluster.api.calls("PATCH")[1].body
    assert restore["spec"]["predictor"]["canaryTrafficPercent"] == 0
    assert _uri(restore["spec"]["predictor"]) == "pvc://tfpipe/model-repository/digits/1"
    assert len(cluster.api.calls("PATCH")) == 2
    assert [line for line in lines if not line.startswith("InferenceService ml/digits: ")][-3:] == [
        "received SIGTERM: the run was cancelled",
        "removed version 2 from the model repository: the run was cancelled",
        "restored the previous predictor of InferenceService ml/digits; its traffic stays pinned to "
        "digits-predictor-00001 (not within 25 s); left: canaryTrafficPercent 0 on InferenceService ml/digits: "
        "remove it once the previous predictor's revision is ready",
    ]
    assert sleeps[3:] == [5] * 5 and now[0] - 15 == 25  # the rollback's waits: the grace period, not a second more
    assert split(cluster) == {"digits-predictor-00001": 100}


def test_kserve_missing_fails_at_once_naming_the_kind():
    server = KubeAPI(installed={})
    try:
        with pytest.raises(
            kube.EngineMissing,
            match=r"^the cluster has no InferenceService \(inferenceservices.serving.kserve.io/v1beta1\): install KServe",
        ):
            deploy(Cluster(server, None, None))
        assert [r.method for r in server.requests] == ["GET"]
    finally:
        server.close()


def test_smoke_url_is_the_latest_tag_on_the_predictors_cluster_local_host():
    address = {"address": {"url": "http://d-predictor.ml.svc.cluster.local"}}
    tagged = {
        "status": {
            "components": {
                "predictor": {
                    **address,
                    "traffic": [{"tag": "latest", "url": "http://latest-d-predictor.ml.example.com"}],
                }
            }
        }
    }
    assert smoke_url(tagged) == "http://latest-d-predictor.ml.svc.cluster.local"
    assert (
        smoke_url({"status": {"components": {"predictor": {**address, "traffic": []}}}})
        == "http://d-predictor.ml.svc.cluster.local"
    )
    assert smoke_url({"status": {}}) == ""


@pytest.fixture
def serving_cluster(monkeypatch, tmp_path):
    """The double with the project's serving image as every predictor's process, the claim `tfpipe` a folder."""
    from tests.doubles.k8s.kserve_operator import process_pods

    volume = tmp_path / "volume"
    network = Network()
    operator = KServeOperator(
        network, process_pods({"tfpipe": str(volume)}, {"tfpipe/serving:dev": "serving.Dockerfile"})
    )
    api = KubeAPI(installed=dict(KSERVE), controllers=[operator], rbac=shipped_rules())
    point_clients_at(api, monkeypatch, tmp_path / "home")
    for key, value in network.environ().items():
        monkeypatch.setenv(key, value)
    yield Cluster(api, network, operator), volume
    api.close()
    network.close()


@pytest.mark.e2e
def test_the_component_serves_a_tabular_model_and_its_canary_with_the_serving_image(
    serving_cluster, iris_model, tmp_path
):
    cluster, volume = serving_cluster
    data = iris_model.parent / "data"
    first, outputs, record = run_deploy_model_on_kserve(volume, iris_model / "model", data, "iris", tmp=tmp_path)
    assert outputs.version == first.number == 1 and outputs.rest_url == "http://iris.ml.svc.cluster.local"
    assert record["smoke"]["signatures"] == ["serving_default"] and record["smoke"]["examples"] > 0
    second, outputs, record = run_deploy_model_on_kserve(
        volume, iris_model / "model", data, "iris", traffic=30, tmp=tmp_path
    )
    assert record["canary"] and record["revision"] == "iris-predictor-00002"
    assert {t["revisionName"]: t["percent"] for t in record["traffic"]} == {
        "iris-predictor-00002": 30,
        "iris-predictor-00001": 70,
    }


@pytest.mark.e2e
def test_the_component_smoke_tests_both_signatures_of_an_image_model(
    serving_cluster, trained_model, digits_data, tmp_path
):
    cluster, volume = serving_cluster
    version, outputs, record = run_deploy_model_on_kserve(
        volume, trained_model / "model", digits_data, "digits", tmp=tmp_path
    )
    assert record["smoke"]["signatures"] == ["serving_default", "serving_image_bytes"]
    assert record["revision"] == "digits-predictor-00001" and outputs.version == version.number


@pytest.mark.e2e
def test_the_component_removes_the_version_when_the_service_does_not_serve_it(serving_cluster, iris_model, tmp_path):
    from components.lib.deploy.model_repository import versions

    cluster, volume = serving_cluster
    data = iris_model.parent / "data"
    run_deploy_model_on_kserve(volume, iris_model / "model", data, "iris", tmp=tmp_path)
    cluster.network.refused.add("latest-iris-predictor.ml.svc.cluster.local")
    with pytest.raises(ServingFailed, match="Connection|connection"):
        run_deploy_model_on_kserve(volume, iris_model / "model", data, "iris", traffic=30, tmp=tmp_path)
    assert versions(str(volume / "model-repository"), "iris") == [1]
    iris = cluster.api.objects[("serving.kserve.io/v1beta1", "ml", "inferenceservices", "iris")]
    served = {t["revisionName"]: t["percent"] for t in iris["status"]["components"]["predictor"]["traffic"]}
    assert served == {"iris-predictor-00003": 100}  # the restored predictor: version 1 again
