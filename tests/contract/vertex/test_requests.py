"""What the compiled Vertex pipeline asks of Vertex AI: each Google Cloud Pipeline Component task runs its own
launcher (tests/helpers/gcpc.py) on the task's compiled inputs, and the request it sends is asserted field by field at the
API client boundary: the JobService gRPC stubs (custom, tuning and batch prediction jobs; tests/doubles/gapic.py) and
`requests` for the launchers that call the REST API (model upload, endpoint creation, deploy)."""

import json
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1.services.job_service.transports.grpc import JobServiceGrpcTransport
from google.cloud.aiplatform_v1.types import (
    batch_prediction_job,
    completion_stats,
    custom_job,
    hyperparameter_tuning_job,
    job_state,
)
from google.oauth2.credentials import Credentials

from components.lib.study.spec import DEFAULT_STUDY
from components.lib.vertex.registry import version_labels
from pipelines.config import Platform
from pipelines.rehearsal.api.messages import to_dict
from tests.doubles.gapic import FakeStub
from tests.helpers import vertex_expectations as expect
from tests.helpers.compiled import compiled_docs, dag
from tests.helpers.gcpc import Launch
from tests.helpers.platforms import IDENTITY, KEY, LABELS, NETWORK, PLATFORM, SA

LOCATION = "europe-west4"
PARENT = f"projects/my-project/locations/{LOCATION}"
MODEL = f"{PARENT}/models/111"
ENDPOINT = f"{PARENT}/endpoints/777"
COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"  # a git SHA-1
POOLS = [
    {
        "machine_spec": {"machine_type": "n1-standard-8"},
        "replica_count": 1,
        "container_spec": {
            "image_uri": "example.com/tfpipe/trainer:abc",
            "command": ["python", "-m", "trainer.task"],
            "args": ["--data-dir", "gs://b/root/prepare-data/dataset"],
        },
    }
]


@pytest.fixture(scope="module")
def specs():
    return {
        "training": compiled_docs("vertex", "training", PLATFORM)[0],
        "batch": compiled_docs("vertex", "batch_prediction", PLATFORM)[0],
    }


@pytest.fixture(autouse=True)
def credentials(monkeypatch):
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (Credentials(token="test-token"), "my-project"))


def job_stubs(monkeypatch, kind, message_class, stats=None):
    """JobService Create<kind>/Get<kind>: the created job answers SUCCEEDED when the launcher polls it (with
    `stats`, a dict of CompletionStats fields, as its completion stats)."""
    created = []

    def create(request):
        job = message_class(getattr(request, kind))
        first, *rest = kind.split("_")
        job.name = f"{PARENT}/{first}{''.join(r.title() for r in rest)}s/42"  # e.g. batchPredictionJobs
        created.append(request)
        return job

    def get(request):
        job = message_class(getattr(created[-1], kind), name=request.name)
        job.state = job_state.JobState.JOB_STATE_SUCCEEDED
        if stats is not None:
            job.completion_stats = completion_stats.CompletionStats(**stats)
        return job

    FakeStub(create).bind(JobServiceGrpcTransport, f"create_{kind}", monkeypatch)
    FakeStub(get).bind(JobServiceGrpcTransport, f"get_{kind}", monkeypatch)
    return created


def launched_custom_job(spec: dict, monkeypatch, tmp_path):
    """The CreateCustomJob request GCPC's launcher sends for the compiled custom-training-job task of `spec`."""
    created = job_stubs(monkeypatch, "custom_job", custom_job.CustomJob)
    Launch(
        spec,
        dag(spec)["custom-training-job"],
        {
            "worker_pool_specs": POOLS,
            "base_output_directory": "gs://b/root/plan/job_dir/tfpipe-training-20261123",
            "display_name": "tfpipe-training-20261123-train",
            "project": "my-project",
        },
        {},
        tmp_path,
    ).run()
    [request] = created
    return request


