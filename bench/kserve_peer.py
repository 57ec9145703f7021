"""KServe peer for `bench.serving`: a `kserve.Model` hosting a SavedModel's `serving_default` (v1 protocol).

    python -m bench.kserve_peer MODEL_DIR NAME HTTP_PORT GRPC_PORT [--request-logs]

Serves `POST /v1/models/NAME:predict` with `{"instances": [...]}` → `{"predictions": [{"probabilities": [...],
"class_id": ...}, ...]}` (row format, as TF Serving answers) with `kserve.ModelServer(workers=1)`. KServe logs every
request by default (uvicorn access log, kserve.trace timing and latency lines); without `--request-logs` those
loggers are set to WARNING, as our server logs no requests.
"""

import os
import sys
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    model_dir, name, http_port, grpc_port = sys.argv[1:5]
    request_logs = "--request-logs" in sys.argv[5:]
    sys.argv = sys.argv[:1]  # kserve.model_server parses sys.argv (parse_known_args) when imported

    import logging

    import kserve
    import numpy as np
    import tensorflow as tf

    class SavedModelPredictor(kserve.Model):
        def __init__(self, name: str, path: str):
            super().__init__(name)
            self.path = path
            self.signature: Any = None
            self.input_name = ""

        def load(self) -> bool:
            self.signature = tf.saved_model.load(self.path).signatures["serving_default"]
            self.input_name = next(iter(self.signature.structured_input_signature[1]))
            self.ready = True
            return self.ready

        def predict(self, payload: dict, headers: dict | None = None) -> dict:
            images = np.asarray(payload["instances"], dtype=np.float32)
            outputs = {k: v.numpy() for k, v in self.signature(**{self.input_name: tf.constant(images)}).items()}
            probabilities, class_ids = outputs["probabilities"].tolist(), outputs["class_id"].tolist()
            return {"predictions": [{"probabilities": p, "class_id": c} for p, c in zip(probabilities, class_ids)]}

    model = SavedModelPredictor(name, model_dir)
    model.load()
    server = kserve.ModelServer(
        http_port=int(http_port), grpc_port=int(grpc_port), workers=1, enable_latency_logging=request_logs
    )
    if not request_logs:  # the access log and kserve.trace (TimingMiddleware, latency lines) log every request
        for logger in ("uvicorn.access", "kserve.trace"):
            logging.getLogger(logger).setLevel(logging.WARNING)
    server.start([model])


if __name__ == "__main__":
    main()
