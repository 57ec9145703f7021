"""Delivery: submit, schedule and publish (pipelines/delivery/, templates.py, submit.py, schedule.py, publish.py and
the CLI).

Vertex AI: google-cloud-aiplatform runs for real (PipelineJob / PipelineJobSchedule build every request, the GAPIC
clients coerce and route them); only the gRPC stubs of the transports are replaced, recording each request and
answering with real aiplatform_v1 messages. The pipeline-root bucket check aiplatform makes before a submission
goes to the GCS emulator. Kubeflow Pipelines, Artifact Registry's KFP endpoint and its download URLs are local HTTP
servers speaking their REST APIs, so kfp.Client, kfp.registry.RegistryClient and aiplatform's template download
run unchanged.
"""

import email.parser
import http.client
import json
import urllib.request

import pytest
import yaml
from click.testing import CliRunner
from google.cloud.aiplatform_v1.types import (
    pipeline_job as job_pb,
    pipeline_service,
    pipeline_state,
    schedule as schedule_pb,
    schedule_service,
)
from google.cloud.resourcemanager_v3.types import projects as project_pb

from pipelines.cli import cli
from pipelines.config import load_config
from pipelines.delivery import delivery_for
from pipelines.preflight import manifest_url, template_images
from pipelines.templates import TemplateError, load_template, parse_params
from tests.doubles.google_http import access_routes
from tests.helpers import delivery
from tests.helpers.delivery import (
    CHECKS_PASSED,
    COMPONENTS,
    IMAGES,
    LOCATION,
    NETWORK,
    PARENT,
    PINNED,
    PREFLIGHT_OK,
    PROJECT,
    PROJECT_NUMBER,
    REGISTRY,
    ROOT,
    SA,
    SERVING,
    TRAINER,
    pinned_spec,
    pipeline_job_answers,
    schedule_answers,
)

HOST = f"{LOCATION}-aiplatform.googleapis.com:443"

# the shared fixtures: the Vertex double, config, local HTTP API and compiled templates; no real credentials
anonymous, config, http_api, vertex = delivery.anonymous, delivery.config, delivery.http_api, delivery.vertex
kubeflow_spec, vertex_spec = delivery.kubeflow_spec, delivery.vertex_spec


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def after_preflight(output: str) -> str:
    """A Vertex submit's or schedule's output after the pre-flight checks' line."""
    assert output.startswith(PREFLIGHT_OK), output
    return output[len(PREFLIGHT_OK) :]


# --- parameters ---------------------------------------------------------------------------------------------------


def test_params_are_typed_and_checked_against_the_template(vertex_spec):
    values = parse_params(
        [
            "epochs=3",
            "learning_rate=1e-2",
            "tune=False",
            "data_source=gs://b/flowers",
            "split_salt=",
            "tflite_mode=int8",
        ],
        vertex_spec,
    )
    assert values == {
        "epochs": 3,
        "learning_rate": 0.01,
        "tune": False,
        "data_source": "gs://b/flowers",
        "split_salt": "",
        "tflite_mode": "int8",
    }
    assert [type(v) for v in values.values()] == [int, float, bool, str, str, str]
    assert parse_params(["deploy=yes", "workers=+4"], vertex_spec) == {"deploy": True, "workers": 4}
    inputs = sorted(vertex_spec["root"]["inputDefinitions"]["parameters"])
    for given, message in [
        (["epochz=3"], f"--param epochz: not an input of tfpipe-training; its inputs are: {', '.join(inputs)}"),
        (["epochs=3.5"], "--param epochs=3.5: expected an integer"),
        (["learning_rate=fast"], "--param learning_rate=fast: expected a number"),
        (["learning_rate=nan"], "--param learning_rate=nan: expected a number"),
        (["tune=maybe"], "--param tune=maybe: expected true or false"),
        (["epochs"], "--param epochs: expected NAME=VALUE"),
        (["epochs=3", "epochs=4"], "--param epochs: given more than once"),
        (["workers=0"], "--param workers: Input should be greater than or equal to 1"),
        (["tflite_mode=int4"], "--param tflite_mode: Input should be 'float32', 'dynamic', 'float16' or 'int8'"),
        (["val_fraction=0.5", "test_fraction=0.5"], "parameters: val_fraction + test_fraction must be < 1"),
    ]:
        with pytest.raises(TemplateError) as e:
            parse_params(given, vertex_spec)
        assert str(e.value) == message


def test_required_inputs_need_a_value(tmp_path):
    config = load_config(None, environ={})
    spec = load_template(delivery_for("kubeflow").compile("batch_prediction", config, tmp_path / "batch.yaml"))
    with pytest.raises(TemplateError) as e:
        parse_params(["batch_size=8"], spec)
    assert str(e.value) == "tfpipe-batch-prediction needs a value for instances: pass --param instances=VALUE"
    assert parse_params(["instances=gs://b/*.jsonl"], spec) == {"instances": "gs://b/*.jsonl"}


# --- Vertex AI: submit --------------------------------------------------------------------------------------------


def expected_job(spec, params, display_name="tfpipe-training", **extra):
    """The PipelineJob sent for `spec` (its images pinned by digest)."""
    return job_pb.PipelineJob(
        display_name=display_name,
        pipeline_spec=pinned_spec(spec),
        labels={"team": "ml", "env": "prod"},
        runtime_config=job_pb.PipelineJob.RuntimeConfig(gcs_output_directory=ROOT, parameter_values=params),
        service_account=SA,
        network=NETWORK,
        **extra,
    )


