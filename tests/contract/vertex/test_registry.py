"""Vertex AI registry / endpoint look-ups, traffic split and batch model resolution (components/lib/vertex/registry.py).

The GAPIC clients run for real (request coercion, routing headers, regional endpoint, pagination); only the gRPC
stubs of their transports are replaced, answering with real aiplatform_v1 messages.
"""

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.model_service.transports.grpc import ModelServiceGrpcTransport
from google.cloud.aiplatform_v1.types import model as model_pb, model_service
from kfp import dsl

from components.find_model import find_model
from components.lib.vertex.registry import display_name_filter, find_resource, resolve_model_version, traffic_split
from components.plan_batch_prediction import plan_batch_prediction
from tests.doubles.gapic import FakeStub

PARENT = "projects/my-project/locations/europe-west4"
MODEL = f"{PARENT}/models/111"
ENDPOINT = f"{PARENT}/endpoints/777"


@pytest.fixture(autouse=True)
def anonymous(monkeypatch):
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "other-project"))


def list_models_stub(monkeypatch, pages):
    """ListModels answering `pages` (lists of model names) with page tokens p1, p2, ..."""

    def answer(request):
        index = int(request.page_token[1:]) if request.page_token else 0
        return model_service.ListModelsResponse(
            models=[model_pb.Model(name=n, display_name="tfpipe-model") for n in pages[index]],
            next_page_token=f"p{index + 1}" if index + 1 < len(pages) else "",
        )

    return FakeStub(answer).bind(ModelServiceGrpcTransport, "list_models", monkeypatch)


def list_versions_stub(monkeypatch, pages):
    """ListModelVersions answering `pages` (lists of (version id, artifact URI)) with page tokens p1, p2, ..."""

    def answer(request):
        index = int(request.page_token[1:]) if request.page_token else 0
        return model_service.ListModelVersionsResponse(
            models=[model_pb.Model(name=request.name, version_id=v, artifact_uri=uri) for v, uri in pages[index]],
            next_page_token=f"p{index + 1}" if index + 1 < len(pages) else "",
        )

    return FakeStub(answer).bind(ModelServiceGrpcTransport, "list_model_versions", monkeypatch)


def get_model_stub(monkeypatch, version_id="3"):
    def answer(request):
        return model_pb.Model(name=request.name.split("@")[0], version_id=version_id, display_name="tfpipe-model")

    return FakeStub(answer).bind(ModelServiceGrpcTransport, "get_model", monkeypatch)


def test_find_model_sends_the_exact_list_request_and_follows_pages(monkeypatch, capsys):
    stub = list_models_stub(monkeypatch, [[MODEL], [f"{PARENT}/models/222"]])
    assert find_resource("model", "tfpipe-model", "my-project", "europe-west4") == MODEL
    expected = model_service.ListModelsRequest(
        parent=PARENT, filter='display_name="tfpipe-model"', order_by="create_time"
    )
    second = model_service.ListModelsRequest(expected)
    second.page_token = "p1"
    assert stub.calls == [
        ("ListModelsRequest", expected, "europe-west4-aiplatform.googleapis.com:443", f"parent={PARENT}"),
        ("ListModelsRequest", second, "europe-west4-aiplatform.googleapis.com:443", f"parent={PARENT}"),
    ]
    assert f"2 models are named 'tfpipe-model'; using the oldest, {MODEL}" in capsys.readouterr().out
    versions = list_versions_stub(monkeypatch, [[("1", "gs://b/run1/model")], [("2", "gs://b/run2/model")]])
    outputs = find_model("tfpipe-model", "gs://b/run3/model/", "my-project", "europe-west4")
    assert outputs.resource_name == MODEL
    assert outputs.resource_uri == f"https://europe-west4-aiplatform.googleapis.com/v1/{MODEL}"
    assert (outputs.version_name, outputs.version_uri) == ("", "")  # other artifacts: a new version is uploaded
    assert [call[1] for call in versions.calls] == [
        model_service.ListModelVersionsRequest(name=MODEL),
        model_service.ListModelVersionsRequest(name=MODEL, page_token="p1"),
    ]
    assert versions.calls[0][3] == f"name={MODEL}"


def test_find_model_finds_the_version_holding_the_trained_models_artifacts(monkeypatch, capsys):
    list_models_stub(monkeypatch, [[MODEL]])
    # two uploads of one model (a retried step before this fix): the newest is taken
    pages = [[("1", "gs://b/run1/model"), ("2", "gs://b/run2/model/")], [("3", "gs://b/run2/model")]]
    list_versions_stub(monkeypatch, pages)
    outputs = find_model("tfpipe-model", "gs://b/run2/model", "my-project", "europe-west4")
    assert outputs.version_name == f"{MODEL}@3"
    assert outputs.version_uri == f"https://europe-west4-aiplatform.googleapis.com/v1/{MODEL}@3"
    assert f"gs://b/run2/model is registered already as {MODEL}@3: no new upload" in capsys.readouterr().out


