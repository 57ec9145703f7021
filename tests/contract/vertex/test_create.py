"""Idempotent creation of the registry model and the endpoint (components/lib/vertex/create.py), through the GAPIC
clients against the rehearsal's Vertex AI API double (real gRPC, Vertex's ID rules and ALREADY_EXISTS): two first
runs that overlap end with one model and one endpoint, and a step run again repeats nothing."""

import json
import re

import pytest

from components.create_model import create_model as create_model_step
from components.ensure_endpoint import ensure_endpoint as ensure_endpoint_step
from components.lib.vertex import registry
from components.lib.vertex.create import create_model, ensure_endpoint, resource_id
from pipelines.rehearsal.registry import ENDPOINT_ID, MODEL_ID

PROJECT, NUMBER, LOCATION = "p-rehearsal", "4711", "europe-west4"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
ANSWERED = f"projects/{NUMBER}/locations/{LOCATION}"  # Vertex answers with the project's number
KEY = f"{PARENT}/keyRings/ml/cryptoKeys/tfpipe"
LABELS = {"env": "test", "pipeline": "tfpipe-training"}
SPEC = {"imageUri": "example.com/serving:1", "ports": [{"containerPort": 8080}]}


@pytest.fixture
def vertex(tmp_path):
    from pipelines.config import Platform
    from pipelines.rehearsal import redirect
    from pipelines.rehearsal.api import VertexDouble

    platform = Platform(
        project=PROJECT, location=LOCATION, encryption_spec_key_name=KEY
    )  # its set-up: the key's grants
    double = VertexDouble(
        str(tmp_path), str(tmp_path / "state.json"), PROJECT, NUMBER, LOCATION, platform=platform
    ).start()
    try:
        with redirect.redirected(double.grpc_target, double.http_base, PROJECT):
            yield double
    finally:
        double.stop()


def requests(double) -> list[tuple[str, dict]]:
    lines = open(double.requests_path).read().splitlines()
    return [(r["method"], r["request"]) for r in map(json.loads, lines)]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("digits-endpoint", "tfpipe-digits-endpoint-"),
        ("Digits Endpoint", "tfpipe-digits-endpoint-"),  # another name: another digest
        ("ünïcode_名前", "tfpipe-n-code-"),
        ("名前", "tfpipe-"),
        ("x" * 200, f"tfpipe-{'x' * 45}-"),
    ],
)
def test_resource_ids_take_vertexs_model_and_endpoint_forms(name, expected):
    made = resource_id(name)
    assert made.startswith(expected) and re.fullmatch(r"[0-9a-f]{8}", made.rsplit("-", 1)[1]) and len(made) <= 62
    assert MODEL_ID.fullmatch(made) and ENDPOINT_ID.fullmatch(made)
    assert resource_id("digits-endpoint") != resource_id("Digits Endpoint")


def test_two_first_runs_at_once_end_with_one_endpoint(vertex, monkeypatch):
    # both runs looked for the endpoint before either created it
    monkeypatch.setattr(registry, "find_resource", lambda *args: "")
    first = ensure_endpoint("digits-endpoint", PROJECT, LOCATION, LABELS, KEY)
    second = ensure_endpoint("digits-endpoint", PROJECT, LOCATION, LABELS, KEY)
    endpoint_id = resource_id("digits-endpoint")
    assert first == second == f"{ANSWERED}/endpoints/{endpoint_id}"
    create = {
        "parent": PARENT,
        "endpoint": {"display_name": "digits-endpoint", "labels": LABELS, "encryption_spec": {"kms_key_name": KEY}},
        "endpoint_id": endpoint_id,
    }
    assert requests(vertex) == [
        ("EndpointService.CreateEndpoint", create),
        ("EndpointService.CreateEndpoint", create),  # ALREADY_EXISTS: the first run's
        ("EndpointService.GetEndpoint", {"name": f"{PARENT}/endpoints/{endpoint_id}"}),
    ]
    assert list(vertex.registry.state["endpoints"]) == [first]
    monkeypatch.undo()  # a later run finds it by its display name
    outputs = ensure_endpoint_step("digits-endpoint", PROJECT, LOCATION, LABELS, KEY)
    assert outputs == (first, f"https://{LOCATION}-aiplatform.googleapis.com/v1/{first}")
    assert [method for method, _ in requests(vertex)][3:] == ["EndpointService.ListEndpoints"]


def test_an_id_held_under_another_name_is_refused(vertex, monkeypatch):
    monkeypatch.setattr(registry, "find_resource", lambda *args: "")
    vertex.registry.create_endpoint(PARENT, {"display_name": "renamed"}, resource_id("digits-endpoint"))
    with pytest.raises(RuntimeError, match="holds the ID of 'digits-endpoint' but is named 'renamed'; rename or"):
        ensure_endpoint("digits-endpoint", PROJECT, LOCATION, LABELS, "")


def test_two_first_uploads_at_once_end_with_one_model_and_a_retry_uploads_nothing(vertex):
    model_id = resource_id("digits")
    first = create_model_step(
        "digits", "gs://b/run-1/model", SPEC, PROJECT, LOCATION, LABELS, KEY, "run-1"
    ).resource_name
    # the run beside it found no model either: its upload becomes a version of the first run's model
    second = create_model(
        "digits", {"artifact_uri": "gs://b/run-2/model", "container_spec": SPEC}, PROJECT, LOCATION, LABELS, ""
    )
    # the first run's step run again (a retry after its upload succeeded): the version it made, nothing uploaded
    again = create_model(
        "digits", {"artifact_uri": "gs://b/run-1/model/", "container_spec": SPEC}, PROJECT, LOCATION, LABELS, KEY
    )
    name = f"{ANSWERED}/models/{model_id}"
    assert (first, second, again) == (f"{name}@1", f"{name}@2", f"{name}@1")
    [model] = vertex.registry.state["models"].values()
    assert [v["artifact_uri"] for v in model["versions"]] == ["gs://b/run-1/model", "gs://b/run-2/model"]
    upload = {
        "parent": PARENT,
        "model_id": model_id,
        "model": {
            "display_name": "digits",
            "labels": LABELS,
            "encryption_spec": {"kms_key_name": KEY},
            "artifact_uri": "gs://b/run-1/model",
            "container_spec": {"image_uri": "example.com/serving:1", "ports": [{"container_port": 8080}]},
            "pipeline_job": f"{PARENT}/pipelineJobs/run-1",
        },
    }
    sent = requests(vertex)
    assert sent[0] == ("ModelService.UploadModel", upload)
    assert [method for method, _ in sent[1:]] == [
        "ModelService.UploadModel",  # ALREADY_EXISTS
        "ModelService.GetModel",
        "ModelService.ListModelVersions",
        "ModelService.UploadModel",  # a version of it
        "ModelService.UploadModel",  # the retry: ALREADY_EXISTS
        "ModelService.GetModel",
        "ModelService.ListModelVersions",  # its artifacts are version 1: no upload
    ]
    assert sent[4][1]["parent_model"] == f"{PARENT}/models/{model_id}" and "model_id" not in sent[4][1]
