"""The Vertex AI GAPIC clients at their gRPC stubs: the clients run for real (request coercion, routing headers,
regional endpoint, pagination, long-running operations, retries); only the stub of one RPC is replaced, recording
every request and answering with real aiplatform_v1 messages, or failing as a gRPC call fails (`RpcFailure`)."""

import grpc
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, message


class RpcFailure(grpc.RpcError, grpc.Call):
    """A failed gRPC call as the channel raises it: a status code and its details, no trailing metadata. The GAPIC
    client turns it into google-api-core's exception for the code (RESOURCE_EXHAUSTED: ResourceExhausted, 429)."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details

    def initial_metadata(self):
        return ()

    def trailing_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False


QUOTA_DETAILS = (
    "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit 'Resource management (CRUD) "
    "requests per minute per region' of service 'aiplatform.googleapis.com'"
)


def quota() -> RpcFailure:
    """Vertex's answer to a project over its request quota (429)."""
    return RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, QUOTA_DETAILS)


def unavailable(details: str = "The service is currently unavailable.") -> RpcFailure:
    """Vertex's answer while it cannot serve (503); gRPC's for a reset connection too."""
    return RpcFailure(grpc.StatusCode.UNAVAILABLE, details)


def internal() -> RpcFailure:
    """Vertex's answer to a request it failed on (500): it may have been acted on."""
    return RpcFailure(grpc.StatusCode.INTERNAL, "Internal error encountered.")


class FakeStub:
    """A gRPC unary-unary stub: records every request (with the channel's host and routing header) and answers
    from `answer(request)`; the first calls fail with `failures` (RpcFailure), one each, in order."""

    def __init__(self, answer, failures=()):
        self.answer = answer
        self.failures = list(failures)
        self.calls = []

    def bind(self, transport_class, rpc, monkeypatch):
        stub = self

        def prop(transport):
            stub.host = transport._host
            return stub

        monkeypatch.setattr(transport_class, rpc, property(prop))
        return self

    def __call__(self, request, timeout=None, metadata=()):
        routing = dict(metadata).get("x-goog-request-params")
        self.calls.append((type(request).__name__, request, self.host, routing))
        if self.failures:
            raise self.failures.pop(0)
        return self.answer(request)


def done_operation(response, name: str = "operations/1") -> operations_pb2.Operation:
    """A finished long-running operation carrying `response` (a proto-plus or protobuf message)."""
    packed = any_pb2.Any()
    packed.Pack(response if isinstance(response, message.Message) else type(response).pb(response))
    return operations_pb2.Operation(name=name, done=True, response=packed)


PROJECT_NUMBER = "123456789012"


def numbered(resource_name: str) -> str:
    """A resource name as Vertex AI answers it: the project named by its number."""
    parts = resource_name.split("/")
    return "/".join([parts[0], PROJECT_NUMBER, *parts[2:]])