def test_vertex_submit_sends_the_exact_pipeline_job(vertex, config, vertex_spec):
    pipeline_job_answers(vertex)
    result = invoke(
        "submit",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--param",
        "epochs=3",
        "--param",
        "learning_rate=0.01",
        "--param",
        "tune=false",
    )
    assert result.exit_code == 0, result.output
    # aiplatform checks that the pipeline root's bucket belongs to the project, then creates the job
    assert vertex.calls[0][:3] == (
        "get_project",
        project_pb.GetProjectRequest(name=f"projects/{PROJECT}"),
        "cloudresourcemanager.googleapis.com:443",
    )
    [(rpc, request, host, routing)] = vertex.api_calls()
    assert (rpc, host, routing) == ("create_pipeline_job", HOST, f"parent={PARENT}")
    job_id = request.pipeline_job_id
    assert job_id.startswith("tfpipe-training-") and len(job_id) == len("tfpipe-training-") + 14
    assert request == pipeline_service.CreatePipelineJobRequest(
        parent=PARENT,
        pipeline_job_id=job_id,
        pipeline_job=expected_job(vertex_spec, {"epochs": 3, "learning_rate": 0.01, "tune": False}),
    )
    # the compiled spec sent is the prod profile's: its defaults, and its images pinned by the digests the registry
    # answered (Vertex's cache keys on the image string: a tag pushed again must not serve the old code's steps)
    spec = type(request.pipeline_job).to_dict(request.pipeline_job)["pipeline_spec"]
    assert spec["pipelineInfo"]["name"] == "tfpipe-training"
    assert spec["root"]["inputDefinitions"]["parameters"]["epochs"]["defaultValue"] == 5
    assert spec["deploymentSpec"]["executors"]["exec-prepare-data"]["container"]["image"] == PINNED[COMPONENTS]
    assert template_images(spec) == sorted(PINNED.values())
    assert COMPONENTS not in json.dumps(spec) and TRAINER not in json.dumps(spec) and SERVING not in json.dumps(spec)
    # before anything was created: the pre-flight checks of the run's images (one request each, which pins them
    # too), APIs, permissions and service account (the prod profile's network and Dataflow data prep need Compute
    # Engine, Service Networking and Dataflow)
    apis = "aiplatform artifactregistry cloudresourcemanager compute dataflow iam servicenetworking storage".split()
    names = "&".join(f"names=projects%2F{PROJECT}%2Fservices%2F{api}.googleapis.com" for api in apis)
    objects = "&".join(f"permissions=storage.objects.{verb}" for verb in ("create", "delete", "get", "list"))
    assert [(m, u) for m, u, _ in vertex.http.requests] == [
        *[("HEAD", manifest_url(image)) for image in sorted([COMPONENTS, SERVING, TRAINER])],
        ("GET", f"https://serviceusage.googleapis.com/v1/projects/{PROJECT}/services:batchGet?{names}"),
        ("POST", f"https://cloudresourcemanager.googleapis.com/v1/projects/{PROJECT}:testIamPermissions"),
        ("GET", f"https://storage.googleapis.com/storage/v1/b/test-bucket/iam/testPermissions?{objects}"),
        ("GET", f"https://iam.googleapis.com/v1/projects/-/serviceAccounts/{SA}"),
        ("POST", f"https://iam.googleapis.com/v1/projects/-/serviceAccounts/{SA}:testIamPermissions"),
        ("POST", f"https://iam.googleapis.com/v1/projects/-/serviceAccounts/{SA}:getIamPolicy"),
        ("POST", f"https://cloudresourcemanager.googleapis.com/v1/projects/{PROJECT}:getIamPolicy"),
        ("GET", "https://storage.googleapis.com/storage/v1/b/test-bucket/iam"),
    ]
    assert result.output == (
        PREFLIGHT_OK + "submitted tfpipe-training (vertex training pipeline compiled now, images pinned by digest) to "
        f"Vertex AI: "
        f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/pipelineJobs/{job_id}\n"
        f"console: https://console.cloud.google.com/vertex-ai/locations/{LOCATION}/pipelines/runs/{job_id}"
        f"?project={PROJECT}\n"
    )


def test_vertex_submit_wait_follows_the_run_and_fails_when_it_fails(vertex, config, tmp_path, vertex_spec):
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    states = pipeline_state.PipelineState
    pipeline_job_answers(
        vertex,
        [
            (states.PIPELINE_STATE_RUNNING, ""),
            (states.PIPELINE_STATE_RUNNING, ""),
            (states.PIPELINE_STATE_FAILED, "The DAG failed because some tasks failed."),
        ],
    )
    result = invoke(
        "submit",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        "--template",
        template,
        "--no-caching",
        "--run-name",
        "nightly",
        "--wait",
        "--poll-seconds",
        "0",
    )
    assert result.exit_code == 1
    create, *gets = vertex.api_calls()
    job_id = create[1].pipeline_job_id
    name = f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/pipelineJobs/{job_id}"
    assert [c[0] for c in gets] == ["get_pipeline_job"] * 3
    assert {(c[1] == pipeline_service.GetPipelineJobRequest(name=name), c[2], c[3]) for c in gets} == {
        (True, HOST, f"name={name}")
    }
    # --no-caching: every task of every DAG, as aiplatform sets it; --run-name: the display name
    job = create[1].pipeline_job
    assert job.display_name == "nightly"
    spec = type(job).to_dict(job)["pipeline_spec"]
    dags = [spec["root"]] + [c for c in spec["components"].values() if "dag" in c]
    assert {json.dumps(t["cachingOptions"]) for d in dags for t in d["dag"]["tasks"].values()} == {
        '{"enableCache": false}'
    }
    lines = after_preflight(result.output).splitlines()
    assert lines[0] == f"submitted tfpipe-training ({template}, images pinned by digest) to Vertex AI: {name}"
    assert [line.split(" ", 1)[1] for line in lines[2:4]] == ["PIPELINE_STATE_RUNNING", "PIPELINE_STATE_FAILED"]
    assert lines[4] == (
        f"Error: the run ended PIPELINE_STATE_FAILED: The DAG failed because some tasks failed. "
        f"(https://console.cloud.google.com/vertex-ai/locations/{LOCATION}/pipelines/runs/{job_id}"
        f"?project={PROJECT})"
    )

    vertex.calls.clear()
    pipeline_job_answers(vertex, [(states.PIPELINE_STATE_SUCCEEDED, "")])
    result = invoke(
        "submit",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        "--template",
        template,
        "--wait",
        "--poll-seconds",
        "0",
    )
    assert result.exit_code == 0, result.output
    assert [c[0] for c in vertex.api_calls()] == ["create_pipeline_job", "get_pipeline_job"]
    assert result.output.splitlines()[-1].endswith(" PIPELINE_STATE_SUCCEEDED")


