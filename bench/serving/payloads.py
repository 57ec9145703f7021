"""The requests: the model's name and the gRPC method the clients call, a REST body and a gRPC `PredictRequest` for
a batch of images, and the bytes of one request in each protocol."""

import json

import numpy as np

MODEL_NAME = "digits"
PREDICT_METHOD = "/tensorflow.serving.PredictionService/Predict"


def rest_body(instances: np.ndarray) -> bytes:
    return json.dumps({"instances": instances.tolist()}).encode()


def grpc_request(images: np.ndarray, signature: str = "serving_default"):
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL_NAME, signature
    request.inputs["image"].CopyFrom(tf.make_tensor_proto(images))
    return request


def request_bytes(batch: int, size: int, seed: int = 0) -> dict:
    """REST JSON (as the seed client writes it) vs serialized gRPC PredictRequest, for random float32 images."""
    x = np.random.default_rng(seed).random((batch, size, size, 1), dtype=np.float32)
    rest = len(json.dumps({"signature_name": "serving_default", "instances": x.tolist()}))
    grpc_ = len(grpc_request(x).SerializeToString())
    return {
        "images": batch,
        "shape": list(x.shape),
        "dtype": "float32",
        "rest_json_bytes": rest,
        "grpc_bytes": grpc_,
        "raw_tensor_bytes": x.nbytes,
        "grpc_to_rest": round(grpc_ / rest, 4),
    }
