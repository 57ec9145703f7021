"""The rehearsal's IAM and enabled APIs (pipelines/rehearsal/iam.py): a fresh state is the set-up `submit`'s
pre-flight checks require (pipelines/preflight.py), and what the state lacks is refused as Google refuses it: a role's
permission (Vertex's 403 naming it), a disabled API, the Vertex AI service agent's grant on the key, and data prep's
Dataflow job (its APIs, its workers' role). Through the double's gRPC and REST servers and the Dataflow client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient
from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport
from google.cloud.aiplatform_v1.types import endpoint as endpoint_pb

from components.lib.prep import dataflow
from components.prepare_data import prepare
from pipelines import preflight
from pipelines.config import Platform
from pipelines.rehearsal.api import VertexDouble
from pipelines.rehearsal.registry import ApiError

PROJECT, NUMBER, LOCATION = "p-rehearsal", "4711", "europe-west4"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
SA = f"runner@{PROJECT}.iam.gserviceaccount.com"
KEY = f"{PARENT}/keyRings/ml/cryptoKeys/tfpipe"
PLATFORM = Platform(project=PROJECT, location=LOCATION, service_account=SA, encryption_spec_key_name=KEY)
DISABLED = (
    "Vertex AI API has not been used in project 4711 before or it is disabled. Enable it by visiting "
    "https://console.developers.google.com/apis/api/aiplatform.googleapis.com/overview?project=4711 then retry. If "
    "you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry."
)
JOB = {
    "display_name": "j",
    "job_spec": {
        "worker_pool_specs": [
            {
                "machine_spec": {"machine_type": "n1-standard-4"},
                "replica_count": 1,
                "container_spec": {"image_uri": "t:1"},
            }
        ],
        "service_account": SA,
    },
}


def _double(tmp_path, edit=None) -> VertexDouble:
    """The double on a fresh state for PLATFORM, iam.json first changed by `edit` (a function of its dict)."""
    VertexDouble(str(tmp_path), str(tmp_path / "state.json"), PROJECT, NUMBER, LOCATION, caller=SA, platform=PLATFORM)
    if edit:
        state = json.loads((tmp_path / "iam.json").read_text())
        edit(state)
        (tmp_path / "iam.json").write_text(json.dumps(state))
    return VertexDouble(str(tmp_path), str(tmp_path / "state.json"), PROJECT, NUMBER, LOCATION, caller=SA).start()


def _without_role(role: str):
    def edit(state):
        state["project_bindings"] = [b for b in state["project_bindings"] if b["role"] != role]

    return edit


def _rest(double: VertexDouble, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{double.http_base}/v1/{path}", data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_fresh_state_is_the_set_up_the_pre_flight_checks_require(tmp_path):
    """From preflight's own lists: the services it requires enabled, the runs' roles it checks held, act-as on
    itself, the key's service agents granted; so a role taken out is one preflight names."""
    VertexDouble(str(tmp_path), str(tmp_path / "s.json"), PROJECT, NUMBER, LOCATION, caller=SA, platform=PLATFORM)
    state = json.loads((tmp_path / "iam.json").read_text())
    assert state["services"] == preflight.required_services(PLATFORM)
    assert preflight.check_runner_roles(SA, PLATFORM, state["project_bindings"]) == []
    agents = preflight.key_agents(NUMBER, preflight.uses_dataflow(PLATFORM))
    assert [a for a, _ in agents] == [
        f"service-{NUMBER}@gcp-sa-aiplatform.iam.gserviceaccount.com",
        f"service-{NUMBER}@gs-project-accounts.iam.gserviceaccount.com",
        f"service-{NUMBER}@dataflow-service-producer-prod.iam.gserviceaccount.com",
        f"service-{NUMBER}@compute-system.iam.gserviceaccount.com",
    ]
    assert state["key_bindings"] == {
        KEY: [{"role": preflight.ENCRYPTER, "members": [f"serviceAccount:{a}" for a, _ in agents]}]
    }
    assert state["service_agents"] == {whose: agent for agent, whose in agents}
    assert state["service_accounts"] == {SA: {"act_as": [f"serviceAccount:{SA}"]}}
    _without_role("roles/dataflow.worker")(state)
    [problem] = preflight.check_runner_roles(SA, PLATFORM, state["project_bindings"])
    assert f"{SA} lacks roles/dataflow.worker in {PROJECT}" in problem