def test_vertex_submit_puts_the_run_in_a_vertex_experiment_with_the_runs_cmek_key(vertex, config, vertex_spec):
    """--experiment: aiplatform gets (or creates) the experiment's metadata context before creating the job, then
    adds the run's pipeline-run context to it once Vertex made it."""
    from google.api_core.exceptions import NotFound
    from google.cloud.aiplatform_v1.types import context as context_pb, metadata_service, metadata_store

    key = f"projects/{PROJECT}/locations/{LOCATION}/keyRings/ml/cryptoKeys/tfpipe"
    vertex.http.routes.update(access_routes(key=key))  # the bucket's default key, and its service agents may use it
    store = f"{PARENT}/metadataStores/default"
    experiment = f"{store}/contexts/weekly-retraining"
    run_context = f"{store}/contexts/tfpipe-training-run"
    pipeline_job_answers(vertex)
    created = {}

    def get_context(request):
        if request.name not in created:
            raise NotFound(f"{request.name} not found")
        return created[request.name]

    def create_context(request):
        name = f"{request.parent}/contexts/{request.context_id}"
        created[name] = context_pb.Context(request.context, name=name)
        return created[name]

    def get_job(request):  # the run's pipeline-run context exists once Vertex started the run
        return job_pb.PipelineJob(
            name=request.name,
            state=pipeline_state.PipelineState.PIPELINE_STATE_RUNNING,
            job_detail=job_pb.PipelineJobDetail(pipeline_run_context=context_pb.Context(name=run_context)),
        )

    vertex.answers.update(
        get_metadata_store=lambda request: metadata_store.MetadataStore(name=request.name),
        get_context=get_context,
        create_context=create_context,
        get_pipeline_job=get_job,
        add_context_children=lambda request: metadata_service.AddContextChildrenResponse(),
    )
    result = invoke(
        "submit",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--set",
        f"platform.encryption_spec_key_name={key}",
        "--experiment",
        "weekly-retraining",
    )
    assert result.exit_code == 0, result.output
    calls = [(c[0], c[1]) for c in vertex.api_calls()]
    assert [rpc for rpc, _ in calls] == [
        "get_metadata_store",
        "get_context",
        "create_context",
        "create_pipeline_job",
        "get_metadata_store",
        "get_context",
        "get_pipeline_job",
        "add_context_children",
    ]
    assert calls[0][1] == metadata_service.GetMetadataStoreRequest(name=store)
    assert calls[2][1].parent == store and calls[2][1].context_id == "weekly-retraining"
    assert calls[2][1].context.schema_title == "system.Experiment"
    job = calls[3][1].pipeline_job
    assert job.encryption_spec.kms_key_name == key  # the run's CMEK key on the pipeline job
    assert (job.service_account, job.network) == (SA, NETWORK)
    assert calls[7][1] == metadata_service.AddContextChildrenRequest(context=experiment, child_contexts=[run_context])
    assert after_preflight(result.output).splitlines()[0].endswith(" in experiment weekly-retraining")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--param", "epochs=three"], "--param epochs=three: expected an integer"),
        (["--param", "workers=0"], "--param workers: Input should be greater than or equal to 1"),
        (["--param", "epoch=3"], "--param epoch: not an input of tfpipe-training; its inputs are: "),
        (
            ["--set", "platform.project="],
            "platform.project is required on Vertex AI: set it in the config (profile), "
            "TFPIPE_PLATFORM__PROJECT or --set platform.project=PROJECT",
        ),
        (
            ["--set", "platform.pipeline_root=s3://bucket/root"],
            "platform.pipeline_root must be a gs:// URI on Vertex AI (gs://BUCKET/pipeline-root), got 's3://bucket/root'",
        ),
        (
            ["--set", "platform.trainer_image=us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest"],
            "the config still holds example values (edit them or --set them): "
            "platform.trainer_image=us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest",
        ),
        (["--host", "http://kfp"], "--host: only with --target kubeflow"),
        (["--template", "missing.yaml"], "template not found: missing.yaml"),
    ],
)
def test_vertex_submit_refuses_before_any_api_call(vertex, config, args, message):
    result = invoke("submit", "--target", "vertex", "--config", config, "--profile", "prod", *IMAGES, *args)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {message}"), result.output
    assert vertex.calls == []


@pytest.fixture
def artifact_registry(http_api, monkeypatch):
    """https://*-kfp.pkg.dev downloads reach the local server (a urllib opener whose HTTPS handler connects to
    it), as aiplatform's template loader fetches them with urllib."""
    port = http_api.server_address[1]

    class LocalHTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            assert req.host.endswith("-kfp.pkg.dev"), req.host
            return self.do_open(lambda host, **kw: http.client.HTTPConnection("127.0.0.1", port, **kw), req)

    monkeypatch.setattr(urllib.request, "_opener", urllib.request.build_opener(LocalHTTPS()))
    return http_api


