"""The double's servers on 127.0.0.1: gRPC for the GAPIC clients' JobService, ModelService, EndpointService,
PredictionService (Predict) and Operations, REST for the routes of GCPC's upload and deploy launchers, its job
launchers' cancels (`POST .../customJobs/N:cancel`, sent on SIGTERM) and online prediction, and Dataflow's
`projects.locations.jobs.create` for data prep's job (components/lib/prep/dataflow.py). Each request is parsed into its aiplatform_v1 (dataflow_v1beta3) message (an unknown field or a wrong type is refused
as Vertex refuses it), recorded (Context.record), authorized (Context.authorize: the API enabled, the permission
its service's `PERMISSIONS` names held by the caller) and answered by its service; an ApiError is answered with its
status and message. A share of the project's own gRPC calls (Context.fault) is refused as Vertex refuses calls while busy;
the calls of Google Cloud Pipeline Components' launchers (their user agent; every REST route) are not: they do not
repeat a refused call, and on Vertex a task's retry policy repeats the step."""

from __future__ import annotations

import json
import re
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import (
    endpoint_service as endpoint_service_pb,
    job_service as job_service_pb,
    model_service as model_service_pb,
)
from google.cloud.dataflow_v1beta3.types import jobs as dataflow_jobs
from google.longrunning import operations_pb2
from google.protobuf import json_format

from pipelines.rehearsal.api.context import Context
from pipelines.rehearsal.api.endpoint_service import EndpointService
from pipelines.rehearsal.api.job_service import JobService
from pipelines.rehearsal.api.messages import to_dict
from pipelines.rehearsal.api.model_service import ModelService
from pipelines.rehearsal.api.operations import Operations
from pipelines.rehearsal.registry import ApiError

V1 = "google.cloud.aiplatform.v1"
ONLINE_REQUEST_LIMIT = 1_572_864  # bytes a public endpoint's online prediction request may hold (1.5 MiB)


GCPC_AGENT = "google-cloud-pipeline-components"  # in the user agent of GCPC's launchers' GAPIC clients


def _from_gcpc(context) -> bool:
    return any(GCPC_AGENT in str(value) for _, value in context.invocation_metadata())


def _field(request, path: str) -> str:
    """The value of a request's field at `path` ("endpoint.name"; "": "")."""
    for name in path.split(".") if path else ():
        request = getattr(request, name)
    return request if path else ""