def test_an_older_state_gets_the_set_up_beside_its_act_as_bindings(tmp_path):
    (tmp_path / "iam.json").write_text(json.dumps({"service_accounts": {SA: {"act_as": []}}}))
    double = VertexDouble(str(tmp_path), str(tmp_path / "s.json"), PROJECT, NUMBER, LOCATION, caller=SA)
    state = json.loads((tmp_path / "iam.json").read_text())
    assert state["service_accounts"] == {SA: {"act_as": []}}  # kept: the first job is refused, as before
    assert state["services"] == preflight.required_services(Platform())
    with pytest.raises(ApiError, match="Permission 'iam.serviceAccounts.actAs' denied on service account"):
        double.check(JOB)
    # promote --rehearsal acts as the Compute Engine default account, new to the file: the set-up's grants
    promote = VertexDouble(str(tmp_path), str(tmp_path / "s.json"), PROJECT, NUMBER, LOCATION)
    promote.authorize("aiplatform.endpoints.update", f"{PARENT}/endpoints/7")
    state = json.loads((tmp_path / "iam.json").read_text())
    assert state["project_bindings"][0] == {
        "role": "roles/aiplatform.user",
        "members": [f"serviceAccount:{SA}", f"serviceAccount:{NUMBER}-compute@developer.gserviceaccount.com"],
    }


def test_a_role_taken_away_refuses_its_permissions_with_vertexs_403(tmp_path):
    double = _double(tmp_path, _without_role("roles/aiplatform.user"))
    channel = grpc.insecure_channel(double.grpc_target)
    try:
        jobs = JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
        with pytest.raises(exceptions.PermissionDenied) as refused:
            jobs.create_custom_job(parent=PARENT, custom_job=JOB)
        assert refused.value.message == (
            f"Permission 'aiplatform.customJobs.create' denied on resource '//aiplatform.googleapis.com/{PARENT}' "
            "(or it may not exist)."
        )
        models = ModelServiceClient(transport=ModelServiceGrpcTransport(channel=channel))
        with pytest.raises(exceptions.PermissionDenied, match=r"^403 Permission 'aiplatform.models.get' denied on "):
            models.get_model(name=f"{PARENT}/models/1")
        status, answer = _rest(double, "POST", f"{PARENT}/endpoints/7:predict", {"instances": [[1]]})
        assert (status, answer) == (
            403,
            {
                "error": {
                    "code": 403,
                    "message": f"Permission 'aiplatform.endpoints.predict' denied on resource "
                    f"'//aiplatform.googleapis.com/{PARENT}/endpoints/7' (or it may not exist).",
                    "status": "PERMISSION_DENIED",
                }
            },
        )
        assert double.job_service.jobs == {}
    finally:
        channel.close()
        double.stop()


def _viewer(state):
    _without_role("roles/aiplatform.user")(state)
    state["project_bindings"].append({"role": "roles/aiplatform.viewer", "members": [f"serviceAccount:{SA}"]})


def test_a_viewer_reads_but_may_not_upload(tmp_path):
    double = _double(tmp_path, _viewer)
    try:
        status, answer = _rest(
            double, "POST", f"{PARENT}/models:upload", {"model": {"displayName": "m", "artifactUri": "gs://b/m"}}
        )
        assert status == 403 and answer["error"]["message"].startswith("Permission 'aiplatform.models.upload' denied")
        channel = grpc.insecure_channel(double.grpc_target)
        models = ModelServiceClient(transport=ModelServiceGrpcTransport(channel=channel))
        assert list(models.list_models(parent=PARENT)) == []
        channel.close()
    finally:
        double.stop()


@pytest.mark.parametrize("collection", ["customJobs", "hyperparameterTuningJobs", "batchPredictionJobs"])
def test_a_viewer_may_not_cancel_a_job_over_rest(tmp_path, collection):
    """The REST cancel GCPC's job launchers send (an empty body) needs the cancel permission of the job's kind."""
    double = _double(tmp_path, _viewer)
    try:
        status, answer = _rest(double, "POST", f"{PARENT}/{collection}/5:cancel")
        assert (status, answer["error"]["message"]) == (
            403,
            f"Permission 'aiplatform.{collection}.cancel' denied on resource "
            f"'//aiplatform.googleapis.com/{PARENT}/{collection}/5' (or it may not exist).",
        )
    finally:
        double.stop()


def test_a_disabled_vertex_api_refuses_every_call(tmp_path):
    double = _double(tmp_path, lambda state: state["services"].remove("aiplatform.googleapis.com"))
    channel = grpc.insecure_channel(double.grpc_target)
    try:
        models = ModelServiceClient(transport=ModelServiceGrpcTransport(channel=channel))
        with pytest.raises(exceptions.PermissionDenied) as refused:
            models.list_models(parent=PARENT)
        assert refused.value.message == DISABLED
        status, answer = _rest(double, "GET", f"{PARENT}/operations/1")
        assert (status, answer["error"]["message"]) == (403, DISABLED)
    finally:
        channel.close()
        double.stop()
    assert [e["message"] for e in double.errors] == [DISABLED, DISABLED]