def test_vertex_submit_runs_a_published_template_by_tag(vertex, config, artifact_registry, vertex_spec):
    """A template published with its images by digest (as Cloud Build publishes them) runs as published: by its
    URL, which the run keeps (`template_uri`)."""
    artifact_registry.routes[("GET", f"/{PROJECT}/tfpipe-templates/tfpipe-training/v3")] = (
        200,
        yaml.safe_dump(pinned_spec(vertex_spec)).encode(),
    )
    pipeline_job_answers(vertex)
    result = invoke(
        "submit",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        "--template-tag",
        "v3",
        "--param",
        "epochs=2",
    )
    assert result.exit_code == 0, result.output
    url = f"{REGISTRY}/tfpipe-training/v3"
    # fetched twice: once to check the parameters before any API call, once by aiplatform.PipelineJob
    assert [(r["method"], r["path"], r["headers"]["Host"]) for r in artifact_registry.requests] == [
        ("GET", f"/{PROJECT}/tfpipe-templates/tfpipe-training/v3", f"{LOCATION}-kfp.pkg.dev")
    ] * 2
    [(_, request, _, _)] = vertex.api_calls()
    assert request == pipeline_service.CreatePipelineJobRequest(
        parent=PARENT,
        pipeline_job_id=request.pipeline_job_id,
        pipeline_job=expected_job(vertex_spec, {"epochs": 2}, template_uri=url),
    )
    # nothing to pin: the checks asked for the images by their digests
    assert result.output.startswith(f"{CHECKS_PASSED}submitted tfpipe-training ({url}) to Vertex AI: ")
    assert [u for m, u, _ in vertex.http.requests if m == "HEAD"] == [manifest_url(i) for i in sorted(PINNED.values())]

    artifact_registry.requests.clear()
    vertex.calls.clear()
    result = invoke("submit", "--target", "vertex", "--config", config, "--profile", "prod", "--template-tag", "v4")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: cannot read the template {REGISTRY}/tfpipe-training/v4: HTTP Error 404: Not Found\n"
    )
    assert vertex.calls == []
    result = invoke(
        "submit", "--target", "vertex", "--config", config, "--profile", "prod", "--template-tag", "sha256:abc"
    )
    assert result.output == (
        "Error: bad template tag 'sha256:abc': letters, digits, '.', '_' and '-' (not a sha256 version)\n"
    )


# --- Vertex AI: schedules -----------------------------------------------------------------------------------------


def schedule(name_id, display_name, state=schedule_pb.Schedule.State.ACTIVE, cron="0 3 * * 1"):
    return schedule_pb.Schedule(name=f"{PARENT}/schedules/{name_id}", display_name=display_name, state=state, cron=cron)


def expected_schedule_request(
    spec, params, cron="TZ=Europe/Paris 0 3 * * 1", display_name="tfpipe-weekly", **pipeline_job
):
    return schedule_service.CreateScheduleRequest(
        parent=PARENT,
        schedule=schedule_pb.Schedule(
            display_name=display_name,
            cron=cron,
            max_concurrent_run_count=2,
            create_pipeline_job_request=pipeline_service.CreatePipelineJobRequest(
                parent=PARENT,
                pipeline_job=job_pb.PipelineJob(
                    pipeline_spec=pinned_spec(spec),
                    labels={"team": "ml", "env": "prod"},
                    runtime_config=job_pb.PipelineJob.RuntimeConfig(gcs_output_directory=ROOT, parameter_values=params),
                    service_account=SA,
                    network=NETWORK,
                    **pipeline_job,
                ),
            ),
        ),
    )


def test_vertex_schedule_creates_a_schedule_in_the_configured_location(vertex, config, vertex_spec):
    schedule_answers(vertex, [])
    result = invoke(
        "schedule", "--target", "vertex", "--config", config, "--profile", "prod", *IMAGES, "--param", "tune=false"
    )
    assert result.exit_code == 0, result.output
    assert [(c[0], c[2], c[3]) for c in vertex.calls] == [
        ("list_schedules", HOST, f"parent={PARENT}"),
        ("create_schedule", HOST, f"parent={PARENT}"),
    ]
    assert vertex.calls[0][1] == schedule_service.ListSchedulesRequest(
        parent=PARENT, filter='display_name="tfpipe-weekly"'
    )
    assert vertex.calls[1][1] == expected_schedule_request(vertex_spec, {"tune": False})
    lines = after_preflight(result.output).splitlines()
    assert lines[0] == f"created schedule 'tfpipe-weekly': {PARENT}/schedules/new-1"
    assert lines[1] == (
        f"console: https://console.cloud.google.com/vertex-ai/locations/{LOCATION}/pipelines/"
        f"schedules/new-1?project={PROJECT}"
    )
    assert lines[2].startswith(
        "tfpipe-weekly: tfpipe-training (vertex training pipeline compiled now, images pinned by digest) on "
        "'TZ=Europe/Paris 0 3 * * 1'; next runs "
    )
    assert lines[2].endswith(" 03:00 Europe/Paris")


def test_vertex_schedule_replaces_the_one_with_the_same_display_name(vertex, config, tmp_path, vertex_spec):
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    # the server filters by display name; a schedule whose name only looks alike is never touched
    schedule_answers(
        vertex,
        [schedule("old-1", "tfpipe-weekly", schedule_pb.Schedule.State.PAUSED), schedule("other", "tfpipe-weekly-2")],
    )
    result = invoke(
        "schedule",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        "--template",
        template,
        "--cron",
        "CRON_TZ=America/New_York  30 2 * * *",
        "--param",
        "epochs=4",
        "--set",
        "platform.schedule.allow_queueing=true",
        "--set",
        "platform.schedule.max_run_count=10",
        "--set",
        "platform.schedule.start_time=2026-01-05T00:00:00Z",
        "--set",
        "platform.schedule.end_time=2026-12-31T00:00:00Z",
    )
    assert result.exit_code == 0, result.output
    assert [c[0] for c in vertex.calls] == ["list_schedules", "create_schedule", "delete_schedule"]
    expected = expected_schedule_request(vertex_spec, {"epochs": 4}, cron="CRON_TZ=America/New_York 30 2 * * *")
    expected.schedule.allow_queueing, expected.schedule.max_run_count = True, 10
    expected.schedule.start_time, expected.schedule.end_time = "2026-01-05T00:00:00Z", "2026-12-31T00:00:00Z"
    assert vertex.calls[1][1] == expected
    assert vertex.calls[2][1:] == (
        schedule_service.DeleteScheduleRequest(name=f"{PARENT}/schedules/old-1"),
        HOST,
        f"name={PARENT}/schedules/old-1",
    )
    assert after_preflight(result.output).splitlines()[:2] == [
        f"created schedule 'tfpipe-weekly': {PARENT}/schedules/new-1",
        f"deleted the schedule it replaces: {PARENT}/schedules/old-1",
    ]


