"""A server with our server's two protocol stacks and no model, for `bench.serving`: what a request costs the
transport alone.

    python -m bench.floor_peer NAME HTTP_PORT GRPC_PORT GRPC_THREADS

REST: Starlette on uvicorn on uvloop (serving.server.run), `POST /v1/models/NAME:predict` parses the JSON body with
orjson and answers a fixed body of one prediction; `GET /v1/models/NAME` answers an AVAILABLE version (the benchmark's
readiness check). gRPC: grpcio's thread-pool server with GRPC_THREADS workers and our server's options, its `Predict`
parses the `PredictRequest` and answers a fixed serialized `PredictResponse`. Both answers carry a `class_id`, as the
load generator checks.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tensorflow_serving.apis import predict_pb2

from serving import grpc_service, server, tensors


def main() -> None:
    name, http_port, grpc_port, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rest_answer = orjson.dumps({"predictions": [{"probabilities": [0.1] * 10, "class_id": 0}]})
    status = orjson.dumps({"model_version_status": [{"version": "1", "state": "AVAILABLE"}]})
    answer = predict_pb2.PredictResponse()
    tensors.fill(answer.outputs["probabilities"], np.full((1, 10), 0.1, np.float32))
    tensors.fill(answer.outputs["class_id"], np.zeros(1, np.int64))
    grpc_answer = answer.SerializeToString()

    async def predict(request: Request) -> Response:
        orjson.loads(await request.body())
        return Response(rest_answer, media_type="application/json")

    async def model_status(_request: Request) -> Response:
        return Response(status, media_type="application/json")

    def grpc_predict(request: bytes, _context) -> bytes:
        predict_pb2.PredictRequest.FromString(request)
        return grpc_answer

    app = Starlette(
        routes=[
            Route(f"/v1/models/{name}:predict", predict, methods=["POST"]),
            Route(f"/v1/models/{name}", model_status),
        ]
    )
    grpc_server = grpc.server(
        ThreadPoolExecutor(threads),
        options=[
            ("grpc.max_receive_message_length", grpc_service.MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", grpc_service.MAX_MESSAGE_BYTES),
        ],
    )
    handler = grpc.unary_unary_rpc_method_handler(grpc_predict)
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", {"Predict": handler}),)
    )
    grpc_server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    grpc_server.start()
    config = uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level="warning", access_log=False)
    server.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