class VertexDouble(Context):
    """The local Vertex AI API: Context's arguments, and `preempt`, the replica each custom job loses once to a Spot
    preemption (JobService; None: none); `start()` serves it, `stop()` ends its jobs, containers and servers."""

    def __init__(self, *args: Any, preempt: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.operations = Operations(self)
        self.model_service = ModelService(self, self.operations)
        self.endpoint_service = EndpointService(self, self.operations)
        self.job_service = JobService(self, preempt)
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
        # a stop is seen within 0.05 s (http.server's default: 0.5 s)
        threading.Thread(target=http.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_base(self) -> str:
        assert self._http is not None, "the double is not started"
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def stop(self) -> None:
        self.job_service.stop()
        self.endpoint_service.stop()
        if self._http:
            self._http.shutdown()
        if self._grpc:
            self._grpc.stop(grace=1)

    # --- gRPC ----------------------------------------------------------------------------------------------------

    def _grpc_handlers(self):
        def unary(method, request_class, response_class, function):
            def handle(request, context):
                body = (
                    to_dict(request)
                    if hasattr(type(request), "to_dict")
                    else json_format.MessageToDict(request, preserving_proto_field_name=True)
                )
                self.record("grpc", method, body)
                try:
                    service, name = method.split(".")
                    permission, field = permissions.get(service, {}).get(name, ("", ""))
                    self.authorize(permission, _field(request, field))
                    fault = None if _from_gcpc(context) else self.fault()
                    if fault:
                        raise fault
                    return function(request)
                except ApiError as e:
                    self.error(method, e.message)
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

        permissions = {
            "JobService": JobService.PERMISSIONS,
            "ModelService": ModelService.PERMISSIONS,
            "EndpointService": EndpointService.PERMISSIONS,
            "PredictionService": EndpointService.PERMISSIONS,
        }
        services = {
            f"{V1}.JobService": self.job_service.rpcs(),
            f"{V1}.ModelService": self.model_service.rpcs(),
            f"{V1}.EndpointService": self.endpoint_service.rpcs(),
            f"{V1}.PredictionService": self.endpoint_service.prediction_rpcs(),
            "google.longrunning.Operations": self.operations.rpcs(),
        }
        return [
            grpc.method_handlers_generic_handler(
                service, {name: unary(f"{service.rsplit('.', 1)[-1]}.{name}", *spec) for name, spec in methods.items()}
            )
            for service, methods in services.items()
        ]

    # --- REST ----------------------------------------------------------------------------------------------------

    # the Vertex AI REST handlers' methods, whose PERMISSIONS they need (the resource: the path's group of that name)
    REST_METHODS = {
        "_rest_upload": ModelService.PERMISSIONS["UploadModel"],
        "_rest_deploy": EndpointService.PERMISSIONS["DeployModel"],
        "_rest_predict": EndpointService.PERMISSIONS["Predict"],
        "_rest_operation": ("", ""),
    }
    REST: list[tuple[str, re.Pattern, Any, str]] = [  # (method, path pattern, request class, handler name)
        (
            "POST",
            re.compile(r"^/v1/(?P<parent>projects/[^/]+/locations/[^/]+)/models:upload$"),
            model_service_pb.UploadModelRequest,
            "_rest_upload",
        ),
        (
            "POST",
            re.compile(r"^/v1/(?P<endpoint>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):deployModel$"),
            endpoint_service_pb.DeployModelRequest,
            "_rest_deploy",
        ),
        (
            "POST",
            re.compile(r"^/v1/(?P<endpoint>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):predict$"),
            None,
            "_rest_predict",
        ),
        *(  # a job's cancel, authorized by its handler (the permission of its gRPC method)
            (
                "POST",
                re.compile(rf"^/v1/(?P<name>projects/[^/]+/locations/[^/]+/{collection}/[^/:]+):cancel$"),
                request_class,
                "_rest_cancel",
            )
            for collection, request_class in (
                ("customJobs", job_service_pb.CancelCustomJobRequest),
                ("hyperparameterTuningJobs", job_service_pb.CancelHyperparameterTuningJobRequest),
                ("batchPredictionJobs", job_service_pb.CancelBatchPredictionJobRequest),
            )
        ),
        (
            "GET",
            re.compile(r"^/v1/(?P<operation>projects/[^/]+/locations/[^/]+/operations/[^/:]+)$"),
            None,
            "_rest_operation",
        ),
        (  # Dataflow's (GAPIC REST transport: its query names the JSON form)
            "POST",
            re.compile(r"^/v1b3/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/jobs(\?.*)?$"),
            dataflow_jobs.Job,
            "_rest_dataflow_job",
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
                "rest",
                f"{method} {handler.path.split('?')[0].split('/')[-1]}",
                to_dict(request) if request is not None else body,
            )
            if name in self.REST_METHODS:
                permission, group = self.REST_METHODS[name]
                self.authorize(permission, match[group] if match and group else "")
            answer = getattr(self, name)(match, request, body)
        except ApiError as e:
            self.error(f"{method} {handler.path}", e.message)
            status, answer = e.http, {"error": {"code": e.http, "message": e.message, "status": e.status}}
        payload = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _rest_upload(self, match, request, body) -> dict:
        return json_format.MessageToDict(self.model_service.upload_model(request.parent or match["parent"], request))

    def _rest_deploy(self, match, request, body) -> dict:
        if request.endpoint and request.endpoint != match["endpoint"]:
            raise ApiError("INVALID_ARGUMENT", f"endpoint {request.endpoint!r} differs from the URL's")
        request.endpoint = match["endpoint"]
        return json_format.MessageToDict(self.endpoint_service.deploy_model(request))

    def _rest_cancel(self, match, request, body) -> dict:
        """Cancel a job as the gRPC method of `request`'s class does (its permission, its 404); Vertex's REST answer
        to a cancel: an empty object."""
        if request.name and request.name != match["name"]:
            raise ApiError("INVALID_ARGUMENT", f"name {request.name!r} differs from the URL's")
        request.name = match["name"]
        permission, _ = JobService.PERMISSIONS[type(request).__name__.removesuffix("Request")]
        self.authorize(permission, request.name)
        self.job_service.cancel_job(request)
        return {}

    def _rest_predict(self, match, request, body) -> dict:
        return self.endpoint_service.predict(match["endpoint"], body)

    def _rest_dataflow_job(self, match, request, body) -> dict:
        job = json_format.MessageToDict(dataflow_jobs.Job.pb(request))
        return self.create_dataflow_job(match["project"], match["location"], job)

    def _rest_operation(self, match, request, body) -> dict:
        return json_format.MessageToDict(
            self.operations.get_operation(operations_pb2.GetOperationRequest(name=match["operation"]))
        )