def test_vertex_schedule_replacement_never_leaves_a_gap(vertex, config, tmp_path, vertex_spec):
    from google.api_core import exceptions

    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    schedule_answers(vertex, [schedule("old-1", "tfpipe-weekly")])

    def refuse(request):
        raise exceptions.PermissionDenied("Permission 'aiplatform.schedules.create' denied")

    vertex.answers["create_schedule"] = refuse
    args = ["schedule", "--target", "vertex", "--config", config, "--profile", "prod", "--template", template]
    result = invoke(*args)
    assert result.exit_code == 1
    assert after_preflight(result.output) == (
        "Error: creating the schedule on Vertex AI: permission denied (needs aiplatform.schedules.create): "
        "403 Permission 'aiplatform.schedules.create' denied\n"
    )
    assert [c[0] for c in vertex.calls] == ["list_schedules", "create_schedule"]  # the old one stays

    vertex.calls.clear()
    schedule_answers(vertex, [schedule("old-1", "tfpipe-weekly")])

    def busy(request):
        raise exceptions.FailedPrecondition("Schedule is being updated")

    vertex.answers["delete_schedule"] = busy
    result = invoke(*args)
    assert result.exit_code == 1
    assert [c[0] for c in vertex.calls] == ["list_schedules", "create_schedule", "delete_schedule"]
    assert after_preflight(result.output).splitlines() == [
        f"created schedule 'tfpipe-weekly': {PARENT}/schedules/new-1",
        f"Error: created {PARENT}/schedules/new-1 but could not delete the schedule(s) it replaces: "
        f"{PARENT}/schedules/old-1 (400 Schedule is being updated); delete them with: python -m pipelines schedule "
        f"delete RESOURCE_NAME --target vertex",
    ]


def test_vertex_schedule_of_a_published_template(vertex, config, artifact_registry, vertex_spec):
    artifact_registry.routes[("GET", f"/{PROJECT}/tfpipe-templates/tfpipe-training/stable")] = (
        200,
        yaml.safe_dump(vertex_spec).encode(),
    )
    schedule_answers(vertex, [])
    result = invoke(
        "schedule",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        "--template-tag",
        "stable",
        "--display-name",
        "weekly-stable",
    )
    assert result.exit_code == 0, result.output
    # published by tag (compiled from a config naming tags): the schedule holds the template with its images pinned,
    # not its URL (its spec is no longer the published one)
    assert vertex.calls[1][1] == expected_schedule_request(vertex_spec, {}, display_name="weekly-stable")
    assert result.output.splitlines()[-1].startswith(
        f"weekly-stable: tfpipe-training ({REGISTRY}/tfpipe-training/stable, images pinned by digest) on "
    )


@pytest.mark.parametrize(
    "cron, message",
    [
        ("0 3 * *", "--cron: '0 3 * *' has 4 field(s); a cron expression has 5"),
        ("TZ=Mars/Olympus_Mons 0 3 * * 1", "--cron: unknown time zone 'Mars/Olympus_Mons'"),
        ("0 25 * * 1", "--cron: '0 25 * * 1' is not a valid cron expression"),
    ],
)
def test_schedule_cron_is_checked_before_any_api_call(vertex, config, cron, message):
    schedule_answers(vertex, [])
    result = invoke("schedule", "--target", "vertex", "--config", config, "--profile", "prod", *IMAGES, "--cron", cron)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {message}"), result.output
    assert vertex.calls == []
    result = invoke(
        "schedule",
        "--target",
        "vertex",
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--set",
        "platform.schedule.cron=",
    )
    assert result.output == (
        'Error: --cron is required (or platform.schedule.cron), e.g. --cron "TZ=Europe/Paris 0 3 * * 1"\n'
    )
    assert vertex.calls == []


def test_vertex_schedule_pause_resume_delete_by_display_name(vertex, config):
    schedule_answers(
        vertex, [schedule("a", "tfpipe-weekly"), schedule("b", "tfpipe-weekly"), schedule("c", "tfpipe-weekly-2")]
    )
    for action, rpc, request in (
        ("pause", "pause_schedule", schedule_service.PauseScheduleRequest),
        ("resume", "resume_schedule", schedule_service.ResumeScheduleRequest),
        ("delete", "delete_schedule", schedule_service.DeleteScheduleRequest),
    ):
        vertex.calls.clear()
        result = invoke(
            "schedule", action, "tfpipe-weekly", "--target", "vertex", "--config", config, "--profile", "prod"
        )
        assert result.exit_code == 0, result.output
        assert [(c[0], c[1]) for c in vertex.calls] == [
            (
                "list_schedules",
                schedule_service.ListSchedulesRequest(parent=PARENT, filter='display_name="tfpipe-weekly"'),
            ),
            (rpc, request(name=f"{PARENT}/schedules/a")),
            (rpc, request(name=f"{PARENT}/schedules/b")),
        ]
        done = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
        assert result.output == (
            f"{done} schedule 'tfpipe-weekly': {PARENT}/schedules/a\n"
            f"{done} schedule 'tfpipe-weekly': {PARENT}/schedules/b\n"
        )
    vertex.calls.clear()
    result = invoke("schedule", "pause", "nightly", "--target", "vertex", "--config", config, "--profile", "prod")
    assert result.exit_code == 1
    assert result.output == f"Error: no schedule named 'nightly' in {PARENT}\n"
    assert [c[0] for c in vertex.calls] == ["list_schedules"]
    result = invoke("schedule", "--target", "vertex", "pause", "tfpipe-weekly")
    assert result.output == "Error: --target: put the options after 'pause'\n"
    # a resource name designates that schedule only (what the replace error message suggests)
    vertex.calls.clear()
    result = invoke(
        "schedule", "delete", f"{PARENT}/schedules/old-1", "--target", "vertex", "--config", config, "--profile", "prod"
    )
    assert result.exit_code == 0, result.output
    assert [(c[0], c[1]) for c in vertex.calls] == [
        ("get_schedule", schedule_service.GetScheduleRequest(name=f"{PARENT}/schedules/old-1")),
        ("delete_schedule", schedule_service.DeleteScheduleRequest(name=f"{PARENT}/schedules/old-1")),
    ]


