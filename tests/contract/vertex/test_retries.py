"""The project's own Vertex AI calls repeat what Vertex answers while busy or failing (core.retries): the real
functions against GAPIC stubs that fail as gRPC calls fail, then answer; every try asserted, request by request.
(The creates the project makes itself are not repeated: tests/unit/pipelines/test_cli_errors.py.)"""

import json

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.job_service.transports.grpc import JobServiceGrpcTransport
from google.cloud.aiplatform_v1.services.model_service.transports.grpc import ModelServiceGrpcTransport
from google.cloud.aiplatform_v1.types import (
    batch_prediction_job,
    completion_stats,
    endpoint_service,
    hyperparameter_tuning_job,
    job_service,
    model as model_pb,
    model_service,
    study,
)

from components.lib.vertex.registry import batch_job_counts, champion_version, find_resource
from components.lib.vertex.rollout import Promotion, Rollout, finish_rollout, promote
from components.read_best_trial import fetch_best_trial
from core import retries
from tests.doubles.gapic import FakeStub, RegistryDouble, internal, numbered, quota, unavailable

PARENT = "projects/my-project/locations/europe-west4"
MODEL = f"{PARENT}/models/111"
ENDPOINT = f"{PARENT}/endpoints/777"
HOST = "europe-west4-aiplatform.googleapis.com:443"
ALIASES = ["champion"]


@pytest.fixture(autouse=True)
def anonymous_and_fast(monkeypatch):
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "other-project"))
    monkeypatch.setattr(retries, "INITIAL", 0.001)
    monkeypatch.setattr(retries, "MAXIMUM", 0.001)


def list_models(monkeypatch, failures):
    def answer(request):
        return model_service.ListModelsResponse(models=[model_pb.Model(name=MODEL, display_name="tfpipe-model")])

    return FakeStub(answer, failures).bind(ModelServiceGrpcTransport, "list_models", monkeypatch)


def test_find_resource_repeats_its_listing_after_a_quota_answer_and_a_reset(monkeypatch, capsys):
    stub = list_models(monkeypatch, [quota(), unavailable("recvmsg:Connection reset by peer")])
    assert find_resource("model", "tfpipe-model", "my-project", "europe-west4") == MODEL
    request = model_service.ListModelsRequest(
        parent=PARENT, filter='display_name="tfpipe-model"', order_by="create_time"
    )
    assert stub.calls == [("ListModelsRequest", request, HOST, f"parent={PARENT}")] * 3
    assert capsys.readouterr().out.splitlines()[:2] == [
        "retrying after a transient error: ResourceExhausted: 429 " + quota().details(),
        "retrying after a transient error: ServiceUnavailable: 503 recvmsg:Connection reset by peer",
    ]


def test_champion_version_repeats_a_read_after_an_internal_error(monkeypatch):
    listed = list_models(monkeypatch, [])

    def answer(request):
        return model_pb.Model(name=MODEL, version_id="4", artifact_uri="gs://b/run4/model")

    got = FakeStub(answer, [internal()]).bind(ModelServiceGrpcTransport, "get_model", monkeypatch)
    assert champion_version("tfpipe-model", "champion", "my-project", "europe-west4") == (
        f"{MODEL}@4",
        "gs://b/run4/model",
    )
    assert len(listed.calls) == 1
    request = model_service.GetModelRequest(name=f"{MODEL}@champion")
    assert got.calls == [("GetModelRequest", request, HOST, f"name={MODEL}%40champion")] * 2


def get_endpoint():
    return ("get_endpoint", endpoint_service.GetEndpointRequest(name=ENDPOINT))


def undeploy(deployed_model_id):
    return (
        "undeploy_model",
        endpoint_service.UndeployModelRequest(endpoint=ENDPOINT, deployed_model_id=deployed_model_id),
    )


def champion(model=MODEL):
    return ("get_model", model_service.GetModelRequest(name=f"{model}@champion"))


def merge(version, model=MODEL):
    return (
        "merge_version_aliases",
        model_service.MergeVersionAliasesRequest(name=f"{model}@{version}", version_aliases=["champion", "default"]),
    )


