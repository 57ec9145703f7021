"""TF Serving warmup records: `assets.extra/tf_serving_warmup_requests`, a TFRecord of PredictionLog protos that
TF Serving (and `python -m serving`) replays before a version takes traffic."""

from __future__ import annotations

import tensorflow as tf

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"


def write_warmup_requests(model_dir: str, requests: list, signature_name: str = "serving_default") -> str:
    """Write one predict request per entry of `requests`: {input name: batch} for `signature_name`, or
    (signature name, {input name: batch}); returns the file's path."""
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    path = f"{model_dir}/{WARMUP_FILE}"
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    with tf.io.TFRecordWriter(path) as writer:
        for entry in requests:
            signature, inputs = entry if isinstance(entry, tuple) else (signature_name, entry)
            request = predict_pb2.PredictRequest()
            request.model_spec.signature_name = signature
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path