def test_vertex_schedule_list(vertex, config):
    listed = [
        schedule("a", "tfpipe-weekly", cron="TZ=Europe/Paris 0 3 * * 1"),
        schedule("b", "batch-daily", schedule_pb.Schedule.State.PAUSED, cron="0 6 * * *"),
    ]
    listed[0].next_run_time = "2026-03-23T02:00:00Z"
    schedule_answers(vertex, listed)
    result = invoke("schedule", "list", "--target", "vertex", "--config", config, "--profile", "prod")
    assert result.exit_code == 0, result.output
    assert [(c[0], c[1]) for c in vertex.calls] == [
        ("list_schedules", schedule_service.ListSchedulesRequest(parent=PARENT))
    ]
    assert [line.split() for line in result.output.splitlines()] == [
        [
            "tfpipe-weekly",
            "ACTIVE",
            "TZ=Europe/Paris",
            "0",
            "3",
            "*",
            "*",
            "1",
            "next",
            "2026-03-23T02:00:00+00:00",
            f"{PARENT}/schedules/a",
        ],
        ["batch-daily", "PAUSED", "0", "6", "*", "*", "*", f"{PARENT}/schedules/b"],
    ]


# --- Kubeflow Pipelines -------------------------------------------------------------------------------------------

KFP = "/apis/v2beta1"


def kfp_routes(server, experiments=(), recurring_runs=(), run_states=("RUNNING", "SUCCEEDED")):
    states = list(run_states)
    server.routes.update(
        {
            ("GET", f"{KFP}/healthz"): (200, {"multi_user": False}),
            ("GET", f"{KFP}/experiments"): (200, {"experiments": list(experiments), "total_size": len(experiments)}),
            ("POST", f"{KFP}/experiments"): lambda r: (200, {**json.loads(r["body"]), "experiment_id": "exp-1"}),
            ("POST", f"{KFP}/runs"): lambda r: (200, {**json.loads(r["body"]), "run_id": "run-1", "state": "PENDING"}),
            ("GET", f"{KFP}/runs/run-1"): lambda r: (200, {"run_id": "run-1", "state": states.pop(0)}),
            ("GET", f"{KFP}/recurringruns"): (
                200,
                {"recurringRuns": list(recurring_runs), "total_size": len(recurring_runs)},
            ),
            ("POST", f"{KFP}/recurringruns"): lambda r: (200, {**json.loads(r["body"]), "recurring_run_id": "rr-new"}),
            ("DELETE", f"{KFP}/recurringruns/rr-old"): (200, {}),
            ("POST", f"{KFP}/recurringruns/rr-old:disable"): (200, {}),
        }
    )


def calls(server):
    return [(r["method"], r["path"]) for r in server.requests]


def test_kubeflow_submit_creates_a_run_against_the_kfp_api(http_api, config, kubeflow_spec):
    kfp_routes(http_api)
    result = invoke(
        "submit",
        "--target",
        "kubeflow",
        "--host",
        http_api.url,
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--param",
        "epochs=3",
        "--param",
        "tune=false",
        "--run-name",
        "try-1",
        "--wait",
        "--poll-seconds",
        "0",
    )
    assert result.exit_code == 0, result.output
    assert calls(http_api) == [
        ("GET", f"{KFP}/healthz"),
        ("GET", f"{KFP}/experiments"),
        ("POST", f"{KFP}/experiments"),
        ("POST", f"{KFP}/runs"),
        ("GET", f"{KFP}/runs/run-1"),
        ("GET", f"{KFP}/runs/run-1"),
    ]
    lookup = http_api.requests[1]["query"]
    assert json.loads(lookup["filter"]) == {
        "predicates": [{"operation": 1, "key": "display_name", "stringValue": "retraining"}]
    }
    assert json.loads(http_api.requests[2]["body"]) == {"display_name": "retraining", "namespace": ""}
    run = json.loads(http_api.requests[3]["body"])
    assert run == {
        "experiment_id": "exp-1",
        "display_name": "try-1",
        "pipeline_spec": run["pipeline_spec"],
        "runtime_config": {"parameters": {"epochs": 3, "tune": False}, "pipeline_root": ROOT},
        "service_account": "pipeline-runner",
    }
    assert run["pipeline_spec"] == kubeflow_spec  # the spec compiled now from the prod profile
    assert result.output.splitlines()[:5] == [
        f"Experiment details: {http_api.url}/#/experiments/details/exp-1",
        f"Run details: {http_api.url}/#/runs/details/run-1",
        "submitted tfpipe-training (kubeflow training pipeline compiled now) to Kubeflow Pipelines as 'try-1': "
        "run run-1",
        f"run: {http_api.url}/#/runs/details/run-1",
        result.output.splitlines()[4][:9] + "RUNNING",
    ]
    assert result.output.splitlines()[5].endswith(" SUCCEEDED")

    http_api.requests.clear()
    kfp_routes(http_api, experiments=[{"experiment_id": "exp-7", "display_name": "retraining"}], run_states=["FAILED"])
    result = invoke(
        "submit",
        "--target",
        "kubeflow",
        "--host",
        http_api.url,
        "--namespace",
        "team-ml",
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--wait",
        "--poll-seconds",
        "0",
    )
    assert result.exit_code == 1
    # a namespace: no health check (kfp only probes for multi-user mode without one); the experiment exists
    assert calls(http_api) == [("GET", f"{KFP}/experiments"), ("POST", f"{KFP}/runs"), ("GET", f"{KFP}/runs/run-1")]
    assert http_api.requests[0]["query"]["namespace"] == "team-ml"
    assert json.loads(http_api.requests[1]["body"])["experiment_id"] == "exp-7"
    assert result.output.splitlines()[-1] == "Error: the run ended FAILED"