def test_a_key_vertexs_service_agent_may_not_use_is_refused(tmp_path):
    agent = f"service-{NUMBER}@gcp-sa-aiplatform.iam.gserviceaccount.com"
    endpoint = endpoint_pb.Endpoint(display_name="e", encryption_spec={"kms_key_name": KEY})
    double = _double(tmp_path)
    double.endpoint_service.create_endpoint(PARENT, endpoint)  # granted by the set-up

    def ungrant(state):
        for binding in state["key_bindings"][KEY]:
            binding["members"].remove(f"serviceAccount:{agent}")

    refusing = _double(tmp_path / "other", ungrant)
    try:
        with pytest.raises(ApiError) as refused:
            refusing.endpoint_service.create_endpoint(PARENT, endpoint)
        assert (refused.value.status, refused.value.message) == (
            "INVALID_ARGUMENT",
            f"Provided CryptoKey {KEY} cannot be used in Vertex AI service. Please make sure the CryptoKey is enabled "
            f"and Vertex AI service account `{agent}` has Encryption and Decryption access to the CryptoKey.",
        )
        with pytest.raises(ApiError, match="cannot be used in Vertex AI service"):
            refusing.job_service.create_job(
                "custom_job", _job_request({**JOB, "encryption_spec": {"kms_key_name": KEY}})
            )
        assert refusing.job_service.jobs == {}
    finally:
        double.stop()
        refusing.stop()


def _job_request(job: dict):
    from google.cloud.aiplatform_v1.types import job_service

    return job_service.CreateCustomJobRequest(parent=PARENT, custom_job=job)


DATAFLOW = {  # the compiled data prep settings (pipelines/targets/vertex.py)
    "project": PROJECT,
    "region": LOCATION,
    "service_account": SA,
    "kms_key": KEY,
    "labels": {"env": "prod"},
    "sdk_container_image": "example.com/tfpipe/components:abc",
}


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            _without_role("roles/dataflow.worker"),
            "400 Workflow failed. Causes: Permissions verification for controller service account failed. All "
            f"permissions in IAM role roles/dataflow.worker should be granted to controller service account {SA}.",
        ),
        (
            lambda state: state["services"].remove("dataflow.googleapis.com"),
            "403 Dataflow API has not been used in project 4711 before or it is disabled. Enable it by visiting "
            "https://console.developers.google.com/apis/api/dataflow.googleapis.com/overview?project=4711 then retry.",
        ),
        (
            lambda state: state["services"].remove("compute.googleapis.com"),
            "403 Compute Engine API has not been used in project 4711 before or it is disabled.",
        ),
        (
            _without_role("roles/dataflow.developer"),
            f"403 Permission 'dataflow.jobs.create' denied on resource '//dataflow.googleapis.com/{PARENT}' "
            "(or it may not exist).",
        ),
    ],
)
def test_data_preps_dataflow_job_is_refused_as_dataflow_refuses_it(tmp_path, monkeypatch, gcs_emulator, edit, message):
    """The step records its job, creates it on the rehearsal's Dataflow API and fails with Dataflow's answer, the
    double's error (the run summary's line) naming the API or role."""
    from pipelines.rehearsal import redirect

    double = _double(tmp_path / "state", edit)
    try:
        for name, value in redirect.environment(double.grpc_target, double.http_base, PROJECT).items():
            if name.startswith("TFPIPE_DATAFLOW"):
                monkeypatch.setenv(name, value)
        monkeypatch.setenv(dataflow.RECORD_ENV, str(tmp_path / "record"))
        with pytest.raises(dataflow.DataflowRefused, match="^Dataflow refused the job tfpipe-prepare-data-") as refused:
            prepare(
                "builtin:iris",
                "gs://test-bucket/run/dataset",
                num_workers=1,
                runner="dataflow",
                dataflow_options=DATAFLOW,
            )
    finally:
        double.stop()
    assert str(refused.value).split(": ", 1)[1].startswith(message)
    assert message.split(" ", 1)[1] in double.errors[-1]["message"]
    [create] = [json.loads(line) for line in open(double.requests_path)]
    assert create["method"] == "POST jobs" and create["request"] == {
        "name": create["request"]["name"],
        "type_": "JOB_TYPE_BATCH",
        "environment": {
            "temp_storage_prefix": "gs://test-bucket/run/dataset-dataflow/temp",
            "service_kms_key_name": KEY,
            "service_account_email": SA,
        },
        "labels": {"env": "prod"},
    }


def test_the_set_ups_dataflow_job_is_created(tmp_path, monkeypatch, gcs_emulator):
    from pipelines.rehearsal import redirect

    double = _double(tmp_path / "state")
    try:
        for name, value in redirect.environment(double.grpc_target, double.http_base, PROJECT).items():
            if name.startswith("TFPIPE_DATAFLOW"):
                monkeypatch.setenv(name, value)
        monkeypatch.setenv(dataflow.RECORD_ENV, str(tmp_path / "record"))
        stats = prepare(
            "builtin:iris", "gs://test-bucket/run/dataset", num_workers=1, runner="dataflow", dataflow_options=DATAFLOW
        )
    finally:
        double.stop()
    assert stats["records"] == 150 and double.errors == []
