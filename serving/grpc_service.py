"""TF Serving's gRPC API on the tensorflow-serving-api servicer classes: `PredictionService.Predict`,
`GetModelMetadata` and `ModelService.GetModelStatus`. A model name that is no model name (core.names) is
INVALID_ARGUMENT.

gRPC's thread-pool server, as TF Serving's (`--grpc_max_threads`): each call runs in a worker thread, the model call
inline there, rather than on the REST server's event loop (grpc.aio), where every call would cross from gRPC's poller
thread to the loop and back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from core.names import InvalidName
from serving import codec, tensors
from serving.models import DEFAULT_SIGNATURE, NotFound
from serving.ports import PortError
from serving.repository import ServedModels
from serving.tls import SslConfig, grpc_credentials

MAX_MESSAGE_BYTES = 2**31 - 1  # TF Serving accepts messages up to 2 GB


def _spec(model_spec) -> tuple[int | None, str | None]:
    choice = model_spec.WhichOneof("version_choice")
    if choice == "version":
        return model_spec.version.value, None
    if choice == "version_label":
        return None, model_spec.version_label
    return None, None


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, models: ServedModels):
        self.models = models

    def Predict(self, request, context):
        import tensorflow as tf

        version, label = _spec(request.model_spec)
        try:
            servable = self.models.resolve(request.model_spec.name, version, label)
            signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
            arrays = {k: tensors.to_array(v) for k, v in request.inputs.items()}
            outputs = servable.predict_future(arrays, signature).result()
            unknown = set(request.output_filter) - set(outputs)
            if unknown:
                raise codec.RequestError(f"output_filter names unknown outputs {sorted(unknown)}")
        except NotFound as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except (codec.RequestError, tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e).splitlines()[0])
        response = predict_pb2.PredictResponse()
        for name in request.output_filter or outputs:
            tensors.fill(response.outputs[name], outputs[name])
        response.model_spec.name = request.model_spec.name
        response.model_spec.version.value = servable.version
        response.model_spec.signature_name = signature
        return response

    def GetModelMetadata(self, request, context):
        if list(request.metadata_field) != ["signature_def"]:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "Metadata field signature_def is the only one supported; ask for it alone",
            )
        version, label = _spec(request.model_spec)
        try:
            servable = self.models.resolve(request.model_spec.name, version, label)
        except NotFound as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except InvalidName as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = request.model_spec.name
        response.model_spec.version.value = servable.version
        response.metadata["signature_def"].Pack(servable.signature_defs)
        return response


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, models: ServedModels):
        self.models = models

    def GetModelStatus(self, request, context):
        version, label = _spec(request.model_spec)
        try:
            statuses = self.models.status(request.model_spec.name, version, label)
        except NotFound as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except InvalidName as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        response = get_model_status_pb2.GetModelStatusResponse()
        for s in statuses:
            entry = response.model_version_status.add()
            entry.version = s.version
            entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(s.state)
            entry.status.error_code = _ERROR_CODES.get(s.error_code, 2)
            entry.status.error_message = s.error_message
        return response


_ERROR_CODES = {"OK": 0, "UNKNOWN": 2}


def create_server(
    models: ServedModels, host: str, port: int, threads: int, ssl: SslConfig | None = None
) -> tuple[grpc.Server, int]:
    """A server with both services on `threads` worker threads, bound to host:port (0: any free port), over TLS
    with `ssl`; returns it (not started) and the port."""
    server = grpc.server(
        ThreadPoolExecutor(threads, thread_name_prefix="grpc"),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),  # gRPC's default would share a port another server holds, answering for it
        ],
    )
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(models), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(models), server)
    try:
        address = f"{host}:{port}"
        bound = server.add_secure_port(address, grpc_credentials(ssl)) if ssl else server.add_insecure_port(address)
        return server, bound
    except RuntimeError as e:  # taken since ports.check_free looked
        raise PortError(f"cannot bind gRPC to {host}:{port} ({e}); choose another with --grpc-port PORT") from None
