"""A Dataflow API double as strict as the service, for data prep's Dataflow job: a local HTTP server speaking the
Dataflow v1b3 REST API that Beam's DataflowRunner calls (google-cloud-dataflow-client's REST transport, chosen by
`--dataflow_endpoint=http://localhost:PORT`), with the job's files on a GCS emulator.

What it does as the service does:
- `projects.locations.jobs.create`: a request over 20 MB is refused (413), and so is a job that breaks the API's
  rules (400, the service's reasons): the job name ([-a-z0-9], a letter first, a letter or digit last), the project
  ID, the region, labels (Cloud labels: at most 64, keys a lowercase letter first, keys and values of at most 63
  [a-z0-9_-]), the temp location (Cloud Storage), one worker pool with the SDK harness's container image, a
  subnetwork in the job's region, at most 1,000 workers, a service account and a CMEK key of the right form.
  A job of the same name already running in the region is answered with that job, as the service answers it (Beam
  then refuses to go on).
- the job runs as the service runs a Runner v2 job: it reads the pipeline that Beam staged (`pipelineUrl`; its
  SHA-256 must be `pipelineProtoHash`), fails with the service's message when the job graph is over 10 MB, and its
  workers pull the SDK harness image (one the double was not given fails the job as a pull error would); the
  pipeline then runs on Beam's FnApiRunner in this process, the image's environment replaced by the embedded one.
- `jobs.get` and `jobs.messages.list`: the job's state (QUEUED, RUNNING, then DONE or FAILED) and its messages, an
  error message with the worker's traceback when the job fails.
- `jobs.update` with `requestedState` JOB_STATE_CANCELLED cancels a job that has not ended (400 for one that has).
  `start` (set by default) lets a test hold jobs in the queue; `unavailable` (0 by default) answers that many of the
  next `jobs.get` with the service's 503 (UNAVAILABLE), as while it cannot serve.

Limits: https://cloud.google.com/dataflow/docs/request-quotas (20 MB job requests, 10 MB job graphs, 1,000 workers
per job); job names and labels: the Dataflow API reference and Cloud labels' rules.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler

from tests.doubles.http import close_http, serve_http

REQUEST_LIMIT = 20 * 1024 * 1024
GRAPH_LIMIT = 10 * 1024 * 1024
MAX_WORKERS = 1000
JOBS = re.compile(
    r"^/v1b3/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/jobs(?:/(?P<id>[^/]+))?(?P<messages>/messages)?$"
)
JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,1022}[a-z0-9])?$")
PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
REGION = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
SERVICE_ACCOUNT = re.compile(
    r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9-]+\.iam\.gserviceaccount\.com$|^\d+-compute@developer\.gserviceaccount\.com$"
)
KMS_KEY = re.compile(r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$")
SUBNETWORK_REGION = re.compile(r"(?:^|/)regions/(?P<region>[^/]+)/subnetworks/[^/]+$")
GRAPH_TOO_LARGE = (
    "The job graph is too large. Please try again with a smaller job graph, or split your job into two or more "
    "smaller jobs."
)
ACTIVE = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")


class Refused(Exception):
    def __init__(self, code: int, status: str, message: str):
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


@dataclass
class DataflowDouble:
    """The Dataflow API on a local port. `images`: the container images its workers can pull."""

    images: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, dict | None]] = field(default_factory=list)  # (method, path, body)
    jobs: dict[str, dict] = field(default_factory=dict)
    messages: dict[str, list[dict]] = field(default_factory=dict)
    graphs: dict[str, int] = field(default_factory=dict)  # job id -> size of its staged pipeline in bytes
    graph_limit: int = GRAPH_LIMIT  # the service's; a test may lower it to reach it with less data
    unavailable: int = 0  # the next jobs.get answered 503

    def __post_init__(self):
        self.lock = threading.RLock()
        self.ids = itertools.count(1)
        self.runs: list[threading.Thread] = []
        self.start = threading.Event()
        self.start.set()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self, method):
                path = self.path.split("?", 1)[0]
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    if length > REQUEST_LIMIT:
                        raise Refused(
                            413,
                            "FAILED_PRECONDITION",
                            "The size of serialized JSON representation of the pipeline exceeds the allowable limit",
                        )
                    body = json.loads(raw) if raw else None
                    with api.lock:
                        api.requests.append((method, path, body))
                    status, answer = 200, api.answer(method, path, body)
                except Refused as e:
                    status, answer = e.code, {"error": {"code": e.code, "message": e.message, "status": e.status}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PUT(self):
                self._handle("PUT")

        self.server = serve_http(Handler)

    @property
    def endpoint(self) -> str:
        return f"http://localhost:{self.server.server_address[1]}"

    def close(self):
        for run in self.runs:
            run.join(timeout=120)
        close_http(self.server)

    def created(self) -> list[dict]:
        """The jobs of every create request, as sent."""
        return [body for method, path, body in self.requests if method == "POST" and body is not None]

    # ---------------------------------------------------------------------------------------------------------------
    # the API

    def answer(self, method: str, path: str, body: dict | None) -> dict:
        match = JOBS.match(path)
        if match is None:
            raise Refused(404, "NOT_FOUND", f"no such method: {method} {path}")
        project, location, job_id = match["project"], match["location"], match["id"]
        if method == "POST" and job_id is None:
            return self.create(project, location, body or {})
        with self.lock:
            job = self.jobs.get(job_id or "")
            if job is None or (job["projectId"], job["location"]) != (project, location):
                raise Refused(404, "NOT_FOUND", f"(job {job_id}) not found in project {project}, region {location}")
            if method == "PUT" and not match["messages"]:
                return self.update(job, body or {})
            if method != "GET":
                raise Refused(404, "NOT_FOUND", f"no such method: {method} {path}")
            if match["messages"]:
                return {"jobMessages": list(self.messages[job_id])}
            if self.unavailable:
                self.unavailable -= 1
                raise Refused(503, "UNAVAILABLE", "The service is currently unavailable.")
            return {k: v for k, v in job.items() if k != "environment"}

    def create(self, project: str, location: str, job: dict) -> dict:
        check_job(project, location, job)
        with self.lock:
            for other in self.jobs.values():
                if (other["projectId"], other["location"], other["name"]) == (project, location, job["name"]):
                    if other["currentState"] in ACTIVE:
                        return {k: v for k, v in other.items() if k != "environment"}
            job_id = f"{datetime.now(UTC):%Y-%m-%d_%H_%M_%S}-{next(self.ids)}"
            stored = {
                **job,
                "id": job_id,
                "projectId": project,
                "location": location,
                "currentState": "JOB_STATE_QUEUED",
            }
            self.jobs[job_id], self.messages[job_id] = stored, []
        run = threading.Thread(target=self._run, args=(job_id,), daemon=True)
        self.runs.append(run)
        run.start()
        return {k: v for k, v in stored.items() if k != "environment"}

    def update(self, job: dict, body: dict) -> dict:
        from google.cloud.dataflow_v1beta3 import JobState

        requested = body.get("requestedState")
        if requested is not None and not isinstance(requested, str):
            requested = JobState(requested).name
        if requested != "JOB_STATE_CANCELLED":
            raise Refused(
                400, "INVALID_ARGUMENT", f"this double updates a job's requestedState to cancel it, not {body}"
            )
        if job["currentState"] not in ACTIVE:
            raise Refused(
                400,
                "FAILED_PRECONDITION",
                f"Workflow modification failed. Causes: (job {job['id']}): Could not cancel workflow; job is in the "
                f"terminal state {job['currentState']}",
            )
        job["currentState"] = "JOB_STATE_CANCELLED"
        self._say(job["id"], "JOB_MESSAGE_BASIC", "Cancel request is committed for workflow job.")
        return {k: v for k, v in job.items() if k != "environment"}

    # ---------------------------------------------------------------------------------------------------------------
    # the job

    def _say(self, job_id: str, importance: str, text: str):
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        with self.lock:
            messages = self.messages[job_id]
            messages.append(
                {"id": str(len(messages) + 1), "time": now, "messageText": text, "messageImportance": importance}
            )

    def _state(self, job_id: str, state: str):
        with self.lock:
            if self.jobs[job_id]["currentState"] != "JOB_STATE_CANCELLED":
                self.jobs[job_id]["currentState"] = state

    def _run(self, job_id: str):
        self.start.wait()
        self._state(job_id, "JOB_STATE_RUNNING")
        if self.jobs[job_id]["currentState"] == "JOB_STATE_CANCELLED":
            return
        try:
            self._execute(job_id)
        except BaseException as e:  # noqa: BLE001 (the job fails with the reason, as the service reports it)
            text = e.args[0] if isinstance(e, JobFailed) else traceback.format_exc()
            self._say(job_id, "JOB_MESSAGE_ERROR", text)
            self._state(job_id, "JOB_STATE_FAILED")
            return
        self._say(job_id, "JOB_MESSAGE_BASIC", "Workflow succeeded.")
        self._state(job_id, "JOB_STATE_DONE")

    def _execute(self, job_id: str):
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.portability import common_urns
        from apache_beam.portability.api import beam_runner_api_pb2
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        from apache_beam.transforms import environments

        from core.storage import read_bytes

        job = self.jobs[job_id]
        options = job["environment"]["sdkPipelineOptions"]["options"]
        staged = read_bytes(options["pipelineUrl"])
        if staged is None:
            raise JobFailed(f"Unable to read the pipeline at {options['pipelineUrl']}")
        self.graphs[job_id] = len(staged)
        if hashlib.sha256(staged).hexdigest() != options.get("pipelineProtoHash"):
            raise JobFailed("The staged pipeline does not match its hash (pipelineProtoHash)")
        if len(staged) > self.graph_limit:
            raise JobFailed(GRAPH_TOO_LARGE)
        pipeline = beam_runner_api_pb2.Pipeline.FromString(staged)
        pool = job["environment"]["workerPools"][0]
        images = {c["environmentId"]: c["containerImage"] for c in pool.get("sdkHarnessContainerImages", [])}
        embedded = environments.EmbeddedPythonEnvironment.default().to_runner_api(None)
        for env_id, env in pipeline.components.environments.items():
            if env.urn != common_urns.environments.DOCKER.urn:
                raise JobFailed(f"Dataflow can only execute pipeline steps in Docker environments, not {env.urn}")
            image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
            if images.get(env_id) != image:
                raise JobFailed(f"environment {env_id}: image {image} is not the worker pool's {images.get(env_id)}")
            if image not in self.images:
                raise JobFailed(f"Failed to pull image {image}: the workers cannot start (ImagePullBackOff)")
            env.CopyFrom(embedded)
        self._say(job_id, "JOB_MESSAGE_BASIC", f"Workers started with {sorted(set(images.values()))}")
        # the workers get the options as the service writes them: a Struct's whole numbers without a fraction
        sdk = {
            k: int(v) if isinstance(v, float) and v.is_integer() else v
            for k, v in options.items()
            if k not in ("runner", "pipelineUrl", "pipelineProtoHash")
        }
        FnApiRunner().run_via_runner_api(pipeline, PipelineOptions.from_dictionary(sdk)).wait_until_finish()


class JobFailed(Exception):
    """The job fails with this message (the service's words)."""


def check_job(project: str, location: str, job: dict) -> None:
    """What jobs.create refuses (400) in `job` (the request's Job, as JSON)."""

    def refuse(message):
        raise Refused(400, "INVALID_ARGUMENT", message)

    if not PROJECT.match(project):
        refuse(f"Invalid project ID {project!r}")
    if not REGION.match(location):
        refuse(f"Invalid region {location!r}: not a Dataflow regional endpoint")
    name = job.get("name", "")
    if not JOB_NAME.match(name):
        refuse(f"(job name {name!r}) must match the regular expression '[a-z]([-a-z0-9]{{0,1022}}[a-z0-9])?'")
    labels = job.get("labels") or {}
    if len(labels) > 64:
        refuse(f"A job may have at most 64 labels, not {len(labels)}")
    for key, value in labels.items():
        if not LABEL_KEY.match(key) or not isinstance(value, str) or not LABEL_VALUE.match(value):
            refuse(
                f"Invalid label {key}={value}: keys start with a lowercase letter; keys and values have at most "
                "63 lowercase letters, digits, _ and -"
            )
    env = job.get("environment") or {}
    if not str(env.get("tempStoragePrefix", "")).startswith("storage.googleapis.com/"):
        refuse("The temp location must be a Cloud Storage path (gs://bucket/path)")
    account = env.get("serviceAccountEmail")
    if account is not None and not SERVICE_ACCOUNT.match(account):
        refuse(f"Invalid service account email {account!r}")
    key = env.get("serviceKmsKeyName")
    if key is not None and not KMS_KEY.match(key):
        refuse(f"Invalid Cloud KMS key {key!r}: projects/P/locations/L/keyRings/R/cryptoKeys/K")
    pools = env.get("workerPools") or []
    if len(pools) != 1:
        refuse(f"A job has one worker pool, not {len(pools)}")
    pool = pools[0]
    if not pool.get("sdkHarnessContainerImages") or not all(
        c.get("containerImage") for c in pool["sdkHarnessContainerImages"]
    ):
        refuse("Runner v2 jobs name their SDK harness container images")
    subnetwork = pool.get("subnetwork")
    if subnetwork:
        found = SUBNETWORK_REGION.search(subnetwork)
        if found is None or found["region"] != location:
            refuse(f"The subnetwork {subnetwork} must be in the job's region {location}")
    workers = int((pool.get("autoscalingSettings") or {}).get("maxNumWorkers") or 0)
    if workers > MAX_WORKERS:
        refuse(f"maxNumWorkers {workers} is over the {MAX_WORKERS} workers a job may have")
    options = (env.get("sdkPipelineOptions") or {}).get("options") or {}
    if not str(options.get("pipelineUrl", "")).startswith("gs://"):
        refuse("Runner v2 jobs give their staged pipeline's Cloud Storage URL (pipelineUrl)")
