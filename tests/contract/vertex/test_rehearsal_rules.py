"""What the Vertex AI double refuses in a request's identity and resources (pipelines/rehearsal/rules.py), each case
a request Vertex refuses, through the double's own request handling (no TF, fast)."""

from __future__ import annotations

import re

import pytest
import yaml
from google.cloud.aiplatform_v1.types import (
    custom_job,
    endpoint as endpoint_pb,
    endpoint_service,
    hyperparameter_tuning_job,
    job_service,
    model_service,
)

from pipelines.rehearsal.api import VertexDouble
from pipelines.rehearsal.api.messages import to_dict
from pipelines.rehearsal.registry import ApiError

PARENT = "projects/p-rehearsal/locations/europe-west4"
SA = "runner@p-rehearsal.iam.gserviceaccount.com"


@pytest.fixture
def double(tmp_path):
    """The runs act as SA (which may act as itself, as the set-up grants)."""
    return VertexDouble(str(tmp_path), str(tmp_path / "state.json"), "p-rehearsal", "4711", "europe-west4", caller=SA)


def job(**spec) -> job_service.CreateCustomJobRequest:
    pool = {
        "machine_spec": {"machine_type": "n1-standard-4", **spec.pop("machine", {})},
        "replica_count": 1,
        "container_spec": {"image_uri": "trainer:1", "args": ["--data-dir", "gs://b/d"]},
    }
    job_spec = {"worker_pool_specs": [pool], "base_output_directory": {"output_uri_prefix": "gs://b/job"}, **spec}
    labels = job_spec.pop("labels", {})
    return job_service.CreateCustomJobRequest(
        parent=PARENT, custom_job=custom_job.CustomJob(display_name="j", job_spec=job_spec, labels=labels)
    )


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"service_account": "runner"}, "job_spec.service_account 'runner' is not a service account e-mail"),
        (
            {"network": "projects/p-rehearsal/global/networks/vpc"},
            "job_spec.network 'projects/p-rehearsal/global/networks/vpc' must be projects/PROJECT_NUMBER/global/"
            "networks/NAME",
        ),
        (
            {"tensorboard": "projects/4711/locations/us-central1/tensorboards/1"},
            "job_spec.tensorboard 'projects/4711/locations/us-central1/tensorboards/1' must be a TensorBoard of this "
            "project in europe-west4",
        ),
        (
            {"tensorboard": "projects/other/locations/europe-west4/tensorboards/1"},
            "must be a TensorBoard of this project in europe-west4",
        ),
        ({"labels": {"Team": "ml"}}, "labels: invalid label Team='ml'"),
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "labels: at most 64 labels, got 65"),
        (
            {"base_output_directory": {"output_uri_prefix": "/tmp/runs/job"}},
            "job_spec.base_output_directory.output_uri_prefix '/tmp/runs/job' is not a Cloud Storage URI "
            "(gs://BUCKET/PATH)",
        ),
        (
            {"base_output_directory": {"output_uri_prefix": "gs:///job"}},
            "job_spec.base_output_directory.output_uri_prefix 'gs:///job' is not a Cloud Storage URI",
        ),
        (
            {"machine": {"accelerator_type": "NVIDIA_TESLA_T4"}},
            "job_spec.worker_pool_specs[0].machine_spec: accelerator_type and accelerator_count go together "
            "(got 'NVIDIA_TESLA_T4', 0)",
        ),
        (
            {"machine": {"machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_L4", "accelerator_count": 1}},
            "job_spec.worker_pool_specs[0].machine_spec: NVIDIA_L4 attaches to g2-* machines, not 'n1-standard-4'",
        ),
    ],
)
def test_custom_jobs_vertex_would_refuse(double, spec, message):
    with pytest.raises(ApiError, match=re.escape(message)):
        double.job_service.create_job("custom_job", job(**spec))
    assert double.job_service.jobs == {}


ATTACHMENT = "projects/p-rehearsal/regions/europe-west4/networkAttachments/tfpipe"


