"""What the delivery tests share (tests/contract/vertex/test_delivery.py, and tests/unit/pipelines/test_cli_errors.py
for the errors): the prod profile's project and config, the Google Cloud APIs at their gRPC stubs (`Vertex`) with
the pre-flight checks passing and the answers the tests give, a local HTTP API (Kubeflow Pipelines, Artifact
Registry), the templates compiled for that config. A test module takes the fixtures by binding them to its own names."""

import json
import os
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.metadata_service.transports.grpc import MetadataServiceGrpcTransport
from google.cloud.aiplatform_v1.services.pipeline_service.transports.grpc import PipelineServiceGrpcTransport
from google.cloud.aiplatform_v1.services.schedule_service.transports.grpc import ScheduleServiceGrpcTransport
from google.cloud.aiplatform_v1.types import (
    pipeline_job as job_pb,
    pipeline_state,
    schedule as schedule_pb,
    schedule_service,
)
from google.cloud.resourcemanager_v3.services.projects.transports.grpc import ProjectsGrpcTransport
from google.cloud.resourcemanager_v3.types import projects as project_pb
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2

from pipelines.config import load_config
from pipelines.delivery import delivery_for
from pipelines.templates import load_template
from tests.doubles.google_http import SA, GoogleHttp, digest_of, manifest_routes, project_routes
from tests.doubles.http import close_http, serve_http

PROJECT, LOCATION = "acme-ml-prod", "europe-west4"
PROJECT_NUMBER = "1234"  # the GCS emulator's buckets belong to project number 1234
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
ROOT = "gs://test-bucket/pipeline-root"  # the GCS emulator's bucket
NETWORK = "projects/123456789/global/networks/vpc"
TRAINER = f"{LOCATION}-docker.pkg.dev/{PROJECT}/tfpipe/trainer:abc1234"
COMPONENTS = f"{LOCATION}-docker.pkg.dev/{PROJECT}/tfpipe/components:abc1234"
SERVING = f"{LOCATION}-docker.pkg.dev/{PROJECT}/tfpipe/serving:abc1234"
REGISTRY = f"https://{LOCATION}-kfp.pkg.dev/{PROJECT}/tfpipe-templates"
CONFIG = f"""
parameters:
  epochs: 5
platform:
  components_image: us-docker.pkg.dev/PROJECT/tfpipe/components:latest
  trainer_image: us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest
profiles:
  prod:
    platform:
      project: {PROJECT}
      location: {LOCATION}
      pipeline_root: {ROOT}
      service_account: {SA}
      network: {NETWORK}
      labels: {{team: ml, env: prod}}
      template_registry: {REGISTRY}
      kfp_experiment: retraining
      kfp_service_account: pipeline-runner
      schedule: {{display_name: tfpipe-weekly, cron: "TZ=Europe/Paris 0 3 * * 1", max_concurrent_runs: 2}}
"""
IMAGES = [
    "--set",
    f"platform.trainer_image={TRAINER}",
    "--set",
    f"platform.components_image={COMPONENTS}",
    "--set",
    f"platform.serving_image={SERVING}",
]


# the test images by digest, as the registry double answers them
PINNED = {image: f"{image.rsplit(':', 1)[0]}@{digest_of(image)}" for image in (COMPONENTS, SERVING, TRAINER)}


def pinned_spec(spec: dict) -> dict:
    """`spec` with the test images by digest wherever a value names one."""
    text = json.dumps(spec)
    for image, reference in PINNED.items():
        text = text.replace(json.dumps(image), json.dumps(reference))
    return json.loads(text)


# what a Vertex submit or schedule prints first when its checks pass: the checks, then the images pinned
CHECKS_PASSED = (
    "pre-flight checks passed: pipeline root writable, images present, service account usable, APIs enabled, "
    "roles granted\n"
)
PREFLIGHT_OK = CHECKS_PASSED + "".join(
    f"image {image} pinned by digest: {digest_of(image)}\n" for image in sorted([COMPONENTS, SERVING, TRAINER])
)