def test_custom_job_runs_as_the_runs_identity_with_tensorboard_cmek_and_labels(specs, monkeypatch, tmp_path):
    request = launched_custom_job(specs["training"], monkeypatch, tmp_path)
    expect.check_custom_job(to_dict(request), PLATFORM, workers=1)
    assert request.parent == PARENT
    job = request.custom_job
    assert job.display_name == "tfpipe-training-20261123-train"
    assert dict(job.labels) == LABELS
    assert job.encryption_spec.kms_key_name == KEY
    spec = job.job_spec
    assert (spec.service_account, spec.network, spec.tensorboard) == (SA, NETWORK, PLATFORM.tensorboard)
    assert spec.base_output_directory.output_uri_prefix == "gs://b/root/plan/job_dir/tfpipe-training-20261123"
    assert spec.scheduling.restart_job_on_worker_restart
    assert [
        (p.machine_spec.machine_type, p.replica_count, p.container_spec.image_uri) for p in spec.worker_pool_specs
    ] == [("n1-standard-8", 1, "example.com/tfpipe/trainer:abc")]


@pytest.mark.parametrize(
    "update, scheduling, placement",
    [
        (
            {
                "training_capacity": {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
                "network": "",
                "psc_network_attachment": "tfpipe-attachment",
            },
            {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
            {"psc_interface_config": {"network_attachment": "tfpipe-attachment"}},
        ),
        (
            {"training_capacity": {"strategy": "FLEX_START"}},
            {"strategy": "FLEX_START", "max_wait_duration": "86400s"},
            {},
        ),
        ({"training_capacity": {"strategy": "SPOT"}}, {"strategy": "SPOT"}, {}),
        (
            {"persistent_resource_id": "projects/my-project/locations/europe-west4/persistentResources/gpu-pool"},
            {"strategy": "STANDARD"},
            {"persistent_resource_id": "gpu-pool"},
        ),
    ],
)
def test_custom_job_takes_the_capacity_persistent_resource_and_psc_interface(
    monkeypatch, tmp_path, update, scheduling, placement
):
    """GCPC's launcher sends the strategy, the wait only with FLEX_START, the persistent resource's ID and the
    PSC interface (then no network)."""
    platform = Platform.model_validate({**PLATFORM.model_dump(), **update})
    spec = compiled_docs("vertex", "training", platform)[0]
    request = launched_custom_job(spec, monkeypatch, tmp_path)
    expect.check_custom_job(to_dict(request), platform, workers=1)
    job_spec = to_dict(request.custom_job)["job_spec"]
    assert job_spec["scheduling"] == {"timeout": "604800s", "restart_job_on_worker_restart": True, **scheduling}
    assert {k: job_spec[k] for k in ("persistent_resource_id", "psc_interface_config", "network") if k in job_spec} == {
        **placement,
        **({"network": platform.network} if platform.network else {}),
    }


def test_tuning_job_runs_as_the_runs_identity_with_its_study(specs, monkeypatch, tmp_path):
    created = job_stubs(monkeypatch, "hyperparameter_tuning_job", hyperparameter_tuning_job.HyperparameterTuningJob)
    Launch(
        specs["training"],
        dag(specs["training"], "comp-condition-2")["hyperparameter-tuning-job"],
        {
            "worker_pool_specs": POOLS,
            "base_output_directory": "gs://b/root/plan/job_dir/tfpipe-training-20261123",
            "display_name": "tfpipe-training-20261123-tune",
            "project": "my-project",
        },
        {},
        tmp_path,
    ).run()
    [request] = created
    expect.check_tuning_job(to_dict(request), PLATFORM, DEFAULT_STUDY)
    job = request.hyperparameter_tuning_job
    assert job.display_name == "tfpipe-training-20261123-tune"
    assert job.encryption_spec.kms_key_name == KEY
    trial = job.trial_job_spec
    assert (trial.service_account, trial.network) == (SA, NETWORK)
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == (4, 2, 1)
    assert [(m.metric_id, m.goal.name) for m in job.study_spec.metrics] == [("val_accuracy", "MAXIMIZE")]
    assert [(p.parameter_id, p.scale_type.name) for p in job.study_spec.parameters] == [
        ("learning_rate", "UNIT_LOG_SCALE"),
        ("hidden_units", "UNIT_LOG_SCALE"),
        ("dropout", "UNIT_LINEAR_SCALE"),
    ]
    assert job.study_spec.parameters[1].integer_value_spec.max_value == 256
    assert job.study_spec.measurement_selection_type.name == "LAST_MEASUREMENT"


@pytest.mark.parametrize(
    "update, trials",
    [
        ({"training_capacity": {"strategy": "SPOT"}}, {"scheduling": {"strategy": "SPOT"}, "network": NETWORK}),
        (
            {
                "training_capacity": {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
                "network": "",
                "psc_network_attachment": f"projects/my-project/regions/{LOCATION}/networkAttachments/tfpipe",
            },
            {
                "scheduling": {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
                "psc_interface_config": {
                    "network_attachment": f"projects/my-project/regions/{LOCATION}/networkAttachments/tfpipe"
                },
            },
        ),
        (
            {"persistent_resource_id": f"{PARENT}/persistentResources/gpu-pool"},
            {"persistent_resource_id": "gpu-pool", "network": NETWORK},
        ),
    ],
    ids=["spot", "flex-start-psc", "persistent-resource"],
)
def test_the_rehearsals_vertex_double_takes_the_tuning_jobs_trials_capacity_and_placement(
    monkeypatch, tmp_path, update, trials
):
    """GCPC's launcher on the compiled tuning task sends the trials' strategy, wait, persistent resource and PSC
    interface, and the rehearsal's Vertex AI double (its checks of rules.py and jobs.py) takes them as sent."""
    from pipelines.rehearsal.api import VertexDouble

    platform = Platform.model_validate({**PLATFORM.model_dump(), **update})
    spec = compiled_docs("vertex", "training", platform)[0]
    double = VertexDouble(  # its IAM as the platform's set-up grants it (the key's grant to Vertex's agent)
        str(tmp_path / "double"),
        str(tmp_path / "state.json"),
        "my-project",
        "123",
        LOCATION,
        caller=SA,
        platform=platform,
    )
    jobs = double.job_service
    monkeypatch.setattr(jobs, "_work", lambda job: None)  # no trials: the request is the subject

    def create(request):
        job = jobs.create_job("hyperparameter_tuning_job", request)
        jobs.jobs[job.name]["data"]["state"] = "JOB_STATE_SUCCEEDED"
        return job

    FakeStub(create).bind(JobServiceGrpcTransport, "create_hyperparameter_tuning_job", monkeypatch)
    FakeStub(jobs.get_job).bind(JobServiceGrpcTransport, "get_hyperparameter_tuning_job", monkeypatch)
    Launch(
        spec,
        dag(spec, "comp-condition-2")["hyperparameter-tuning-job"],
        {
            "worker_pool_specs": POOLS,
            "base_output_directory": "gs://b/root/plan/job_dir/tfpipe-training-20261123",
            "display_name": "tfpipe-training-20261123-tune",
            "project": "my-project",
        },
        {},
        tmp_path / "launch",
    ).run()
    [job] = jobs.jobs.values()
    expect.check_tuning_job({"hyperparameter_tuning_job": job["data"]}, platform, DEFAULT_STUDY)
    trial = job["data"]["trial_job_spec"]
    placement = ("scheduling", "persistent_resource_id", "psc_interface_config", "network")
    assert {k: trial[k] for k in placement if k in trial} == trials


def test_batch_prediction_job_runs_as_the_runs_identity(specs, monkeypatch, tmp_path):
    created = job_stubs(monkeypatch, "batch_prediction_job", batch_prediction_job.BatchPredictionJob)
    model = {
        "uri": f"https://{LOCATION}-aiplatform.googleapis.com/v1/{MODEL}@3",
        "metadata": {"resourceName": f"{MODEL}@3"},
        "type": "google.VertexModel",
    }
    Launch(
        specs["batch"],
        dag(specs["batch"])["model-batch-predict"],
        {
            "job_display_name": "tfpipe-batch-prediction-20261123-batch",
            "gcs_source_uris": ["gs://b/in/a.jsonl"],
            "gcs_destination_output_uri_prefix": "gs://b/root/run-7/plan-batch-prediction/destination",
            "instances_format": "jsonl",
            "key_field": "",
            "manual_batch_tuning_parameters_batch_size": 64,
            "project": "my-project",
        },
        {"model": model},
        tmp_path,
    ).run()
    [request] = created
    expect.check_batch_job(to_dict(request), PLATFORM)
    job = request.batch_prediction_job
    assert job.display_name == "tfpipe-batch-prediction-20261123-batch"
    assert job.model == f"{MODEL}@3"
    assert job.service_account == SA and job.encryption_spec.kms_key_name == KEY
    assert dict(job.labels) == {**LABELS, "pipeline": "tfpipe-batch-prediction"}
    assert job.output_config.gcs_destination.output_uri_prefix == "gs://b/root/run-7/plan-batch-prediction/destination"
    assert (
        job.dedicated_resources.machine_spec.machine_type,
        job.dedicated_resources.starting_replica_count,
        job.dedicated_resources.max_replica_count,
    ) == ("n1-highmem-8", 3, 7)


def registry_version_on_gcs(monkeypatch, bucket, model_dir, version="3") -> str:
    """The registry model `MODEL` whose version `version` (any alias) has `model_dir` uploaded as its artifacts
    (ModelService stubs; the files in the GCS emulator's bucket); returns the artifact URI."""
    from google.cloud.aiplatform_v1.services.model_service.transports.grpc import ModelServiceGrpcTransport
    from google.cloud.aiplatform_v1.types import model as model_pb, model_service

    for path in Path(model_dir).rglob("*"):
        if path.is_file():
            bucket.blob(f"models/m/{path.relative_to(model_dir)}").upload_from_filename(str(path))
    uri = f"gs://{bucket.name}/models/m"
    FakeStub(lambda r: model_service.ListModelsResponse(models=[model_pb.Model(name=MODEL)])).bind(
        ModelServiceGrpcTransport, "list_models", monkeypatch
    )
    FakeStub(lambda r: model_pb.Model(name=MODEL, version_id=version, artifact_uri=uri)).bind(
        ModelServiceGrpcTransport, "get_model", monkeypatch
    )
    return uri


def planned_batch_job(
    specs, monkeypatch, tmp_path, instances, instances_format, stats=None, output_prefix="", vertex=None, **options
):
    """Run the compiled pipeline's two steps: `plan-batch-prediction` (its function, on the pipeline's constants)
    and the GCPC launcher of `model-batch-predict` on the plan's outputs; returns the CreateBatchPredictionJob
    request's job and the launch (its `gcp_resources` output). `stats`: the finished job's completion stats;
    `vertex`: a started Vertex double the JobService calls reach instead (the caller redirects to it)."""
    from kfp import dsl

    from components.plan_batch_prediction import plan_batch_prediction

    destination = dsl.Artifact(name="destination", uri="gs://b/root/run-7/plan-batch-prediction/destination")
    plan = plan_batch_prediction(
        "",
        "digits",
        "champion",
        instances,
        output_prefix,
        "my-project",
        LOCATION,
        "tfpipe-batch-prediction-20261123",
        destination,
        instances_format=instances_format,
        **options,
    )
    created = (
        [] if vertex else job_stubs(monkeypatch, "batch_prediction_job", batch_prediction_job.BatchPredictionJob, stats)
    )
    model = {"uri": plan.model_uri, "metadata": {"resourceName": plan.model_name}, "type": "google.VertexModel"}
    given = {
        "job_display_name": plan.job_display_name,
        "gcs_source_uris": plan.gcs_source_uris,
        "bigquery_source_input_uri": plan.bigquery_source_input_uri,
        "gcs_destination_output_uri_prefix": plan.output_prefix,
        "bigquery_destination_output_uri": plan.bigquery_destination_output_uri,
        "predictions_format": plan.predictions_format,
        "instances_format": instances_format,
        "key_field": options.get("key_field", ""),
        "manual_batch_tuning_parameters_batch_size": 64,
        "project": "my-project",
        "included_fields": plan.included_fields,
        "excluded_fields": plan.excluded_fields,
        "instance_type": plan.instance_type,
        "model_parameters": plan.model_parameters,
    }
    launch = Launch(specs["batch"], dag(specs["batch"])["model-batch-predict"], given, {"model": model}, tmp_path).run()
    [request] = created
    return request.batch_prediction_job, launch


def test_csv_batch_job_sends_the_models_feature_columns(specs, monkeypatch, tmp_path, gcs_emulator, iris_model):
    """A CSV shaped like the training CSV (a label column, columns in another order): the job's instance config
    names the model's feature columns, read from the version's artifacts, so Vertex sends those, by name, in the
    model's order."""
    registry_version_on_gcs(monkeypatch, gcs_emulator, iris_model / "model")
    job, _ = planned_batch_job(
        specs, monkeypatch, tmp_path, "gs://b/in/iris.csv", "csv", key_field="id", excluded_fields=["label"]
    )
    assert job.model == f"{MODEL}@3"
    assert job.input_config.instances_format == "csv"
    assert list(job.input_config.gcs_source.uris) == ["gs://b/in/iris.csv"]
    config = job.instance_config
    assert list(config.included_fields) == [
        "sepal length (cm)",
        "sepal width (cm)",
        "petal length (cm)",
        "petal width (cm)",
    ]
    assert (list(config.excluded_fields), config.key_field, config.instance_type) == ([], "id", "")


def test_jsonl_batch_job_with_named_fields_as_arrays(specs, monkeypatch, tmp_path, gcs_emulator, tmp_path_factory):
    """A model that names no feature columns: the job gets the user's fields and instance type as given."""
    model_dir = tmp_path_factory.mktemp("plain")
    (model_dir / "saved_model.pb").write_bytes(b"")
    registry_version_on_gcs(monkeypatch, gcs_emulator, model_dir)
    job, _ = planned_batch_job(
        specs, monkeypatch, tmp_path, "gs://b/in/a.jsonl", "jsonl", included_fields=["b", "a"], instance_type="array"
    )
    assert (list(job.instance_config.included_fields), job.instance_config.instance_type) == (["b", "a"], "array")
    with pytest.raises(ValueError, match="give included_fields or excluded_fields, not both"):
        planned_batch_job(
            specs, monkeypatch, tmp_path, "gs://b/in/a.jsonl", "jsonl", included_fields=["a"], excluded_fields=["b"]
        )


def test_a_file_list_batch_job_of_an_image_model_names_its_encoded_image_signature(
    specs, monkeypatch, tmp_path, gcs_emulator, image_folder_model
):
    """Vertex sends each listed file as {"b64": ...}: the plan reads the version's signatures from its
    saved_model.pb and asks for `serving_image_bytes` in the job's model parameters (this project's serving
    container passes `parameters.signature_name` on); a tabular model's CSV job carries none."""
    _, _, job_dir = image_folder_model
    registry_version_on_gcs(monkeypatch, gcs_emulator, job_dir / "model")
    job, _ = planned_batch_job(specs, monkeypatch, tmp_path, "gs://b/in/images.txt", "file-list")
    assert job.input_config.instances_format == "file-list"
    assert dict(job.model_parameters) == {"signature_name": "serving_image_bytes"}
    assert not job.instance_config.included_fields and not job.instance_config.instance_type
    job, _ = planned_batch_job(
        specs, monkeypatch, tmp_path / "named", "gs://b/in/images.jsonl", "jsonl", signature_name="serving_image_bytes"
    )
    assert dict(job.model_parameters) == {"signature_name": "serving_image_bytes"}
    job, _ = planned_batch_job(specs, monkeypatch, tmp_path / "pixels", "gs://b/in/pixels.jsonl", "jsonl")
    assert not job.model_parameters


def test_a_batch_job_whose_instances_all_failed_fails_the_check_step(specs, monkeypatch, tmp_path, gcs_emulator):
    """Vertex's job SUCCEEDS whatever its instances do: the next step reads the job (named in the launcher's
    `gcp_resources`) and fails with its counts when the error budget is exceeded."""
    from components.check_batch_prediction_job import check_batch_prediction_job
    from components.lib.batch.budget import BatchPredictionError

    model_dir = tmp_path / "plain"
    model_dir.mkdir()
    (model_dir / "saved_model.pb").write_bytes(b"")
    registry_version_on_gcs(monkeypatch, gcs_emulator, model_dir)
    job, launch = planned_batch_job(
        specs,
        monkeypatch,
        tmp_path / "job",
        "gs://b/in/wine.csv",
        "csv",
        stats={"successful_count": 0, "failed_count": 178},
    )
    name = f"{PARENT}/batchPredictionJobs/42"
    assert json.loads(launch.output("gcp_resources"))["resources"][0]["resourceUri"].endswith(f"/v1/{name}")
    with pytest.raises(
        BatchPredictionError,
        match=r"^178 of 178 instances failed, 0 succeeded \(100\.0%\), above "
        rf"max_error_fraction 10\.0% \(job {name}\)",
    ):
        check_batch_prediction_job(launch.output("gcp_resources"), 0.1)


def test_the_check_step_reads_the_jobs_completion_stats(monkeypatch):
    from components.check_batch_prediction_job import check_batch_prediction_job

    name = f"{PARENT}/batchPredictionJobs/42"

    def get(request):
        return batch_prediction_job.BatchPredictionJob(
            name=request.name, completion_stats=completion_stats.CompletionStats(successful_count=95, failed_count=5)
        )

    stub = FakeStub(get).bind(JobServiceGrpcTransport, "get_batch_prediction_job", monkeypatch)
    resources = json.dumps(
        {
            "resources": [
                {
                    "resourceType": "BatchPredictionJob",
                    "resourceUri": f"https://{LOCATION}-aiplatform.googleapis.com/v1/{name}",
                }
            ]
        }
    )
    assert check_batch_prediction_job(resources, 0.1) == (95, 5)
    [(rpc, request, host, routing)] = stub.calls
    assert (rpc, request.name, host, routing) == (
        "GetBatchPredictionJobRequest",
        name,
        f"{LOCATION}-aiplatform.googleapis.com:443",
        f"name={name}",
    )
    with pytest.raises(Exception, match="above max_error_fraction 1.0%"):
        check_batch_prediction_job(resources, 0.01)


class Rest:
    """`requests.post` / `requests.get` as GCPC's REST launchers call them: each call recorded (method, URL, JSON
    body); a POST answers a finished long-running operation with `response`."""

    def __init__(self, monkeypatch, response):
        self.calls, self.response = [], response
        monkeypatch.setattr("requests.post", self.post)

    def post(self, url, data, headers):
        self.calls.append(("POST", url, json.loads(data), headers["Authorization"]))
        return self

    def json(self):
        return {"name": f"{PARENT}/operations/9", "done": True, "response": self.response}


def test_model_upload_request_carries_cmek_labels_the_commit_and_the_serving_container(specs, monkeypatch, tmp_path):
    rest = Rest(monkeypatch, {"model": MODEL, "modelVersionId": "4"})
    branch = dag(specs["training"], "comp-condition-7")["model-upload"]
    parent = {
        "uri": f"https://{LOCATION}-aiplatform.googleapis.com/v1/{MODEL}",
        "metadata": {"resourceName": MODEL},
        "type": "google.VertexModel",
    }
    unmanaged = {
        "uri": "gs://b/root/import-trained-model/job_dir/model",
        "type": "google.UnmanagedContainerModel",
        "metadata": {"containerSpec": PLATFORM.serving_container_spec()},
    }
    # the upload's labels: find-model's output, the labels it is compiled with and the run's source_commit
    find = dag(specs["training"], "comp-condition-4")["find-model"]["inputs"]["parameters"]
    assert branch["inputs"]["parameters"]["labels"] == {"componentInputParameter": "pipelinechannel--find-model-labels"}
    labels = version_labels(find["labels"]["runtimeValue"]["constant"], COMMIT)
    launch = Launch(
        specs["training"],
        branch,
        {"project": "my-project", "labels": labels},
        {"parent_model": parent, "unmanaged_container_model": unmanaged},
        tmp_path,
    ).run()
    [(method, url, body, auth)] = rest.calls
    expect.check_upload(body, PLATFORM, COMMIT)
    assert (method, url, auth) == (
        "POST",
        f"https://{LOCATION}-aiplatform.googleapis.com/v1/{PARENT}/models:upload",
        "Bearer test-token",
    )
    assert body == {
        "parent_model": MODEL,
        "model": {
            "display_name": "digits",
            "encryption_spec": {"kms_key_name": KEY},
            "labels": {**LABELS, "source_commit": COMMIT},  # the version records the commit that produced it
            "pipeline_job": f"{PARENT}/pipelineJobs/run-uuid-1",
            "artifact_uri": "gs://b/root/import-trained-model/job_dir/model",
            # the GPU serving image: the deployment gets a T4
            "container_spec": {"image_uri": "example.com/serving-gpu:2", "ports": [{"container_port": 8080}]},
        },
    }
    assert "version_aliases" not in body["model"]  # the alias moves only once the version serves
    output = json.loads(launch.workdir.joinpath("executor_output.json").read_text())
    assert output["artifacts"]["model"]["artifacts"][0]["metadata"]["resourceName"] == f"{MODEL}@4"


def test_deploy_request_runs_the_model_as_the_runs_service_account(specs, monkeypatch, tmp_path):
    rest = Rest(monkeypatch, {"deployedModel": {"id": "9"}})
    endpoint = {
        "uri": f"https://{LOCATION}-aiplatform.googleapis.com/v1/{ENDPOINT}",
        "metadata": {"resourceName": ENDPOINT},
        "type": "google.VertexEndpoint",
    }
    model = {
        "uri": f"https://{LOCATION}-aiplatform.googleapis.com/v1/{MODEL}@4",
        "metadata": {"resourceName": f"{MODEL}@4"},
        "type": "google.VertexModel",
    }
    Launch(
        specs["training"],
        dag(specs["training"], "comp-condition-11")["deploy-vertex-model"],
        {"traffic_split": {"0": 10, "d1": 90}},
        {"endpoint": endpoint, "model": model},
        tmp_path,
    ).run()
    [(method, url, body, _)] = rest.calls
    expect.check_deploy(body, PLATFORM)
    assert (method, url) == ("POST", f"https://{LOCATION}-aiplatform.googleapis.com/v1/{ENDPOINT}:deployModel")
    assert body["traffic_split"] == {"0": 10, "d1": 90}
    deployed = body["deployed_model"]
    assert deployed["model"] == f"{MODEL}@4" and deployed["service_account"] == SA
    assert deployed["display_name"] == "digits"  # GCPC 2.22's ModelDeployOp leaves it out
    assert deployed["dedicated_resources"]["machine_spec"] == {
        "machine_type": "n1-highcpu-4",
        "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1,
    }
    assert (
        deployed["dedicated_resources"]["min_replica_count"],
        deployed["dedicated_resources"]["max_replica_count"],
    ) == (2, 5)


def test_every_gcpc_task_that_takes_the_identity_gets_it(specs):
    """No GCPC task of either pipeline leaves an identity input it takes at its default (the model and the endpoint
    this project creates itself take the key as `encryption_key`: tests/contract/vertex/test_pipeline_compile.py)."""
    checked = {}
    for spec in specs.values():
        for component in [spec["root"], *spec["components"].values()]:
            for name, task in component.get("dag", {}).get("tasks", {}).items():
                takes = spec["components"][task["componentRef"]["name"]]["inputDefinitions"].get("parameters", {})
                for field, value in IDENTITY.items():
                    if field in takes:
                        assert task["inputs"]["parameters"][field]["runtimeValue"]["constant"] == value, (name, field)
                        checked.setdefault(name, []).append(field)
    assert checked == {
        "custom-training-job": ["service_account", "network", "encryption_spec_key_name"],
        "hyperparameter-tuning-job": ["service_account", "network", "encryption_spec_key_name"],
        "model-upload": ["encryption_spec_key_name"],
        "deploy-vertex-model": ["service_account"],
        "model-batch-predict": ["service_account", "encryption_spec_key_name"],
    }


BATCH_GPU_PLATFORM = Platform.model_validate(
    {
        **PLATFORM.model_dump(),
        "batch_machine_type": "n1-standard-8",
        "batch_accelerator_type": "NVIDIA_TESLA_T4",
        "batch_accelerator_count": 2,
    }
)


def test_a_bigquery_batch_job_on_gpus_reaches_the_vertex_double_as_this_request(
    monkeypatch, tmp_path, gcs_emulator, iris_model
):
    """instances_format bigquery with a bq:// table, predictions into a BigQuery dataset, two T4s a replica: the
    plan step and GCPC's launcher, through the Vertex double's gRPC API, create exactly this BatchPredictionJob; the
    double takes it (Vertex's checks) and records it, and the job then fails in one line (no BigQuery here)."""
    from pipelines.rehearsal import redirect
    from pipelines.rehearsal.api import VertexDouble

    registry_version_on_gcs(monkeypatch, gcs_emulator, iris_model / "model")
    spec = {"batch": compiled_docs("vertex", "batch_prediction", BATCH_GPU_PLATFORM)[0]}
    double = VertexDouble(
        str(tmp_path / "double"),
        str(tmp_path / "double" / "state.json"),
        "my-project",
        "4711",
        LOCATION,
        caller=SA,
        platform=BATCH_GPU_PLATFORM,
    ).start()
    try:
        with (
            redirect.redirected(double.grpc_target, double.http_base, "my-project"),
            pytest.raises(ValueError, match="error state: 5"),
        ):
            planned_batch_job(
                spec,
                monkeypatch,
                tmp_path,
                "bq://my-project.shop.iris_rows",
                "bigquery",
                output_prefix="bq://my-project.predictions",
                key_field="id",
                vertex=double,
            )
    finally:
        double.stop()
    records = [json.loads(line) for line in Path(double.requests_path).read_text().splitlines()]
    [create] = [r["request"] for r in records if r["method"] == "JobService.CreateBatchPredictionJob"]
    assert create == {
        "parent": PARENT,
        "batch_prediction_job": {
            "display_name": "tfpipe-batch-prediction-20261123-batch",
            "model": f"{MODEL}@3",
            "input_config": {
                "instances_format": "bigquery",
                "bigquery_source": {"input_uri": "bq://my-project.shop.iris_rows"},
            },
            "instance_config": {
                "key_field": "id",
                "included_fields": ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"],
            },
            "output_config": {
                "predictions_format": "bigquery",
                "bigquery_destination": {"output_uri": "bq://my-project.predictions"},
            },
            "dedicated_resources": {
                "machine_spec": {
                    "machine_type": "n1-standard-8",
                    "accelerator_type": "NVIDIA_TESLA_T4",
                    "accelerator_count": 2,
                },
                "starting_replica_count": 3,
                "max_replica_count": 7,
            },
            "service_account": SA,
            "manual_batch_tuning_parameters": {"batch_size": 64},
            "labels": {**LABELS, "pipeline": "tfpipe-batch-prediction"},
            "encryption_spec": {"kms_key_name": KEY},
        },
    }
    expect.check_batch_job(create, BATCH_GPU_PLATFORM)
    assert [e["message"] for e in double.errors] == [
        "the rehearsal has no BigQuery: a batch job that reads or writes BigQuery is checked and recorded, not run"
    ]