@pytest.mark.parametrize(
    "accepted, refused, message",
    [
        (
            {"psc_interface_config": {"network_attachment": ATTACHMENT}},
            {"psc_interface_config": {"network_attachment": ATTACHMENT}, "network": "projects/4711/global/networks/v"},
            "job_spec: network and psc_interface_config cannot both be set",
        ),
        (
            {"psc_interface_config": {"network_attachment": "tfpipe"}},
            {"psc_interface_config": {"network_attachment": ATTACHMENT.replace("europe-west4", "us-central1")}},
            "job_spec.psc_interface_config.network_attachment "
            "'projects/p-rehearsal/regions/us-central1/networkAttachments/tfpipe' must be a network attachment's name "
            "or projects/P/regions/europe-west4/networkAttachments/NAME",
        ),
        (
            {"scheduling": {"strategy": "SPOT"}},
            {"scheduling": {"strategy": 5}},
            "job_spec.scheduling.strategy 5 is not a Scheduling.Strategy",
        ),
        (
            {"scheduling": {"strategy": "FLEX_START", "max_wait_duration": "1800s"}},
            {"scheduling": {"strategy": "SPOT", "max_wait_duration": "1800s"}},
            "job_spec.scheduling.max_wait_duration applies to the FLEX_START strategy only, not SPOT",
        ),
        (
            {"persistent_resource_id": "gpu-pool"},
            {"persistent_resource_id": "projects/p-rehearsal/locations/europe-west4/persistentResources/gpu-pool"},
            "job_spec.persistent_resource_id 'projects/p-rehearsal/locations/europe-west4/persistentResources/"
            "gpu-pool' must match [a-z]([a-z0-9-]{0,61}[a-z0-9])?",
        ),
    ],
)
def test_capacity_and_placement_as_vertex_takes_them(double, monkeypatch, accepted, refused, message):
    """The refused request creates no job; the accepted one is answered with its fields as sent."""
    with pytest.raises(ApiError, match=re.escape(message)) as error:
        double.job_service.create_job("custom_job", job(**refused))
    assert error.value.status == "INVALID_ARGUMENT" and double.job_service.jobs == {}
    monkeypatch.setattr(double.job_service, "_work", lambda job: None)  # no training: the request is the subject
    created = double.job_service.create_job("custom_job", job(**accepted))
    answered = to_dict(double.job_service.get_job(job_service.GetCustomJobRequest(name=created.name)))
    assert {k: answered["job_spec"][k] for k in accepted} == accepted


def test_a_tuning_jobs_trials_are_checked_as_a_custom_job_is(double):
    trial = job(network="projects/4711/global/networks/vpc", psc_interface_config={"network_attachment": "tfpipe"})
    tuning = hyperparameter_tuning_job.HyperparameterTuningJob(
        display_name="t",
        trial_job_spec=trial.custom_job.job_spec,
        max_trial_count=1,
        parallel_trial_count=1,
        study_spec={
            "metrics": [{"metric_id": "accuracy", "goal": "MAXIMIZE"}],
            "parameters": [{"parameter_id": "dropout", "double_value_spec": {"min_value": 0.1, "max_value": 0.5}}],
        },
    )
    request = job_service.CreateHyperparameterTuningJobRequest(parent=PARENT, hyperparameter_tuning_job=tuning)
    with pytest.raises(ApiError, match=re.escape("trial_job_spec: network and psc_interface_config cannot both")):
        double.job_service.create_job("hyperparameter_tuning_job", request)


def test_a_well_formed_identity_passes_the_checks(double):
    spec = {
        "service_account": SA,
        "network": "projects/4711/global/networks/vpc",
        "tensorboard": "projects/p-rehearsal/locations/europe-west4/tensorboards/7",
        "machine": {"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4", "accelerator_count": 1},
    }
    request = job(**spec)
    double.check(to_dict(request.custom_job))