def test_kubeflow_submit_checks_parameters_before_any_call(http_api, config):
    kfp_routes(http_api)
    result = invoke(
        "submit",
        "--target",
        "kubeflow",
        "--host",
        http_api.url,
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--param",
        "tune=perhaps",
    )
    assert result.output == "Error: --param tune=perhaps: expected true or false\n"
    result = invoke("submit", "--target", "kubeflow", "--config", config, "--profile", "prod", *IMAGES)
    assert result.output == (
        "Error: --target kubeflow needs the KFP API endpoint: --host URL, platform.kfp_host or $KF_PIPELINES_ENDPOINT\n"
    )
    assert http_api.requests == []


def test_kubeflow_schedule_replaces_the_recurring_run_with_the_same_name(http_api, config, kubeflow_spec):
    kfp_routes(
        http_api,
        experiments=[{"experiment_id": "exp-7", "display_name": "retraining"}],
        recurring_runs=[
            {"recurring_run_id": "rr-old", "display_name": "tfpipe-weekly"},
            {"recurring_run_id": "rr-other", "display_name": "tfpipe-weekly-copy"},
        ],
    )
    result = invoke(
        "schedule",
        "--target",
        "kubeflow",
        "--host",
        http_api.url,
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
        "--cron",
        "0 3 * * 1",
        "--param",
        "epochs=2",
    )
    assert result.exit_code == 0, result.output
    assert calls(http_api) == [
        ("GET", f"{KFP}/healthz"),
        ("GET", f"{KFP}/recurringruns"),
        ("GET", f"{KFP}/experiments"),
        ("POST", f"{KFP}/recurringruns"),
        ("DELETE", f"{KFP}/recurringruns/rr-old"),
    ]
    assert json.loads(http_api.requests[1]["query"]["filter"]) == {
        "predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": "tfpipe-weekly"}]
    }
    body = json.loads(http_api.requests[3]["body"])
    assert body == {
        "display_name": "tfpipe-weekly",
        "experiment_id": "exp-7",
        "mode": "ENABLE",
        "max_concurrency": 2,
        "no_catchup": True,
        "pipeline_spec": kubeflow_spec,
        "runtime_config": {"parameters": {"epochs": 2}, "pipeline_root": ROOT},
        "service_account": "pipeline-runner",
        "trigger": {"cron_schedule": {"cron": "0 0 3 * * 1"}},
    }
    assert result.output.splitlines()[1:3] == [
        "created recurring run 'tfpipe-weekly': rr-new",
        "deleted the recurring run it replaces: rr-old",
    ]

    http_api.requests.clear()
    result = invoke(
        "schedule", "--target", "kubeflow", "--host", http_api.url, "--config", config, "--profile", "prod", *IMAGES
    )  # the profile's cron has a time zone
    assert result.exit_code == 1
    assert result.output == (
        "Error: --cron: Kubeflow recurring runs take no time zone prefix (TZ=Europe/Paris): KFP "
        "evaluates cron in its scheduled-workflow controller's time zone; give the times in it\n"
    )
    assert http_api.requests == []

    result = invoke("schedule", "pause", "tfpipe-weekly", "--target", "kubeflow", "--host", http_api.url)
    assert result.exit_code == 0, result.output
    assert calls(http_api) == [
        ("GET", f"{KFP}/healthz"),
        ("GET", f"{KFP}/recurringruns"),
        ("POST", f"{KFP}/recurringruns/rr-old:disable"),
    ]
    assert result.output == "paused recurring run 'tfpipe-weekly': rr-old\n"

    http_api.requests.clear()
    http_api.routes[("GET", f"{KFP}/recurringruns")] = (
        200,
        {
            "recurringRuns": [
                {
                    "recurring_run_id": "rr-old",
                    "display_name": "tfpipe-weekly",
                    "status": "ENABLED",
                    "trigger": {"cron_schedule": {"cron": "0 0 3 * * 1"}},
                }
            ]
        },
    )
    result = invoke("schedule", "list", "--target", "kubeflow", "--host", http_api.url, "--namespace", "team-ml")
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["tfpipe-weekly", "ENABLED", "0", "0", "3", "*", "*", "1", "rr-old"]
    assert http_api.requests[0]["query"] == {"page_size": "100", "namespace": "team-ml"}
    result = invoke("schedule", "delete", "tfpipe-weekly", "--target", "kubeflow", "--host", http_api.url)
    assert result.output == "deleted recurring run 'tfpipe-weekly': rr-old\n"
    assert calls(http_api)[-1] == ("DELETE", f"{KFP}/recurringruns/rr-old")


# --- publish ------------------------------------------------------------------------------------------------------


def multipart(request):
    """The fields of a multipart/form-data body: {name: (filename, bytes)}."""
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + request["headers"]["Content-Type"].encode() + b"\r\n\r\n" + request["body"]
    )
    return {
        part.get_param("name", header="content-disposition"): (part.get_filename(), part.get_payload(decode=True))
        for part in message.get_payload()
    }