class RegistryDouble:
    """One Vertex AI endpoint and one registry model behind the EndpointService / ModelService stubs, in memory:
    deployed models (id, model version, deploy time), the traffic split and the version aliases. Every request is
    recorded, in order, in `calls` as (rpc, request); the state changes as Vertex's would (UpdateEndpoint replaces
    the split, UndeployModel sets the split it carries and refuses a model that still has traffic, DeleteEndpoint
    refuses an endpoint with deployed models, MergeVersionAliases moves an alias). Predict is answered by the
    deployed model the traffic split picks (`picks`: the ids it picks, in order; a pick must serve traffic) with
    `answers[id](instances, parameters)` as its predictions, and names it in `deployed_model_id`. Names are answered
    as Vertex answers them: with the project's number, and a DeployedModel's `model` without its version (that is in
    `model_version_id`). `failures` ({rpc: [RpcFailure]}): the first calls of an RPC fail with those, one each,
    recorded like the others and changing nothing."""

    def __init__(
        self,
        monkeypatch,
        endpoint_name: str,
        model_name: str,
        deployed: list,
        split: dict,
        aliases: dict,
        failures: dict | None = None,
    ):
        from google.cloud.aiplatform_v1.services.endpoint_service.transports.grpc import EndpointServiceGrpcTransport
        from google.cloud.aiplatform_v1.services.model_service.transports.grpc import ModelServiceGrpcTransport
        from google.cloud.aiplatform_v1.services.prediction_service.transports.grpc import (
            PredictionServiceGrpcTransport,
        )

        self.endpoint_name, self.model_name = numbered(endpoint_name), numbered(model_name)
        self.deployed = list(deployed)  # [(deployed model id, version id, create time seconds)]
        self.split = dict(split)
        self.aliases = dict(aliases)  # {alias: version id}
        self.calls = []
        self.failures = {rpc: list(errors) for rpc, errors in (failures or {}).items()}
        self.picks: list[str] = []
        self.answers: dict = {}  # {deployed model id: (instances, parameters) -> predictions}
        self.deleted = False
        for transport, rpcs in (
            (
                EndpointServiceGrpcTransport,
                ("get_endpoint", "update_endpoint", "undeploy_model", "list_endpoints", "delete_endpoint"),
            ),
            (ModelServiceGrpcTransport, ("merge_version_aliases", "get_model")),
            (PredictionServiceGrpcTransport, ("predict",)),
        ):
            for rpc in rpcs:
                FakeStub(self._recorded(rpc, getattr(self, f"_{rpc}"))).bind(transport, rpc, monkeypatch)

    def _recorded(self, rpc, answer):
        def call(request):
            self.calls.append((rpc, request))
            if self.failures.get(rpc):
                raise self.failures[rpc].pop(0)
            return answer(request)

        return call

    def _endpoint(self):
        from google.cloud.aiplatform_v1.types import endpoint as endpoint_pb
        from google.protobuf import timestamp_pb2

        return endpoint_pb.Endpoint(
            name=self.endpoint_name,
            traffic_split=self.split,
            deployed_models=[
                endpoint_pb.DeployedModel(
                    id=i, model=self.model_name, model_version_id=v, create_time=timestamp_pb2.Timestamp(seconds=t)
                )
                for i, v, t in self.deployed
            ],
        )

    def _get_endpoint(self, request):
        return self._endpoint()

    def _list_endpoints(self, request):
        from google.cloud.aiplatform_v1.types import endpoint_service

        return endpoint_service.ListEndpointsResponse(endpoints=[self._endpoint()])

    def _update_endpoint(self, request):
        assert list(request.update_mask.paths) == ["traffic_split"]
        self._check_split(dict(request.endpoint.traffic_split))
        self.split = dict(request.endpoint.traffic_split)
        return self._endpoint()

    def _delete_endpoint(self, request):
        from google.api_core.exceptions import FailedPrecondition
        from google.protobuf import empty_pb2

        if self.deployed:
            raise FailedPrecondition(f"endpoint {request.name} has deployed models")
        self.deleted = True
        return done_operation(empty_pb2.Empty())

    def _predict(self, request):
        from google.api_core.exceptions import FailedPrecondition
        from google.cloud.aiplatform_v1.types import prediction_service
        from google.protobuf import json_format

        if not self.split:
            raise FailedPrecondition(f"endpoint {request.endpoint} serves no traffic")
        picked = self.picks.pop(0)
        assert self.split.get(picked), f"the traffic split {self.split} cannot pick {picked}"
        version = next(v for i, v, _ in self.deployed if i == picked)
        fields = prediction_service.PredictRequest.to_dict(request)
        predictions = self.answers[picked](fields["instances"], fields.get("parameters"))
        answer = {"predictions": predictions, "deployedModelId": picked, "model": self.model_name}
        return prediction_service.PredictResponse.wrap(
            json_format.ParseDict({**answer, "modelVersionId": version}, prediction_service.PredictResponse.pb()())
        )

    def _check_split(self, split: dict) -> None:
        from google.api_core.exceptions import InvalidArgument

        unknown = set(split) - {d[0] for d in self.deployed}
        if unknown or (split and sum(split.values()) != 100):
            raise InvalidArgument(f"traffic_split {split}: unknown deployed models or not summing to 100")

    def _undeploy_model(self, request):
        from google.api_core.exceptions import FailedPrecondition, NotFound
        from google.cloud.aiplatform_v1.types import endpoint_service

        if request.deployed_model_id not in {d[0] for d in self.deployed}:
            raise NotFound(f"deployed model {request.deployed_model_id} not found")
        if request.traffic_split:
            self._check_split(dict(request.traffic_split))
            self.split = dict(request.traffic_split)
        if self.split.get(request.deployed_model_id, 0):
            raise FailedPrecondition(f"deployed model {request.deployed_model_id} still has traffic")
        self.deployed = [d for d in self.deployed if d[0] != request.deployed_model_id]
        self.split.pop(request.deployed_model_id, None)
        return done_operation(endpoint_service.UndeployModelResponse())

    def _version_aliases(self, version):
        return [a for a, v in self.aliases.items() if v == version]

    def _merge_version_aliases(self, request):
        from google.cloud.aiplatform_v1.types import model as model_pb

        name, _, version = request.name.partition("@")
        assert numbered(name) == self.model_name, request.name
        for alias in request.version_aliases:
            self.aliases[alias] = version
        return model_pb.Model(name=self.model_name, version_id=version, version_aliases=self._version_aliases(version))

    def _get_model(self, request):
        from google.api_core.exceptions import NotFound
        from google.cloud.aiplatform_v1.types import model as model_pb

        name, _, version = request.name.partition("@")
        assert numbered(name) == self.model_name, request.name
        if not version.isdigit() and version not in self.aliases:
            raise NotFound(f"model {request.name} not found: no version or alias {version!r}")
        version = self.aliases.get(version, version)
        return model_pb.Model(
            name=self.model_name,
            version_id=version,
            version_aliases=self._version_aliases(version),
        )