def test_endpoints_models_and_deployments(double):
    key = "projects/p/locations/us-east1/keyRings/r/cryptoKeys/k"
    with pytest.raises(ApiError, match=f"encryption_spec.kms_key_name '{key}' must be a Cloud KMS key in europe-west4"):
        double.check({"display_name": "e", "encryption_spec": {"kms_key_name": key}})
    request = endpoint_service.DeployModelRequest(
        endpoint=f"{PARENT}/endpoints/1",
        deployed_model=endpoint_pb.DeployedModel(
            model=f"{PARENT}/models/2",
            dedicated_resources={"machine_spec": {"machine_type": "n1-standard-2"}, "min_replica_count": 0},
        ),
    )
    with pytest.raises(ApiError, match="deployed_model.dedicated_resources.min_replica_count must be at least 1"):
        double.endpoint_service.deploy_model(request)
    batch = {
        "dedicated_resources": {
            "machine_spec": {"machine_type": "n1-standard-4"},
            "starting_replica_count": 3,
            "max_replica_count": 2,
        }
    }
    with pytest.raises(ApiError, match="starting_replica_count 3 exceeds max_replica_count 2"):
        double.check(batch)


def test_cloud_storage_locations_are_gs_uris(double):
    """A model's artifacts and a batch job's sources and destination are read by Vertex's machines: a local path
    names nothing there."""
    with pytest.raises(ApiError, match=re.escape("artifact_uri 'runs/model' is not a Cloud Storage URI")):
        double._rest_upload(
            {"parent": PARENT},
            model_service.UploadModelRequest(
                parent=PARENT,
                model={"display_name": "m", "artifact_uri": "runs/model", "container_spec": {"image_uri": "s:1"}},
            ),
            {},
        )
    batch = {
        "input_config": {"gcs_source": {"uris": ["gs://b/in/a.jsonl", "/data/b.jsonl"]}},
        "output_config": {"gcs_destination": {"output_uri_prefix": "gs://b/out"}},
    }
    with pytest.raises(ApiError, match=re.escape("input_config.gcs_source.uris[1] '/data/b.jsonl' is not a Cloud")):
        double.check(batch)
    batch["input_config"]["gcs_source"]["uris"].pop()
    batch["output_config"]["gcs_destination"]["output_uri_prefix"] = "file:///out"
    with pytest.raises(ApiError, match=re.escape("output_config.gcs_destination.output_uri_prefix 'file:///out'")):
        double.check(batch)
    batch["output_config"]["gcs_destination"]["output_uri_prefix"] = "gs://b/out"
    double.check(batch)


def test_the_caller_must_be_able_to_act_as_the_service_account(double, tmp_path):
    """Vertex's IAM check of a request's service account: the runs' account may act as itself (iam.json starts
    with the set-up's binding); another account, or the same without the binding, is refused."""
    import json

    double.check(to_dict(job(service_account=SA).custom_job))
    other = "other-sa@p-rehearsal.iam.gserviceaccount.com"
    denied = f"Permission 'iam.serviceAccounts.actAs' denied on service account {other} (or it may not exist)."
    with pytest.raises(ApiError, match=re.escape(denied)) as refused:
        double.job_service.create_job("custom_job", job(service_account=other))
    assert refused.value.status == "PERMISSION_DENIED" and double.job_service.jobs == {}
    deployment = {"deployed_model": {"model": "m", "service_account": other}}
    with pytest.raises(ApiError, match=re.escape(denied)):
        double.check(deployment)

    iam = json.loads((tmp_path / "iam.json").read_text())
    assert iam["service_accounts"] == {SA: {"act_as": [f"serviceAccount:{SA}"]}}
    iam["service_accounts"][SA]["act_as"] = []  # the set-up without the self-binding
    (tmp_path / "iam.json").write_text(json.dumps(iam))
    again = VertexDouble(str(tmp_path), str(tmp_path / "state.json"), "p-rehearsal", "4711", "europe-west4", caller=SA)
    with pytest.raises(ApiError, match=re.escape(f"denied on service account {SA}")):
        again.check(to_dict(job(service_account=SA).custom_job))


def test_kfp_reads_a_compiled_template_with_the_same_documents_during_a_rehearsal_and_as_before_after_it():
    from kfp.dsl import structures

    from pipelines.rehearsal import run
    from tests.helpers.compiled import compiled_text

    text = compiled_text("vertex")
    before = structures.load_documents_from_yaml(text)
    with run._kfp_local_patches("p-rehearsal", "europe-west4"):
        during = structures.load_documents_from_yaml(text)
        reader = structures.yaml
    assert during == before and len(during[0]["root"]["dag"]["tasks"]) > 10
    assert type(reader).__name__ == "_LibYaml" and structures.yaml is yaml