def test_publish_uploads_the_compiled_template_with_its_tags(http_api, config, tmp_path, vertex_spec):
    http_api.routes[("POST", "/acme-ml-prod/templates")] = (200, b"tfpipe-training/sha256:5f2a")
    registry = f"{http_api.url}/acme-ml-prod/templates"
    result = invoke(
        "publish",
        "--registry",
        registry,
        "--tag",
        "v3",
        "--tag",
        "latest",
        "--config",
        config,
        "--profile",
        "prod",
        *IMAGES,
    )
    assert result.exit_code == 0, result.output
    [upload] = http_api.requests
    assert (upload["method"], upload["path"]) == ("POST", "/acme-ml-prod/templates")
    fields = multipart(upload)
    assert fields["tags"] == (None, b"v3,latest")
    filename, content = fields["content"]
    assert filename == "training.yaml"
    assert yaml.safe_load(content) == vertex_spec
    assert result.stdout == (
        "published tfpipe-training sha256:5f2a (vertex training pipeline compiled now) with tag(s) v3, latest\n"
        f"  {registry}/tfpipe-training/v3\n  {registry}/tfpipe-training/latest\n"
    )
    # published as compiled, by tag: a run of it from the console would key its cache on the tags
    assert result.stderr == (
        f"warning: images by tag, not digest: {COMPONENTS}, {SERVING}, {TRAINER}; Vertex caches steps on the image "
        "name, so a run of this template may reuse steps of an older image under the same tag (submit and schedule "
        "pin them; docs/guides/vertex.md#images-and-the-cache)\n"
    )

    http_api.requests.clear()
    template = tmp_path / "batch.yaml"
    delivery_for("vertex").compile("batch_prediction", load_config(None, environ={}), template)
    http_api.routes[("POST", "/acme-ml-prod/templates")] = (200, b"tfpipe-batch-prediction/sha256:77")
    result = invoke("publish", "--registry", registry, "--tag", "v1", "--template", template)
    assert result.exit_code == 0, result.output
    assert multipart(http_api.requests[0])["content"] == ("batch.yaml", template.read_bytes())

    http_api.routes[("POST", "/acme-ml-prod/templates")] = (403, {"error": "denied"})
    result = invoke("publish", "--registry", registry, "--tag", "v1", "--template", template)
    assert result.exit_code == 1
    assert result.stderr == f"Error: uploading to {registry}: permission denied: 403 POST {registry}: denied\n"
    http_api.requests.clear()
    for args, message in [
        (
            ["--tag", "v1", "--template", template],
            "no registry: pass --registry https://REGION-kfp.pkg.dev/PROJECT/REPO or set platform.template_registry",
        ),
        (["--registry", registry, "--tag", "my tag", "--template", template], "bad template tag 'my tag'"),
        (
            ["--registry", registry, "--tag", "v1", "--config", config],
            "the config still holds example values (edit them or --set them): "
            "platform.components_image=us-docker.pkg.dev/PROJECT/tfpipe/components:latest, "
            "platform.trainer_image=us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest, "
            "platform.serving_image=us-docker.pkg.dev/PROJECT/tfpipe/serving:latest\n",
        ),
    ]:
        result = invoke("publish", *args)
        assert result.output.startswith(f"Error: {message}"), result.output
    assert http_api.requests == []


def test_vertex_submit_stops_at_the_pre_flight_checks_before_creating_anything(vertex, config):
    vertex.http.routes[("HEAD", manifest_url(TRAINER))] = (404, {})
    account = f"https://iam.googleapis.com/v1/projects/-/serviceAccounts/{SA}"
    vertex.http.routes[("POST", f"{account}:getIamPolicy")] = (200, {})  # granted nowhere
    result = invoke("submit", "--target", "vertex", "--config", config, "--profile", "prod", *IMAGES)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"Error: image {TRAINER} is not in its registry: build and push it (docs/guides/ci-cd.md)",
        f"Error: platform.service_account: {SA} may not act as itself, which its steps need to start the jobs and the "
        f"deployment: gcloud iam service-accounts add-iam-policy-binding {SA} --member=serviceAccount:{SA} "
        "--role=roles/iam.serviceAccountUser",
        "(fix these, or pass --skip-checks to create the run anyway)",
    ]
    assert vertex.api_calls() == []  # no pipeline job

    # --skip-checks skips the checks, not the pinning: an image by tag is asked for its digest all the same, and
    # one that cannot be pinned is refused, with the command that pins it by hand
    vertex.http.routes[("HEAD", manifest_url(TRAINER))] = (200, {})  # no Docker-Content-Digest
    vertex.http.requests.clear()
    result = invoke("submit", "--target", "vertex", "--config", config, "--profile", "prod", *IMAGES, "--skip-checks")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "pre-flight checks skipped (--skip-checks)",
        f"Error: image {TRAINER}: its registry answered no digest to pin it by; or pin it by hand: gcloud artifacts "
        f"docker images describe {TRAINER} --format='value(image_summary.fully_qualified_digest)'",
    ]
    assert [(m, u) for m, u, _ in vertex.http.requests] == [("HEAD", manifest_url(i)) for i in sorted(PINNED)]
    assert vertex.api_calls() == []

    # images given by digest: no request at all
    pipeline_job_answers(vertex)
    vertex.http.requests.clear()
    by_digest = [
        f"platform.{n}_image={PINNED[i]}"
        for n, i in [("trainer", TRAINER), ("components", COMPONENTS), ("serving", SERVING)]
    ]
    args = [a for s in by_digest for a in ("--set", s)]
    result = invoke("submit", "--target", "vertex", "--config", config, "--profile", "prod", *args, "--skip-checks")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "pre-flight checks skipped (--skip-checks)\n"
        "submitted tfpipe-training (vertex training pipeline compiled now) to Vertex AI: "
    )
    assert vertex.http.requests == [] and [c[0] for c in vertex.api_calls()] == ["create_pipeline_job"]
