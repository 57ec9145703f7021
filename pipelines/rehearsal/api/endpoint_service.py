"""The EndpointService on the registry's endpoints (registry.py): list, get, create, update (the traffic split only),
undeploy and delete over gRPC; deploy and predict over REST (GCPC's deploy launcher, online prediction); the
PredictionService's Predict over gRPC. A deployed model is the serving container (jobs.start_container) on Vertex's
copy of the model's artifacts, started and stopped in a long-running operation; predict sends a request to a deployed
model the traffic split picks and names it in the answer, as Vertex does."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request

from google.cloud.aiplatform_v1.types import (
    endpoint as endpoint_pb,
    endpoint_service as endpoint_service_pb,
    prediction_service as prediction_service_pb,
)
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, json_format

from pipelines.rehearsal import gcs, jobs
from pipelines.rehearsal.api import messages
from pipelines.rehearsal.api.context import Context
from pipelines.rehearsal.api.operations import Operations
from pipelines.rehearsal.registry import ApiError


def _endpoint(endpoint: dict) -> endpoint_pb.Endpoint:
    deployed = [
        endpoint_pb.DeployedModel(
            **{k: v for k, v in d.items() if k != "create_time"}, create_time=messages.timestamp(d["create_time"])
        )
        for d in endpoint["deployed_models"]
    ]
    fields = {
        k: endpoint[k] for k in ("name", "display_name", "labels", "encryption_spec", "description") if k in endpoint
    }
    return endpoint_pb.Endpoint(
        **fields,
        deployed_models=deployed,
        traffic_split=endpoint["traffic_split"],
        create_time=messages.timestamp(endpoint["create_time"]),
    )


class EndpointService:
    # method → (the permission it needs, the request field naming the resource it is checked on); DeployModel and
    # Predict over REST too
    PERMISSIONS = {
        "ListEndpoints": ("aiplatform.endpoints.list", "parent"),
        "GetEndpoint": ("aiplatform.endpoints.get", "name"),
        "CreateEndpoint": ("aiplatform.endpoints.create", "parent"),
        "UpdateEndpoint": ("aiplatform.endpoints.update", "endpoint.name"),
        "DeployModel": ("aiplatform.endpoints.deploy", "endpoint"),
        "UndeployModel": ("aiplatform.endpoints.undeploy", "endpoint"),
        "DeleteEndpoint": ("aiplatform.endpoints.delete", "name"),
        "Predict": ("aiplatform.endpoints.predict", "endpoint"),
    }

    def __init__(self, context: Context, operations: Operations):
        self.context, self.registry, self.operations = context, context.registry, operations
        self.containers: dict[str, tuple] = {}  # deployed model id → (process, its predict route's URL)
        self.lock = threading.Lock()  # one start of a deployed model's container at a time

    def rpcs(self) -> dict:
        """The service's gRPC methods: name → (request class, response class, handler)."""
        return {
            "ListEndpoints": (
                endpoint_service_pb.ListEndpointsRequest,
                endpoint_service_pb.ListEndpointsResponse,
                self.list_endpoints,
            ),
            "GetEndpoint": (endpoint_service_pb.GetEndpointRequest, endpoint_pb.Endpoint, self.get_endpoint),
            "CreateEndpoint": (
                endpoint_service_pb.CreateEndpointRequest,
                operations_pb2.Operation,
                lambda request: self.create_endpoint(request.parent, request.endpoint, request.endpoint_id),
            ),
            "UpdateEndpoint": (endpoint_service_pb.UpdateEndpointRequest, endpoint_pb.Endpoint, self.update_endpoint),
            "UndeployModel": (
                endpoint_service_pb.UndeployModelRequest,
                operations_pb2.Operation,
                self.undeploy_model,
            ),
            "DeleteEndpoint": (
                endpoint_service_pb.DeleteEndpointRequest,
                operations_pb2.Operation,
                self.delete_endpoint,
            ),
        }

    def prediction_rpcs(self) -> dict:
        """The PredictionService's gRPC methods: name → (request class, response class, handler)."""
        return {
            "Predict": (prediction_service_pb.PredictRequest, prediction_service_pb.PredictResponse, self.grpc_predict)
        }

    def stop(self) -> None:
        """Stop every deployed model's container."""
        for process, _ in self.containers.values():
            jobs.stop_container(process)
        self.containers.clear()

    def _model_copy(self, endpoint_id: str, deployed_id: str) -> str:
        return self.context.model_copy(f"endpoints/{endpoint_id}/deployedModels/{deployed_id}")

    def list_endpoints(
        self, request: endpoint_service_pb.ListEndpointsRequest
    ) -> endpoint_service_pb.ListEndpointsResponse:
        found = self.registry.list_endpoints(request.parent, messages.display_name(request.filter), request.order_by)
        page, token = messages.page(found, request.page_size, request.page_token)
        return endpoint_service_pb.ListEndpointsResponse(endpoints=[_endpoint(e) for e in page], next_page_token=token)

    def get_endpoint(self, request: endpoint_service_pb.GetEndpointRequest) -> endpoint_pb.Endpoint:
        return _endpoint(self.registry.endpoint(request.name))

    def update_endpoint(self, request: endpoint_service_pb.UpdateEndpointRequest) -> endpoint_pb.Endpoint:
        if list(request.update_mask.paths) != ["traffic_split"]:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"update_mask {list(request.update_mask.paths)}: the rehearsal updates traffic_split only",
            )
        return _endpoint(self.registry.set_traffic(request.endpoint.name, dict(request.endpoint.traffic_split)))

    def create_endpoint(
        self, parent: str, request: endpoint_pb.Endpoint, endpoint_id: str = ""
    ) -> operations_pb2.Operation:
        """A new endpoint in `parent` (named `endpoint_id` when given), no model deployed; the operation is done at
        once."""
        self.context.check(messages.to_dict(request))
        created = self.registry.create_endpoint(parent, messages.to_dict(request), endpoint_id)
        return self.operations.done(_endpoint(created))

    def deploy_model(self, request: endpoint_service_pb.DeployModelRequest) -> operations_pb2.Operation:
        """The request is checked at once (model, traffic split); the container starts in the operation, which fails
        with the reason when it never becomes healthy, as Vertex's deploy operation does."""
        self.context.check(messages.to_dict(request))
        version, split = self.registry.plan_deploy(
            request.endpoint, messages.to_dict(request.deployed_model), dict(request.traffic_split)
        )
        deployed_id = self.registry.new_id()
        log = os.path.join(self.context.directory, "endpoints", f"{deployed_id}.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)

        endpoint_id = request.endpoint.rsplit("/", 1)[-1]

        def start():
            try:
                copy = gcs.copy_folder(version["artifact_uri"], self._model_copy(endpoint_id, deployed_id))
                self.containers[deployed_id] = jobs.start_container(copy, endpoint_id, deployed_id, log)
            except FileNotFoundError as e:
                raise ApiError("FAILED_PRECONDITION", f"deploying {version['name']}: {e}") from e
            except jobs.JobError as e:
                raise ApiError(
                    "FAILED_PRECONDITION", f"deploying {version['name']}@{version['version_id']} failed: {e}"
                ) from e
            deployed = {
                **messages.to_dict(request.deployed_model),
                "id": deployed_id,
                "model": version["name"],
                "model_version_id": version["version_id"],
                "create_time": time.time(),
            }
            try:
                self.registry.add_deployed(request.endpoint, deployed, split)
            except ApiError:
                jobs.stop_container(self.containers.pop(deployed_id)[0])
                raise
            return endpoint_service_pb.DeployModelResponse(
                deployed_model=endpoint_pb.DeployedModel(
                    id=deployed_id, model=version["name"], model_version_id=version["version_id"]
                )
            )

        return self.operations.long_running("EndpointService.DeployModel", start)

    def undeploy_model(self, request: endpoint_service_pb.UndeployModelRequest) -> operations_pb2.Operation:
        """Checked at once (a deployed model with traffic is refused); the container stops in the operation."""
        self.registry.remove_deployed(request.endpoint, request.deployed_model_id, dict(request.traffic_split))

        endpoint_id = request.endpoint.rsplit("/", 1)[-1]

        def stop():
            process_url = self.containers.pop(request.deployed_model_id, None)
            if process_url:
                jobs.stop_container(process_url[0])
            gcs.delete_folder(self._model_copy(endpoint_id, request.deployed_model_id))
            return endpoint_service_pb.UndeployModelResponse()

        return self.operations.long_running("EndpointService.UndeployModel", stop)

    def _serving(self, endpoint_name: str, deployed_id: str) -> str:
        """The predict URL of a deployed model's container. One an earlier rehearsal deployed (its state kept, its
        container gone with that process) is started again on its copy of the model: on Vertex a deployed model
        keeps serving between runs."""
        with self.lock:
            if deployed_id not in self.containers:
                endpoint_id = endpoint_name.rsplit("/", 1)[-1]
                log = os.path.join(self.context.directory, "endpoints", f"{deployed_id}.log")
                os.makedirs(os.path.dirname(log), exist_ok=True)
                try:
                    self.containers[deployed_id] = jobs.start_container(
                        self._model_copy(endpoint_id, deployed_id), endpoint_id, deployed_id, log
                    )
                except (FileNotFoundError, jobs.JobError) as e:
                    raise ApiError("INTERNAL", f"deployed model {deployed_id} does not serve: {e}") from e
            return self.containers[deployed_id][1]

    def delete_endpoint(self, request: endpoint_service_pb.DeleteEndpointRequest) -> operations_pb2.Operation:
        """Checked at once (an endpoint with deployed models is refused); done at once."""
        self.registry.delete_endpoint(request.name)
        return self.operations.done(empty_pb2.Empty())

    def predict(self, endpoint_name: str, body: dict) -> dict:
        """The answer of the deployed model the endpoint's traffic split picks to the request `body`, with the
        deployed model, model and version that answered (PredictResponse's fields, in REST's JSON names)."""
        endpoint = self.registry.endpoint(endpoint_name)
        split = endpoint["traffic_split"]
        if not split:
            raise ApiError("FAILED_PRECONDITION", f"{endpoint_name} has no deployed model serving traffic")
        chosen = random.choices(list(split), weights=list(split.values()))[0]
        request = urllib.request.Request(
            self._serving(endpoint_name, chosen), json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as e:
            status = "INVALID_ARGUMENT" if e.code < 500 else "INTERNAL"
            raise ApiError(status, f"the deployed model {chosen} answered {e.code}: {e.read()[:300]!r}") from None
        deployed = next(d for d in endpoint["deployed_models"] if d["id"] == chosen)
        return {
            **answer,
            "deployedModelId": chosen,
            "model": deployed["model"],
            "modelVersionId": deployed["model_version_id"],
            "modelDisplayName": deployed.get("display_name", ""),
        }

    def grpc_predict(self, request: prediction_service_pb.PredictRequest) -> prediction_service_pb.PredictResponse:
        """Predict over gRPC: the request's instances and parameters sent as REST's body."""
        fields = messages.to_dict(request)
        body = {k: fields[k] for k in ("instances", "parameters") if k in fields}
        answer = self.predict(request.endpoint, body)
        names = ("predictions", "deployedModelId", "model", "modelVersionId", "modelDisplayName")
        response = json_format.ParseDict(
            {k: answer[k] for k in names if k in answer}, prediction_service_pb.PredictResponse.pb()()
        )
        return prediction_service_pb.PredictResponse.wrap(response)