def test_a_full_rollout_repeats_each_call_vertex_refused(monkeypatch):
    vertex = RegistryDouble(
        monkeypatch,
        ENDPOINT,
        MODEL,
        [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)],
        {"d3": 100},
        {"champion": "1", "default": "1"},
        failures={"get_endpoint": [unavailable()], "undeploy_model": [quota()], "merge_version_aliases": [internal()]},
    )
    result = finish_rollout(ENDPOINT, f"{MODEL}@3", 100, 0, ALIASES, echo=lambda line: None)
    assert vertex.calls == [  # d2, deployed after the champion's d1, a canary: undeployed first
        get_endpoint(),
        get_endpoint(),
        champion(),
        undeploy("d2"),
        undeploy("d2"),
        undeploy("d1"),
        merge("3"),
        merge("3"),
    ]
    assert result == Rollout(deployed_model_id="d3", canary=False, undeployed=["d2", "d1"], kept=[])
    assert [d[0] for d in vertex.deployed] == ["d3"] and vertex.aliases == {"champion": "3", "default": "3"}


def test_an_undeploy_is_not_repeated_after_an_internal_error_but_a_traffic_update_is(monkeypatch):
    """Vertex may have undeployed the model before failing: a repeat would find it gone. Setting the split twice sets
    the same split."""
    vertex = RegistryDouble(
        monkeypatch,
        ENDPOINT,
        MODEL,
        [("d1", "1", 100), ("d2", "2", 200)],
        {"d1": 90, "d2": 10},
        {"champion": "1", "default": "1"},
        failures={"update_endpoint": [internal()], "undeploy_model": [internal()]},
    )
    with pytest.raises(exceptions.InternalServerError, match="Internal error encountered"):
        promote(ENDPOINT, 0, ALIASES, echo=lambda line: None)
    update = vertex.calls[1]
    assert update[0] == "update_endpoint" and dict(update[1].endpoint.traffic_split) == {"d2": 100}
    assert vertex.calls == [get_endpoint(), update, update, champion(numbered(MODEL)), undeploy("d1")]
    assert vertex.split == {"d2": 100} and [d[0] for d in vertex.deployed] == ["d1", "d2"]
    vertex.calls = []
    assert promote(ENDPOINT, 0, ALIASES, echo=lambda line: None) == Promotion("d2", f"{numbered(MODEL)}@2", ["d1"])
    assert vertex.calls == [
        get_endpoint(),
        update,
        champion(numbered(MODEL)),
        undeploy("d1"),
        merge("2", numbered(MODEL)),
    ]


def test_the_job_reads_repeat_after_unavailable_and_quota_answers(monkeypatch):
    tuning = f"{PARENT}/hyperparameterTuningJobs/5"
    trial = study.Trial(
        id="1",
        state=study.Trial.State.SUCCEEDED,
        final_measurement=study.Measurement(metrics=[study.Measurement.Metric(metric_id="accuracy", value=0.9)]),
    )
    jobs = FakeStub(
        lambda request: hyperparameter_tuning_job.HyperparameterTuningJob(name=request.name, trials=[trial]),
        [unavailable(), quota()],
    ).bind(JobServiceGrpcTransport, "get_hyperparameter_tuning_job", monkeypatch)
    resources = json.dumps({"resources": [{"resourceUri": f"https://{HOST[:-4]}/v1/{tuning}"}]})
    assert fetch_best_trial(resources, "accuracy", "maximize") == {
        "trial_id": "1",
        "metric": pytest.approx(0.9),
        "parameters": {},
        "job": tuning,
        "trials": 1,
    }
    assert [c[1] for c in jobs.calls] == [job_service.GetHyperparameterTuningJobRequest(name=tuning)] * 3

    batch = f"{PARENT}/batchPredictionJobs/6"
    stats = completion_stats.CompletionStats(successful_count=9, failed_count=1)
    batches = FakeStub(
        lambda request: batch_prediction_job.BatchPredictionJob(name=request.name, completion_stats=stats),
        [unavailable("recvmsg:Connection reset by peer")],
    ).bind(JobServiceGrpcTransport, "get_batch_prediction_job", monkeypatch)
    resources = json.dumps({"resources": [{"resourceUri": f"https://{HOST[:-4]}/v1/{batch}"}]})
    assert batch_job_counts(resources) == (batch, 9, 1)
    assert [c[1] for c in batches.calls] == [job_service.GetBatchPredictionJobRequest(name=batch)] * 2


def test_a_call_vertex_keeps_refusing_gives_up_at_the_deadline(monkeypatch):
    monkeypatch.setattr(retries, "DEADLINE", 0.05)
    stub = list_models(monkeypatch, [quota() for _ in range(10_000)])
    with pytest.raises(exceptions.RetryError) as raised:
        find_resource("model", "tfpipe-model", "my-project", "europe-west4")
    assert isinstance(raised.value.cause, exceptions.ResourceExhausted)
    assert 1 < len(stub.calls) < 10_000
