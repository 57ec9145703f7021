"""The Operations service: the long-running operations the other services answer, named
`PARENT/operations/ID`, kept for GetOperation (gRPC and REST)."""

from __future__ import annotations

import threading

import grpc
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, message
from google.rpc import status_pb2

from pipelines.rehearsal.api.context import Context
from pipelines.rehearsal.registry import ApiError


class Operations:
    def __init__(self, context: Context):
        self.context = context
        self.operations: dict[str, operations_pb2.Operation] = {}

    def rpcs(self) -> dict:
        """The service's gRPC methods: name → (request class, response class, handler)."""
        return {
            "GetOperation": (operations_pb2.GetOperationRequest, operations_pb2.Operation, self.get_operation),
        }

    def _new(self, **fields) -> operations_pb2.Operation:
        name = f"{self.context.registry.parent}/operations/{self.context.registry.new_id()}"
        operation = self.operations[name] = operations_pb2.Operation(name=name, **fields)
        return operation

    def done(self, response) -> operations_pb2.Operation:
        """An operation done already, with `response` (a proto-plus or protobuf message)."""
        packed = any_pb2.Any()
        packed.Pack(response if isinstance(response, message.Message) else type(response).pb(response))
        return self._new(done=True, response=packed)

    def long_running(self, method: str, work) -> operations_pb2.Operation:
        """An operation answered at once, not done; `work()` runs in a thread and the operation ends with its
        response, or with its error (an ApiError's status and message), as Vertex's deploy and undeploy do."""
        operation = self._new(done=False)

        def run():
            try:
                response = work()
                operation.response.Pack(type(response).pb(response))
            except ApiError as e:
                self.context.error(method, e.message)
                operation.error.CopyFrom(
                    status_pb2.Status(code=getattr(grpc.StatusCode, e.status).value[0], message=e.message)
                )
            operation.done = True

        threading.Thread(target=run, daemon=True, name=f"operation-{operation.name}").start()
        return operation

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        name = self.context.registry.canonical(request.name)
        if name not in self.operations:
            raise ApiError("NOT_FOUND", f"operation {request.name} not found")
        return self.operations[name]