BATCH = {
    "display_name": "b",
    "model": f"{PARENT}/models/1@1",
    "input_config": {"instances_format": "bigquery", "bigquery_source": {"input_uri": "bq://p-rehearsal.shop.rows"}},
    "output_config": {"predictions_format": "jsonl", "gcs_destination": {"output_uri_prefix": "gs://b/out"}},
    "dedicated_resources": {
        "machine_spec": {
            "machine_type": "n1-standard-4",
            "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 1,
        },
        "starting_replica_count": 1,
        "max_replica_count": 1,
    },
}


def batch_request(**changes) -> job_service.CreateBatchPredictionJobRequest:
    from google.cloud.aiplatform_v1.types import batch_prediction_job

    job = {**BATCH, **changes}
    return job_service.CreateBatchPredictionJobRequest(
        parent=PARENT, batch_prediction_job=batch_prediction_job.BatchPredictionJob(job)
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"input_config": {"instances_format": "bigquery", "gcs_source": {"uris": ["gs://b/in.jsonl"]}}},
            "batch_prediction_job.input_config.bigquery_source.input_uri is required with instances_format bigquery",
        ),
        (
            {"input_config": {"instances_format": "jsonl", "bigquery_source": {"input_uri": "bq://p-rehearsal.s.t"}}},
            "batch_prediction_job.input_config.gcs_source.uris is required with instances_format jsonl",
        ),
        (
            {"input_config": {"instances_format": "bigquery", "bigquery_source": {"input_uri": "bq://p-rehearsal.s"}}},
            "input_config.bigquery_source.input_uri 'bq://p-rehearsal.s' is not a BigQuery table "
            "(bq://PROJECT.DATASET.TABLE)",
        ),
        (
            {"output_config": {"predictions_format": "csv", "gcs_destination": {"output_uri_prefix": "gs://b/out"}}},
            "batch_prediction_job.output_config.predictions_format 'csv' is not one of the model's "
            "supported_output_storage_formats (jsonl, bigquery)",
        ),
        (
            {"output_config": {"predictions_format": "bigquery", "gcs_destination": {"output_uri_prefix": "gs://b/o"}}},
            "batch_prediction_job.output_config.bigquery_destination.output_uri is required with predictions_format "
            "bigquery",
        ),
        (
            {"output_config": {"predictions_format": "bigquery", "bigquery_destination": {"output_uri": "gs://b/o"}}},
            "output_config.bigquery_destination.output_uri 'gs://b/o' is not a BigQuery project or dataset "
            "(bq://PROJECT or bq://PROJECT.DATASET)",
        ),
    ],
)
def test_a_batch_job_vertex_refuses_is_refused(double, changes, message):
    with pytest.raises(ApiError) as refused:
        double.job_service.create_job("batch_prediction_job", batch_request(**changes))
    assert (refused.value.status, refused.value.message) == ("INVALID_ARGUMENT", message)


@pytest.mark.parametrize(
    "changes",
    [
        {},  # a BigQuery table to JSON Lines on Cloud Storage
        {
            "output_config": {
                "predictions_format": "bigquery",
                "bigquery_destination": {"output_uri": "bq://p-rehearsal"},
            }
        },
        {
            "input_config": {"instances_format": "csv", "gcs_source": {"uris": ["gs://b/in.csv"]}},
            "output_config": {
                "predictions_format": "bigquery",
                "bigquery_destination": {"output_uri": "bq://p-rehearsal.predictions"},
            },
        },
    ],
)
def test_the_batch_job_inputs_and_outputs_vertex_takes_are_taken(double, changes):
    request = batch_request(**changes)
    created = to_dict(double.job_service.create_job("batch_prediction_job", request))
    double.job_service.stop()
    asked = to_dict(request.batch_prediction_job)
    assert {k: created[k] for k in asked} == asked
