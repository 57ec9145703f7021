"""The serving image as Vertex AI runs it behind an endpoint: Vertex's AIP_* environment, the model's artifacts on
Cloud Storage (the GCS emulator; the container reads gs:// with google-cloud-storage), the image's own user; the
seed clients' requests, a batch service's request, and the stop. (As KServe's custom predictor:
test_kubeflow_engines.)"""

from __future__ import annotations

import base64
import os

import numpy as np
import requests

from tests.helpers.model_answers import model_outputs, split_examples
from tests.helpers.podman import Container, image, podman
from tests.helpers.processes import free_port
from tests.helpers.serving_container import upload, wait_healthy

ROUTE = "/v1/endpoints/1234/deployedModels/5678"


def as_float32(predictions: list, field: str) -> np.ndarray:
    return np.array([p[field] for p in predictions], np.float32)


def test_the_endpoints_container_serves_the_trained_model_from_cloud_storage(
    gcs_emulator, trained_model_uri, prepared, storage
):
    model = storage.host(trained_model_uri)
    upload(gcs_emulator, model, "aiplatform/model-7/artifacts")
    port = free_port()
    container = Container(
        image("serving"),
        env={
            "AIP_STORAGE_URI": "gs://test-bucket/aiplatform/model-7/artifacts",
            "AIP_HTTP_PORT": str(port),
            "AIP_HEALTH_ROUTE": ROUTE,
            "AIP_PREDICT_ROUTE": f"{ROUTE}:predict",
            "AIP_ENDPOINT_ID": "1234",
            "AIP_DEPLOYED_MODEL_ID": "5678",
            "AIP_MODE": "PREDICTION",
            "STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"],  # set by gcs_emulator
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert set(wait_healthy(container.process, url + ROUTE, container.log)) <= {200, 503}
        assert podman("exec", container.name, "id", "-u").stdout.strip() == "1000"

        examples = split_examples(str(storage.host(prepared[1])), 64)
        expected = model_outputs(str(model), examples)
        # the seed clients: aiplatform's Endpoint.predict(instances=X.tolist()) and TF Serving's REST request
        vertex = requests.post(f"{url}{ROUTE}:predict", json={"instances": examples[:3].tolist()}, timeout=60)
        assert vertex.status_code == 200, vertex.text
        assert vertex.json()["deployedModelId"] == "5678"
        tf_serving = requests.post(
            f"{url}/v1/models/model:predict",
            json={"signature_name": "serving_default", "instances": examples[:3].tolist()},
            timeout=60,
        )
        assert tf_serving.status_code == 200, tf_serving.text
        for answer in (vertex.json(), tf_serving.json()):
            assert [p["class_id"] for p in answer["predictions"]] == expected["class_id"][:3].tolist()
            np.testing.assert_allclose(
                as_float32(answer["predictions"], "probabilities"), expected["probabilities"][:3], atol=1e-6
            )

        # a batch prediction job's request: batch_size (64) instances at once, pixels and PNG bytes
        batch = requests.post(f"{url}{ROUTE}:predict", json={"instances": examples.tolist()}, timeout=60)
        assert batch.status_code == 200, batch.text
        assert [p["class_id"] for p in batch.json()["predictions"]] == expected["class_id"].tolist()
        import tensorflow as tf

        pngs = [base64.b64encode(tf.io.encode_png(np.uint8(e)).numpy()).decode() for e in examples]
        images = requests.post(
            f"{url}{ROUTE}:predict",
            json={"instances": [{"b64": p} for p in pngs], "parameters": {"signature_name": "serving_image_bytes"}},
            timeout=60,
        )
        assert images.status_code == 200, images.text
        assert [p["class_id"] for p in images.json()["predictions"]] == expected["class_id"].tolist()
    finally:
        container.stop()
    assert container.process.returncode == 0, container.log()  # Vertex's SIGTERM: a graceful stop
    assert "copied gs://test-bucket/aiplatform/model-7/artifacts" in container.log()