@pytest.fixture(autouse=True)
def anonymous(monkeypatch, tmp_path):
    """Application Default Credentials: anonymous (nothing may try real auth). Nothing from this machine's
    environment or ~/.config/kfp (kfp's context and registry credential files) either."""
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "other-project"))
    for name in [n for n in os.environ if n.startswith(("TFPIPE_", "KF_PIPELINES_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setattr("kfp.client.client.Client._LOCAL_KFP_CONTEXT", str(tmp_path / "kfp" / "context.json"))
    for name in ("LOCAL_REGISTRY_CONTEXT", "LOCAL_REGISTRY_CREDENTIAL"):
        monkeypatch.setattr(f"kfp.registry.registry_client.{name}", str(tmp_path / "kfp" / f"{name}.json"))


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tfpipe.yaml"
    path.write_text(CONFIG)
    return str(path)


class Vertex:
    """The Google Cloud APIs at their gRPC stubs: every call is recorded (rpc, request, host, routing header) in
    one list, in order; `answers[rpc]` makes the reply. Resource Manager's GetProject answers the GCS emulator's
    project number: aiplatform checks that the pipeline root's bucket belongs to the project before it submits."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.answers = {
            "get_project": lambda request: project_pb.Project(name=f"projects/{PROJECT_NUMBER}", project_id=PROJECT)
        }
        for transport, rpcs in (
            (PipelineServiceGrpcTransport, ("create_pipeline_job", "get_pipeline_job")),
            (
                ScheduleServiceGrpcTransport,
                (
                    "list_schedules",
                    "create_schedule",
                    "delete_schedule",
                    "pause_schedule",
                    "resume_schedule",
                    "get_schedule",
                ),
            ),
            (
                MetadataServiceGrpcTransport,
                ("get_metadata_store", "get_context", "create_context", "add_context_children"),
            ),
            (ProjectsGrpcTransport, ("get_project",)),
        ):
            for rpc in rpcs:
                monkeypatch.setattr(transport, rpc, property(self._stub(rpc)))

    def _stub(self, rpc):
        vertex = self

        class Stub:  # one object per rpc: the GAPIC clients key their wrapped methods by it
            def __call__(self, request, timeout=None, metadata=()):
                vertex.calls.append((rpc, request, self.host, dict(metadata).get("x-goog-request-params")))
                if rpc not in vertex.answers:
                    raise AssertionError(f"unexpected {rpc}")
                return vertex.answers[rpc](request)

        stub = Stub()

        def get(transport):
            stub.host = transport._host
            return stub

        return get

    def api_calls(self):
        """The calls, without the bucket-ownership look-up."""
        return [c for c in self.calls if c[0] != "get_project"]


@pytest.fixture
def vertex(monkeypatch, gcs_emulator):
    """The Vertex APIs, and the pre-flight checks' registry (holding the test images, by tag and by digest) and IAM
    answering that all is in place."""
    vertex = Vertex(monkeypatch)
    routes = {**project_routes(), **manifest_routes([*PINNED, *PINNED.values()])}
    vertex.http = GoogleHttp(routes).install(monkeypatch)
    return vertex


def done_operation():
    response = any_pb2.Any()
    response.Pack(empty_pb2.Empty())
    return operations_pb2.Operation(name=f"{PARENT}/operations/1", done=True, response=response)


@pytest.fixture(scope="module")
def vertex_spec(tmp_path_factory):
    """The training pipeline compiled for Vertex with the prod profile and the test images (what the CLI
    compiles for the tests' commands)."""
    path = tmp_path_factory.mktemp("spec") / "config.yaml"
    path.write_text(CONFIG)
    config = load_config(path, profile="prod", sets=IMAGES[1::2], environ={})
    out = delivery_for("vertex").compile("training", config, path.parent / "training.yaml")
    return load_template(out)


def pipeline_job_answers(vertex, states=()):
    """CreatePipelineJob answers the job with its name; GetPipelineJob walks through `states`."""
    remaining = list(states)

    def create(request):
        job = job_pb.PipelineJob(request.pipeline_job)
        job.name = f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/pipelineJobs/{request.pipeline_job_id}"
        job.state = pipeline_state.PipelineState.PIPELINE_STATE_PENDING
        return job

    def get(request):
        state, message = remaining.pop(0)
        job = job_pb.PipelineJob(name=request.name, state=state)
        if message:
            job.error.message = message
        return job

    vertex.answers.update(create_pipeline_job=create, get_pipeline_job=get)


def schedule_answers(vertex, listed):
    def create(request):
        created = schedule_pb.Schedule(request.schedule)
        created.name = f"{PARENT}/schedules/new-1"
        created.state = schedule_pb.Schedule.State.ACTIVE
        return created

    vertex.answers.update(
        list_schedules=lambda request: schedule_service.ListSchedulesResponse(schedules=listed),
        create_schedule=create,
        delete_schedule=lambda request: done_operation(),
        pause_schedule=lambda request: empty_pb2.Empty(),
        resume_schedule=lambda request: empty_pb2.Empty(),
        get_schedule=lambda request: schedule_pb.Schedule(name=request.name, display_name="tfpipe-weekly"),
    )


class Recorder(BaseHTTPRequestHandler):
    """A local HTTP API: `routes[(method, path)]` answers (status, body); every request is recorded."""

    def _handle(self):
        url = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": dict(urllib.parse.parse_qsl(url.query)),
                "headers": dict(self.headers),
                "body": body,
            }
        )
        answer = self.server.routes.get((self.command, url.path))
        status, payload = answer(self.server.requests[-1]) if callable(answer) else (answer or (404, {"error": "no"}))
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(payload, bytes) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _handle

    def log_message(self, *args):
        pass


@pytest.fixture
def http_api():
    server = serve_http(Recorder)
    server.requests, server.routes = [], {}
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    close_http(server)


@pytest.fixture(scope="module")
def kubeflow_spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("kfp") / "config.yaml"
    path.write_text(CONFIG)
    config = load_config(path, profile="prod", sets=IMAGES[1::2], environ={})
    compiled = delivery_for("kubeflow").compile("training", config, path.parent / "training.yaml")
    # kfp.Client sends the pipeline spec and, when the YAML has one, the platform spec (the volume mounts)
    pipeline_doc, platform_doc = yaml.safe_load_all(Path(compiled).read_text())
    assert pipeline_doc == load_template(compiled)
    return {"pipeline_spec": pipeline_doc, "platform_spec": platform_doc}
