"""The local Vertex AI API double: the gRPC services the GAPIC clients call (JobService, ModelService,
EndpointService, long-running Operations) and the REST routes GCPC's upload, endpoint and deploy launchers call, on
127.0.0.1. Requests are parsed into the aiplatform_v1 messages (an unknown field or a wrong type is refused as
Vertex refuses it), recorded one JSON line each, and answered from the registry and the jobs (registry.py, jobs.py).
Jobs go PENDING → RUNNING → SUCCEEDED / FAILED (with the error message) / CANCELLED, in a thread each.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import threading
import time
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import (
    batch_prediction_job,
    custom_job,
    endpoint as endpoint_pb,
    endpoint_service,
    hyperparameter_tuning_job,
    job_service,
    model as model_pb,
    model_service,
)
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, json_format, timestamp_pb2
from google.rpc import status_pb2

from pipelines.rehearsal import gcs, jobs, rules
from pipelines.rehearsal.iam import Iam, compute_default as iam_compute_default
from pipelines.rehearsal.registry import ApiError, Registry

V1 = "google.cloud.aiplatform.v1"
ONLINE_REQUEST_LIMIT = 1_572_864  # bytes a public endpoint's online prediction request may hold (1.5 MiB)
PAGE_SIZE = 2  # Vertex pages its lists (up to 100 by default); small pages here, so that paging is exercised
_DISPLAY_NAME = re.compile(r'display_name\s*=\s*"((?:[^"\\]|\\.)*)"')
JOB_KINDS = {  # request field → (message class, collection)
    "custom_job": (custom_job.CustomJob, "customJobs"),
    "hyperparameter_tuning_job": (hyperparameter_tuning_job.HyperparameterTuningJob, "hyperparameterTuningJobs"),
    "batch_prediction_job": (batch_prediction_job.BatchPredictionJob, "batchPredictionJobs"),
}


def _dict(message) -> dict:
    return type(message).to_dict(
        message, preserving_proto_field_name=True, use_integers_for_enums=False, including_default_value_fields=False
    )


def _time(seconds: float) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


def _display_name(filter_text: str) -> str | None:
    match = _DISPLAY_NAME.search(filter_text or "")
    return match[1].replace('\\"', '"').replace("\\\\", "\\") if match else None


class VertexDouble:
    def __init__(
        self,
        directory: str,
        state_path: str,
        project: str,
        project_number: str,
        location: str,
        log=print,
        caller: str = "",
    ):
        """`directory`: this rehearsal's requests, job and container logs; `state_path`: the registry and
        endpoints, shared by successive rehearsals (iam.json beside it); resource names carry `project_number`
        (Vertex answers names with the project's number; requests may use either); `caller`: the service account
        the run's steps act as (default: the project's Compute Engine default account)."""
        self.directory, self.project, self.location, self.log = directory, project, location, log
        os.makedirs(directory, exist_ok=True)
        self.registry = Registry(state_path, project, location, project_number)
        self.iam = Iam(
            os.path.join(os.path.dirname(state_path), "iam.json"), caller or iam_compute_default(project_number)
        )
        self.requests_path = os.path.join(directory, "vertex_requests.jsonl")
        self.lock = threading.Lock()
        self.sequence = itertools.count(1)
        self.jobs: dict[str, dict] = {}
        self.operations: dict[str, operations_pb2.Operation] = {}
        self.containers: dict[str, tuple] = {}  # deployed model id → (process, its predict route's URL)
        self.errors: list[dict] = []  # every error answered or job failed: {"method", "message", "time"}
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    # --- lifecycle -----------------------------------------------------------------------------------------------

    def start(self) -> VertexDouble:
        self._grpc = server = grpc.server(futures.ThreadPoolExecutor(16))
        server.add_generic_rpc_handlers(self._grpc_handlers())
        self.grpc_port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                double._rest(self, "POST")

            def do_GET(self):
                double._rest(self, "GET")

            def log_message(self, *args):
                pass

        self._http = http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        return self

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_base(self) -> str:
        assert self._http is not None, "the double is not started"
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def stop(self) -> None:
        for job in self.jobs.values():
            self._cancel(job)
        for process, _ in self.containers.values():
            jobs.stop_container(process)
        self.containers.clear()
        if self._http:
            self._http.shutdown()
        if self._grpc:
            self._grpc.stop(grace=1)

    # --- recording -----------------------------------------------------------------------------------------------

    def record(self, api: str, method: str, request: dict) -> None:
        with self.lock, open(self.requests_path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "seq": next(self.sequence),
                        "time": round(time.time(), 3),
                        "api": api,
                        "method": method,
                        "request": request,
                    }
                )
                + "\n"
            )

    def _error(self, method: str, message: str) -> None:
        self.errors.append({"method": method, "message": message, "time": time.time()})
        self.log(f"[vertex] {method}: {message}")

    # --- gRPC ----------------------------------------------------------------------------------------------------

    def _grpc_handlers(self):
        def unary(method, request_class, response_class, function):
            def handle(request, context):
                body = (
                    _dict(request)
                    if hasattr(type(request), "to_dict")
                    else json_format.MessageToDict(request, preserving_proto_field_name=True)
                )
                self.record("grpc", method, body)
                try:
                    return function(request)
                except ApiError as e:
                    self._error(method, e.message)
                    context.abort(getattr(grpc.StatusCode, e.status), e.message)

            serialize = (
                response_class.serialize if hasattr(response_class, "serialize") else response_class.SerializeToString
            )
            deserialize = (
                request_class.deserialize if hasattr(request_class, "deserialize") else request_class.FromString
            )
            return grpc.unary_unary_rpc_method_handler(
                handle, request_deserializer=deserialize, response_serializer=serialize
            )

        services = {
            f"{V1}.JobService": {
                "CreateCustomJob": (
                    job_service.CreateCustomJobRequest,
                    custom_job.CustomJob,
                    lambda r: self._create_job("custom_job", r),
                ),
                "GetCustomJob": (job_service.GetCustomJobRequest, custom_job.CustomJob, self._get_job),
                "CancelCustomJob": (job_service.CancelCustomJobRequest, empty_pb2.Empty, self._cancel_request),
                "CreateHyperparameterTuningJob": (
                    job_service.CreateHyperparameterTuningJobRequest,
                    hyperparameter_tuning_job.HyperparameterTuningJob,
                    lambda r: self._create_job("hyperparameter_tuning_job", r),
                ),
                "GetHyperparameterTuningJob": (
                    job_service.GetHyperparameterTuningJobRequest,
                    hyperparameter_tuning_job.HyperparameterTuningJob,
                    self._get_job,
                ),
                "CancelHyperparameterTuningJob": (
                    job_service.CancelHyperparameterTuningJobRequest,
                    empty_pb2.Empty,
                    self._cancel_request,
                ),
                "CreateBatchPredictionJob": (
                    job_service.CreateBatchPredictionJobRequest,
                    batch_prediction_job.BatchPredictionJob,
                    lambda r: self._create_job("batch_prediction_job", r),
                ),
                "GetBatchPredictionJob": (
                    job_service.GetBatchPredictionJobRequest,
                    batch_prediction_job.BatchPredictionJob,
                    self._get_job,
                ),
                "CancelBatchPredictionJob": (
                    job_service.CancelBatchPredictionJobRequest,
                    empty_pb2.Empty,
                    self._cancel_request,
                ),
            },
            f"{V1}.ModelService": {
                "ListModels": (model_service.ListModelsRequest, model_service.ListModelsResponse, self._list_models),
                "GetModel": (
                    model_service.GetModelRequest,
                    model_pb.Model,
                    lambda r: self._model(self.registry.version(r.name)),
                ),
                "MergeVersionAliases": (
                    model_service.MergeVersionAliasesRequest,
                    model_pb.Model,
                    lambda r: self._model(self.registry.merge_aliases(r.name, list(r.version_aliases))),
                ),
            },
            f"{V1}.EndpointService": {
                "ListEndpoints": (
                    endpoint_service.ListEndpointsRequest,
                    endpoint_service.ListEndpointsResponse,
                    self._list_endpoints,
                ),
                "GetEndpoint": (
                    endpoint_service.GetEndpointRequest,
                    endpoint_pb.Endpoint,
                    lambda r: self._endpoint(self.registry.endpoint(r.name)),
                ),
                "UpdateEndpoint": (endpoint_service.UpdateEndpointRequest, endpoint_pb.Endpoint, self._update_endpoint),
                "UndeployModel": (endpoint_service.UndeployModelRequest, operations_pb2.Operation, self._undeploy),
            },
            "google.longrunning.Operations": {
                "GetOperation": (operations_pb2.GetOperationRequest, operations_pb2.Operation, self._operation),
            },
        }
        return [
            grpc.method_handlers_generic_handler(
                service, {name: unary(f"{service.rsplit('.', 1)[-1]}.{name}", *spec) for name, spec in methods.items()}
            )
            for service, methods in services.items()
        ]

    # --- models and endpoints ------------------------------------------------------------------------------------

    def _model(self, version: dict) -> model_pb.Model:
        fields = {
            k: version[k]
            for k in (
                "name",
                "display_name",
                "version_id",
                "version_aliases",
                "artifact_uri",
                "labels",
                "container_spec",
                "encryption_spec",
                "description",
            )
            if k in version
        }
        return model_pb.Model(
            **fields,
            create_time=_time(version.get("model_create_time", version["create_time"])),
            version_create_time=_time(version["create_time"]),
        )

    def _list_models(self, request) -> model_service.ListModelsResponse:
        found = self.registry.list_models(request.parent, _display_name(request.filter), request.order_by)
        page, token = self._page(found, request.page_size, request.page_token)
        return model_service.ListModelsResponse(models=[self._model(v) for v in page], next_page_token=token)

    def _page(self, items: list, page_size: int, page_token: str) -> tuple[list, str]:
        """One page of a list and the next page's token, as Vertex pages them (here at most PAGE_SIZE items, so that
        a client that reads only the first page misses what follows)."""
        size = min(page_size or PAGE_SIZE, PAGE_SIZE)
        try:
            start = int(page_token or 0)
        except ValueError:
            raise ApiError("INVALID_ARGUMENT", f"page_token {page_token!r} is not one this API gave") from None
        end = start + size
        return items[start:end], str(end) if end < len(items) else ""

    def _endpoint(self, endpoint: dict) -> endpoint_pb.Endpoint:
        deployed = [
            endpoint_pb.DeployedModel(
                **{k: v for k, v in d.items() if k != "create_time"}, create_time=_time(d["create_time"])
            )
            for d in endpoint["deployed_models"]
        ]
        fields = {
            k: endpoint[k]
            for k in ("name", "display_name", "labels", "encryption_spec", "description")
            if k in endpoint
        }
        return endpoint_pb.Endpoint(
            **fields,
            deployed_models=deployed,
            traffic_split=endpoint["traffic_split"],
            create_time=_time(endpoint["create_time"]),
        )

    def _list_endpoints(self, request) -> endpoint_service.ListEndpointsResponse:
        found = self.registry.list_endpoints(request.parent, _display_name(request.filter), request.order_by)
        page, token = self._page(found, request.page_size, request.page_token)
        return endpoint_service.ListEndpointsResponse(
            endpoints=[self._endpoint(e) for e in page], next_page_token=token
        )

    def _update_endpoint(self, request) -> endpoint_pb.Endpoint:
        if list(request.update_mask.paths) != ["traffic_split"]:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"update_mask {list(request.update_mask.paths)}: the rehearsal updates traffic_split only",
            )
        return self._endpoint(self.registry.set_traffic(request.endpoint.name, dict(request.endpoint.traffic_split)))

    def _check(self, request: dict) -> None:
        """What Vertex checks in a request's identity, locations and resources (rules.py), and whether the caller may
        act as the service account it names (iam.py)."""
        problem = (
            rules.identity(request, self.location, self.registry.project_ids)
            or rules.locations(request)
            or rules.resources(request)
        )
        if problem:
            raise ApiError("INVALID_ARGUMENT", problem)
        for _, part in rules.identity_parts(request):
            account = part.get("service_account", "")
            denied = account and self.iam.act_as(account)
            if denied:
                raise ApiError("PERMISSION_DENIED", denied)

    def _done(self, response, metadata=None) -> operations_pb2.Operation:
        name = f"{self.registry.parent}/operations/{self.registry.new_id()}"
        packed = any_pb2.Any()
        packed.Pack(type(response).pb(response) if hasattr(type(response), "pb") else response)
        operation = operations_pb2.Operation(name=name, done=True, response=packed)
        self.operations[name] = operation
        return operation

    def _long_running(self, method: str, work) -> operations_pb2.Operation:
        """An operation answered at once, not done; `work()` runs in a thread and the operation ends with its
        response, or with its error (an ApiError's status and message), as Vertex's deploy and undeploy do."""
        name = f"{self.registry.parent}/operations/{self.registry.new_id()}"
        operation = self.operations[name] = operations_pb2.Operation(name=name, done=False)

        def run():
            try:
                response = work()
                operation.response.Pack(type(response).pb(response))
            except ApiError as e:
                self._error(method, e.message)
                operation.error.CopyFrom(
                    status_pb2.Status(code=getattr(grpc.StatusCode, e.status).value[0], message=e.message)
                )
            operation.done = True

        threading.Thread(target=run, daemon=True, name=f"operation-{name}").start()
        return operation

    def _operation(self, request) -> operations_pb2.Operation:
        name = self.registry.canonical(request.name)
        if name not in self.operations:
            raise ApiError("NOT_FOUND", f"operation {request.name} not found")
        return self.operations[name]

    def _undeploy(self, request) -> operations_pb2.Operation:
        """Checked at once (a deployed model with traffic is refused); the container stops in the operation."""
        self.registry.remove_deployed(request.endpoint, request.deployed_model_id, dict(request.traffic_split))

        endpoint_id = request.endpoint.rsplit("/", 1)[-1]

        def stop():
            process_url = self.containers.pop(request.deployed_model_id, None)
            if process_url:
                jobs.stop_container(process_url[0])
            gcs.delete_folder(self._model_copy(f"endpoints/{endpoint_id}/deployedModels/{request.deployed_model_id}"))
            return endpoint_service.UndeployModelResponse()

        return self._long_running("EndpointService.UndeployModel", stop)

    def _model_copy(self, owner: str) -> str:
        """Where a model's artifacts are copied for the container of a deployment or a batch job (`owner`), its
        AIP_STORAGE_URI: Vertex copies them into a bucket of its own, and deletes the copy when the model is
        undeployed or the job ends."""
        return f"gs://caip-tenant-{self.registry.parent.split('/')[1]}/{owner}/model"

    def deploy(self, request: endpoint_service.DeployModelRequest) -> operations_pb2.Operation:
        """The request is checked at once (model, traffic split); the container starts in the operation, which fails
        with the reason when it never becomes healthy, as Vertex's deploy operation does."""
        self._check(_dict(request))
        version, split = self.registry.plan_deploy(
            request.endpoint, _dict(request.deployed_model), dict(request.traffic_split)
        )
        deployed_id = self.registry.new_id()
        log = os.path.join(self.directory, "endpoints", f"{deployed_id}.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)

        endpoint_id = request.endpoint.rsplit("/", 1)[-1]

        def start():
            try:
                copy = gcs.copy_folder(
                    version["artifact_uri"], self._model_copy(f"endpoints/{endpoint_id}/deployedModels/{deployed_id}")
                )
                self.containers[deployed_id] = jobs.start_container(copy, endpoint_id, deployed_id, log)
            except FileNotFoundError as e:
                raise ApiError("FAILED_PRECONDITION", f"deploying {version['name']}: {e}") from e
            except jobs.JobError as e:
                raise ApiError(
                    "FAILED_PRECONDITION", f"deploying {version['name']}@{version['version_id']} failed: {e}"
                ) from e
            deployed = {
                **_dict(request.deployed_model),
                "id": deployed_id,
                "model": version["name"],
                "model_version_id": version["version_id"],
                "create_time": time.time(),
            }
            self.registry.add_deployed(request.endpoint, deployed, split)
            return endpoint_service.DeployModelResponse(
                deployed_model=endpoint_pb.DeployedModel(
                    id=deployed_id, model=version["name"], model_version_id=version["version_id"]
                )
            )

        return self._long_running("EndpointService.DeployModel", start)

    def predict(self, endpoint_name: str, body: dict) -> dict:
        endpoint = self.registry.endpoint(endpoint_name)
        split = endpoint["traffic_split"]
        if not split:
            raise ApiError("FAILED_PRECONDITION", f"{endpoint_name} has no deployed model serving traffic")
        chosen = random.choices(list(split), weights=list(split.values()))[0]
        if chosen not in self.containers:
            raise ApiError("FAILED_PRECONDITION", f"deployed model {chosen} is not running in this rehearsal")
        request = urllib.request.Request(
            self.containers[chosen][1], json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    # --- jobs ----------------------------------------------------------------------------------------------------

    def _create_job(self, kind: str, request):
        self.registry.check_parent(request.parent)
        message_class, collection = JOB_KINDS[kind]
        data = _dict(getattr(request, kind))
        if not data.get("display_name"):
            raise ApiError("INVALID_ARGUMENT", f"{kind}.display_name is required")
        self._check(data)
        try:
            jobs.validate(kind, data)
        except jobs.JobError as e:
            raise ApiError("INVALID_ARGUMENT", str(e)) from None
        name = f"{self.registry.parent}/{collection}/{self.registry.new_id()}"
        job = {
            "kind": kind,
            "name": name,
            "data": {**data, "name": name, "state": "JOB_STATE_PENDING", "create_time": time.time()},
            "pids": [],
            "cancelled": False,
        }
        self.jobs[name] = job
        threading.Thread(target=self._work, args=(job,), daemon=True, name=f"job-{name}").start()
        return self._job_message(job)

    def _job_message(self, job: dict):
        message_class = JOB_KINDS[job["kind"]][0]
        data = {k: v for k, v in job["data"].items() if k not in ("create_time", "start_time", "end_time")}
        message = message_class(**data)
        for field in ("create_time", "start_time", "end_time"):
            if field in job["data"]:
                setattr(message, field, _time(job["data"][field]))
        return message

    def _get_job(self, request):
        name = self.registry.canonical(request.name)
        if name not in self.jobs:
            raise ApiError("NOT_FOUND", f"job {request.name} not found")
        return self._job_message(self.jobs[name])

    def _cancel(self, job: dict) -> None:
        job["cancelled"] = True
        for pid in job["pids"]:
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass

    def _cancel_request(self, request):
        name = self.registry.canonical(request.name)
        if name not in self.jobs:
            raise ApiError("NOT_FOUND", f"job {request.name} not found")
        self._cancel(self.jobs[name])
        return empty_pb2.Empty()

    def _work(self, job: dict) -> None:
        data, kind = job["data"], job["kind"]
        log_dir = self.job_dir(data["name"])
        os.makedirs(log_dir, exist_ok=True)
        data.update(state="JOB_STATE_RUNNING", start_time=time.time())
        self.log(f"[vertex] {kind} {data['display_name']} running ({data['name']}); logs in {log_dir}")
        try:
            with open(os.path.join(log_dir, "job.log"), "w") as sink:
                if kind == "custom_job":
                    jobs.run_custom_job(data, log_dir, lambda attempt, pids: job["pids"].extend(pids), sink)
                elif kind == "hyperparameter_tuning_job":
                    data["trials"] = jobs.run_tuning_job(data, os.path.join(log_dir, "study"), sink)
                else:
                    self._batch(job, log_dir)
            data["state"] = "JOB_STATE_SUCCEEDED"
        except (jobs.JobError, ApiError) as e:
            data["state"] = "JOB_STATE_CANCELLED" if job["cancelled"] else "JOB_STATE_FAILED"
            data["error"] = {"code": 1 if job["cancelled"] else 3, "message": str(e)}
            self._error(f"{kind} {data['display_name']}", str(e))
        except Exception as e:  # noqa: BLE001 (an unexpected failure is the job's INTERNAL error, as on Vertex)
            data.update(state="JOB_STATE_FAILED", error={"code": 13, "message": f"{type(e).__name__}: {e}"})
            self._error(f"{kind} {data['display_name']}", f"{type(e).__name__}: {e}")
        data["end_time"] = time.time()
        self.log(f"[vertex] {kind} {data['display_name']}: {data['state']}")

    def job_dir(self, name: str) -> str:
        """The folder of a job's logs (and of a tuning job's study records, `study/`)."""
        return os.path.join(self.directory, "jobs", name.rsplit("/", 1)[-1])

    def _batch(self, job: dict, log_dir: str) -> None:
        """A batch prediction job: the model's container on a copy of its artifacts, for the job's duration."""
        data = job["data"]
        version = self.registry.version(data.get("model", ""))
        job_id = data["name"].rsplit("/", 1)[-1]
        copy = gcs.copy_folder(version["artifact_uri"], self._model_copy(f"batchPredictionJobs/{job_id}"))
        try:
            process, url = jobs.start_container(copy, job_id, job_id, os.path.join(log_dir, "container.log"))
            job["pids"].append(process.pid)
            try:
                data.update(jobs.run_batch_job(data, url, version["display_name"]))
            finally:
                jobs.stop_container(process)
        finally:
            gcs.delete_folder(copy)

    # --- REST ----------------------------------------------------------------------------------------------------

    REST: list[tuple[str, re.Pattern, Any, str]] = [  # (method, path pattern, request class, handler name)
        (
            "POST",
            re.compile(r"^/v1/(?P<parent>projects/[^/]+/locations/[^/]+)/models:upload$"),
            model_service.UploadModelRequest,
            "_rest_upload",
        ),
        (
            "POST",
            re.compile(r"^/v1/(?P<parent>projects/[^/]+/locations/[^/]+)/endpoints$"),
            endpoint_pb.Endpoint,
            "_rest_create_endpoint",
        ),
        (
            "POST",
            re.compile(r"^/v1/(?P<endpoint>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):deployModel$"),
            endpoint_service.DeployModelRequest,
            "_rest_deploy",
        ),
        (
            "POST",
            re.compile(r"^/v1/(?P<endpoint>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):predict$"),
            None,
            "_rest_predict",
        ),
        (
            "GET",
            re.compile(r"^/v1/(?P<operation>projects/[^/]+/locations/[^/]+/operations/[^/:]+)$"),
            None,
            "_rest_operation",
        ),
    ]

    def _rest(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        route = next(
            (
                (m, pattern.match(handler.path), cls, name)
                for m, pattern, cls, name in self.REST
                if m == method and pattern.match(handler.path)
            ),
            None,
        )
        status, answer = 200, {}
        try:
            if route is None:
                raise ApiError("NOT_FOUND", f"{method} {handler.path}: not a route of the rehearsal's Vertex AI API")
            _, match, request_class, name = route
            if name == "_rest_predict" and len(raw) > ONLINE_REQUEST_LIMIT:
                raise ApiError(
                    "INVALID_ARGUMENT", f"Request payload size exceeds the limit: {ONLINE_REQUEST_LIMIT} bytes."
                )
            body = json.loads(raw or b"{}")
            request = None
            if request_class is not None:
                request = request_class()
                try:
                    json_format.ParseDict(body, request_class.pb(request))
                except json_format.ParseError as e:
                    raise ApiError("INVALID_ARGUMENT", f"invalid {request_class.__name__}: {e}") from None
            self.record(
                "rest", f"{method} {handler.path.split('/')[-1]}", _dict(request) if request is not None else body
            )
            answer = getattr(self, name)(match, request, body)
        except ApiError as e:
            self._error(f"{method} {handler.path}", e.message)
            status, answer = e.http, {"error": {"code": e.http, "message": e.message, "status": e.status}}
        payload = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _rest_done(self, response) -> dict:
        return json_format.MessageToDict(self._done(response))

    def _rest_upload(self, match, request, body) -> dict:
        self._check(_dict(request.model))
        name, version_id = self.registry.upload(
            request.parent or match["parent"], _dict(request.model), request.parent_model
        )
        return self._rest_done(model_service.UploadModelResponse(model=name, model_version_id=version_id))

    def _rest_create_endpoint(self, match, request, body) -> dict:
        self._check(_dict(request))
        return self._rest_done(self._endpoint(self.registry.create_endpoint(match["parent"], _dict(request))))

    def _rest_deploy(self, match, request, body) -> dict:
        if request.endpoint and request.endpoint != match["endpoint"]:
            raise ApiError("INVALID_ARGUMENT", f"endpoint {request.endpoint!r} differs from the URL's")
        request.endpoint = match["endpoint"]
        return json_format.MessageToDict(self.deploy(request))

    def _rest_predict(self, match, request, body) -> dict:
        return self.predict(match["endpoint"], body)

    def _rest_operation(self, match, request, body) -> dict:
        return json_format.MessageToDict(self._operation(operations_pb2.GetOperationRequest(name=match["operation"])))