def test_find_model_returns_empty_when_there_is_none(monkeypatch):
    stub = list_models_stub(monkeypatch, [[]])
    outputs = find_model('my "quoted" \\ model', "gs://b/model", "my-project", "europe-west4")
    assert tuple(outputs) == ("", "", "", "")  # no model: no version listed
    assert stub.calls[0][1].filter == 'display_name="my \\"quoted\\" \\\\ model"'
    assert display_name_filter("a") == 'display_name="a"'
    with pytest.raises(ValueError, match="a model display name is required"):
        find_resource("model", "", "my-project", "europe-west4")
    with pytest.raises(ValueError, match="unknown resource kind 'dataset'"):
        find_resource("dataset", "x", "my-project", "europe-west4")


@pytest.mark.parametrize(
    "current, percentage, expected",
    [
        ({}, 10, {"0": 100}),  # new endpoint: the only model takes everything
        ({"111": 100}, 100, {"0": 100}),  # full rollout
        ({"111": 100}, 10, {"0": 10, "111": 90}),  # canary
        ({"111": 80, "222": 20}, 10, {"0": 10, "111": 72, "222": 18}),
        ({"111": 50, "222": 50}, 33, {"0": 33, "111": 34, "222": 33}),  # largest remainder, ties by id
        ({"111": 1, "222": 99}, 60, {"0": 60, "222": 40}),  # a share that rounds to 0 is left out (= 0 %)
        ({"111": 0, "222": 100}, 25, {"0": 25, "222": 75}),  # deployed without traffic: stays without
        ({"111": 0}, 25, {"0": 100}),  # nothing serving
    ],
)
def test_traffic_split(current, percentage, expected):
    split = traffic_split(current, percentage)
    assert split == expected and sum(split.values()) == 100


def test_traffic_split_rejects_out_of_range():
    for bad in (0, 101):
        with pytest.raises(ValueError, match="traffic_percentage must be in 1..100"):
            traffic_split({}, bad)


def test_resolve_model_version_champion_version_and_resource_name(monkeypatch):
    listed = list_models_stub(monkeypatch, [[MODEL]])
    got = get_model_stub(monkeypatch, version_id="3")
    assert resolve_model_version("", "tfpipe-model", "champion", "my-project", "europe-west4") == f"{MODEL}@3"
    assert resolve_model_version("5", "tfpipe-model", "champion", "my-project", "europe-west4") == f"{MODEL}@3"
    assert resolve_model_version("", "tfpipe-model", "", "my-project", "europe-west4") == f"{MODEL}@3"
    other = "projects/p2/locations/us-central1/models/9@blue"
    assert (
        resolve_model_version(other, "tfpipe-model", "champion", "my-project", "europe-west4")
        == "projects/p2/locations/us-central1/models/9@3"
    )
    assert len(listed.calls) == 3  # the resource name needed no look-up
    assert [(c[1].name, c[2]) for c in got.calls] == [
        (f"{MODEL}@champion", "europe-west4-aiplatform.googleapis.com:443"),
        (f"{MODEL}@5", "europe-west4-aiplatform.googleapis.com:443"),
        (MODEL, "europe-west4-aiplatform.googleapis.com:443"),
        (other, "us-central1-aiplatform.googleapis.com:443"),
    ]


def test_resolve_model_version_without_a_registry_model(monkeypatch):
    list_models_stub(monkeypatch, [[]])
    with pytest.raises(LookupError, match=f"no model named 'tfpipe-model' in {PARENT}; run the training pipeline"):
        resolve_model_version("", "tfpipe-model", "champion", "my-project", "europe-west4")


def test_plan_batch_prediction(monkeypatch):
    list_models_stub(monkeypatch, [[MODEL]])
    get_model_stub(monkeypatch, version_id="4")
    destination = dsl.Artifact(name="destination", uri="gs://bucket/root/run-1/plan-batch-prediction/destination")
    out = plan_batch_prediction(
        "",
        "tfpipe-model",
        "champion",
        "gs://b/a.jsonl, /gcs/b/more/*.jsonl,",
        "",
        "my-project",
        "europe-west4",
        "run-1",
        destination,
    )
    assert out.job_display_name == "run-1-batch"
    assert out.model_name == f"{MODEL}@4"
    assert out.model_uri == f"https://europe-west4-aiplatform.googleapis.com/v1/{MODEL}@4"
    assert out.gcs_source_uris == ["gs://b/a.jsonl", "gs://b/more/*.jsonl"]
    assert out.output_prefix == "gs://bucket/root/run-1/plan-batch-prediction/destination"
    out = plan_batch_prediction(
        "7",
        "tfpipe-model",
        "champion",
        "gs://b/a.csv",
        "gs://out/preds",
        "my-project",
        "europe-west4",
        "r" * 128,
        destination,
    )
    assert out.job_display_name == "r" * 122 + "-batch"  # within Vertex's 128 characters
    assert out.output_prefix == "gs://out/preds"
    with pytest.raises(ValueError, match="reads instances from gs:// URIs, got '/home/me/a.jsonl'"):
        plan_batch_prediction("", "m", "champion", "/home/me/a.jsonl", "", "p", "europe-west4", "r", destination)
    with pytest.raises(ValueError, match="no instances given"):
        plan_batch_prediction("", "m", "champion", " , ", "", "p", "europe-west4", "r", destination)
