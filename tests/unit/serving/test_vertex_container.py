"""The serving image's entry point (serving/vertex_container.py) under Vertex AI's custom-container
contract: started as the image starts it, with AIP_* variables and AIP_STORAGE_URI on the GCS emulator."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

from serving.vertex_container import ContainerError, Settings, place_model
from tests.helpers.processes import free_port
from tests.helpers.serving_container import upload, wait_healthy
from tests.helpers.serving_models import image_bytes_model, toy_model

ROOT = Path(__file__).resolve().parents[3]
ENTRYPOINT = [sys.executable, "-m", "serving.vertex_container"]
ROUTE = "/v1/endpoints/1234/deployedModels/5678"


def container_env(tmp_path: Path, **aip) -> dict:
    """The process environment: this machine's minus any AIP_* of its own, the emulator's address (set by the
    gcs_emulator fixture), temporary files under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIP_")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {**env, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path / "tmp"), "TF_CPP_MIN_LOG_LEVEL": "2", **aip}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """The toy SavedModel (k=3) with one warmup request in assets.extra/, as the trainer exports them."""
    return Path(
        toy_model(
            str(tmp_path_factory.mktemp("export") / "model"),
            k=3,
            warmup_inputs={"x": np.array([[1, 2, 3]], np.float32)},
        )
    )


def test_serves_vertex_predict_and_health_from_a_gcs_saved_model(saved_model, gcs_emulator, tmp_path):
    import tensorflow as tf

    uploaded = upload(gcs_emulator, saved_model, "aiplatform/model-99/artifacts")
    assert "aiplatform/model-99/artifacts/saved_model.pb" in uploaded
    assert "aiplatform/model-99/artifacts/assets.extra/tf_serving_warmup_requests" in uploaded
    gcs_emulator.blob("aiplatform/model-99/artifacts-old/saved_model.pb").upload_from_string(b"not this one")
    port = free_port()
    env = container_env(
        tmp_path,
        AIP_HTTP_PORT=str(port),
        AIP_HEALTH_ROUTE=ROUTE,
        AIP_PREDICT_ROUTE=f"{ROUTE}:predict",
        AIP_STORAGE_URI="gs://test-bucket/aiplatform/model-99/artifacts",
        AIP_ENDPOINT_ID="1234",
        AIP_DEPLOYED_MODEL_ID="5678",
    )
    log = tmp_path / "container.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(ENTRYPOINT, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        answers = wait_healthy(proc, url + ROUTE, log.read_text)
        assert set(answers) <= {503, 200}, answers  # the route exists from the start; 200 only once loaded

        instances = [[0.5, -1.25, 2.0], [3.0, 0.0, -0.75], [1e-3, 7.0, 1.0 / 3]]
        reference = tf.saved_model.load(str(saved_model)).signatures["serving_default"](
            x=tf.constant(instances, tf.float32)
        )
        answer = requests.post(f"{url}{ROUTE}:predict", json={"instances": instances, "parameters": {}}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        body = answer.json()
        assert list(body) == ["predictions", "deployedModelId"] and body["deployedModelId"] == "5678"
        assert body["predictions"][:2] == [
            {"y": [1.5, -3.75, 6.0], "version": 3},
            {"y": [9.0, 0.0, -2.25], "version": 3},
        ]
        # float32 outputs are written in float32's shortest form (0.003, not 0.003000000026077032): compare as float32
        y = np.array([p["y"] for p in body["predictions"]], np.float32)
        assert y.tobytes() == reference["y"].numpy().tobytes()
        assert [p["version"] for p in body["predictions"]] == reference["version"].numpy().tolist() == [3, 3, 3]
        assert [sorted(p) for p in body["predictions"]] == [["version", "y"]] * 3

        health = requests.get(url + ROUTE, timeout=10)
        assert (health.status_code, health.json()) == (200, {})
        bad = requests.post(f"{url}{ROUTE}:predict", json={"inputs": instances}, timeout=30)
        assert bad.status_code == 400 and "'instances'" in bad.json()["error"]
        assert requests.get(f"{url}/health", timeout=10).status_code == 404  # only the routes Vertex gave

        proc.send_signal(signal.SIGTERM)  # how Vertex stops a replica: graceful, exit 0, local copy removed
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert f"REST http://0.0.0.0:{port}, gRPC off" in text
    assert re.search(r"loaded model version 1 in [\d.]+s \(1 warmup requests\)", text), text
    copy = re.search(r"copied gs://test-bucket/aiplatform/model-99/artifacts to (\S+)", text).group(1)
    assert copy.startswith(str(tmp_path / "tmp")) and copy.endswith("/model/1")
    assert not Path(copy).parent.parent.exists()
    assert os.listdir(tmp_path / "tmp") == []


def test_takes_a_batch_services_request_of_64_base64_images(tmp_path):
    """Vertex's batch prediction sends `batch_size` (64) instances per request, straight to the container: 64 PNGs
    of about 30 KB, base64-encoded, are a 2.6 MB body, over the 1.5 MB that online endpoints accept."""
    import tensorflow as tf

    model = image_bytes_model(str(tmp_path / "images"))
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (64, 100, 100, 3), dtype=np.uint8)
    pngs = [tf.io.encode_png(p).numpy() for p in pixels]
    assert all(29_000 < len(png) < 31_000 for png in pngs)
    body = {"instances": [{"b64": base64.b64encode(png).decode()} for png in pngs]}
    assert len(json.dumps(body)) > 2.5e6
    port, log = free_port(), tmp_path / "container.log"
    env = container_env(tmp_path, AIP_HTTP_PORT=str(port), AIP_STORAGE_URI=model)
    with open(log, "wb") as out:
        proc = subprocess.Popen(ENTRYPOINT, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/health", log.read_text)
        answer = requests.post(f"http://127.0.0.1:{port}/predict", json=body, timeout=60)
    finally:
        proc.terminate()
        proc.wait(60)
    assert answer.status_code == 200, answer.text
    means = answer.json()["predictions"]  # one output: TF Serving's row format gives the values alone
    np.testing.assert_allclose(means, pixels.reshape(64, -1).mean(axis=1), rtol=1e-5)


def run_container(tmp_path, **aip) -> subprocess.CompletedProcess:
    return subprocess.run(
        ENTRYPOINT,
        cwd=tmp_path,
        env=container_env(tmp_path, AIP_HTTP_PORT=str(free_port()), **aip),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_missing_storage_uri_exits_non_zero(tmp_path):
    result = run_container(tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "error: AIP_STORAGE_URI is not set: it must name the SavedModel's directory "
        "(gs://BUCKET/PATH or a local path holding saved_model.pb)\n"
    )


@pytest.mark.parametrize(
    "objects, uri",
    [
        (["m/variables/variables.index"], "gs://test-bucket/m"),  # a model without its graph
        (["m/run/saved_model.pb"], "gs://test-bucket/m"),  # the SavedModel is deeper: not the artifact root
        (["m/saved_model.pb"], "gs://test-bucket/m/run"),  # nothing at all there
        ([], "gs://no-such-bucket/m"),
    ],
)
def test_gcs_uri_without_saved_model_pb_exits_non_zero(gcs_emulator, tmp_path, objects, uri):
    for name in objects:
        gcs_emulator.blob(name).upload_from_string(b"x")
    result = run_container(tmp_path, AIP_STORAGE_URI=uri)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: AIP_STORAGE_URI {uri} holds no saved_model.pb: it must be the SavedModel's "
        "directory (saved_model.pb, variables/, assets.extra/ directly under it)\n"
    )
    assert os.listdir(tmp_path / "tmp") == []  # it stopped before making its repository


def test_local_directory_without_saved_model_pb_exits_non_zero(saved_model, tmp_path):
    result = run_container(tmp_path, AIP_STORAGE_URI=str(saved_model / "variables"))
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: AIP_STORAGE_URI {saved_model / 'variables'} holds no saved_model.pb")


def test_a_saved_model_that_fails_to_load_stops_the_container(gcs_emulator, tmp_path):
    """saved_model.pb present but unreadable: the server must not sit unhealthy until Vertex's deadline."""
    gcs_emulator.blob("broken/saved_model.pb").upload_from_string(b"not a SavedModel")
    result = run_container(tmp_path, AIP_STORAGE_URI="gs://test-bucket/broken")
    assert result.returncode == 1, result.stderr
    assert re.search(r"^error: the SavedModel failed to load: \w+", result.stderr, re.M), result.stderr
    assert os.listdir(tmp_path / "tmp") == []


def test_place_model_links_a_local_directory_and_downloads_a_gcs_one(saved_model, gcs_emulator, tmp_path):
    local = tmp_path / "repo" / "model" / "1"
    local.parent.mkdir(parents=True)
    place_model(str(saved_model), str(local))
    assert local.is_symlink() and local.resolve() == saved_model.resolve()

    upload(gcs_emulator, saved_model, "exported")
    remote = tmp_path / "repo2" / "model" / "1"
    remote.parent.mkdir(parents=True)
    place_model("gs://test-bucket/exported/", str(remote))
    files = sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(saved_model)) for p in saved_model.rglob("*") if p.is_file())
    assert (remote / "saved_model.pb").read_bytes() == (saved_model / "saved_model.pb").read_bytes()
    assert os.listdir(remote.parent) == ["1"]  # the partial download was renamed into place


@pytest.mark.parametrize(
    "environ, expected",
    [
        (
            {
                "AIP_STORAGE_URI": "gs://b/m",
                "AIP_HTTP_PORT": "8081",
                "AIP_HEALTH_ROUTE": "/h",
                "AIP_PREDICT_ROUTE": "/p",
                "AIP_DEPLOYED_MODEL_ID": "42",
            },
            Settings("gs://b/m", 8081, "/h", "/p", "42"),
        ),
        # Vertex's defaults for routes left unset (the ids are always set there)
        (
            {"AIP_STORAGE_URI": "gs://b/m", "AIP_ENDPOINT_ID": "7", "AIP_DEPLOYED_MODEL_ID": "42"},
            Settings(
                "gs://b/m", 8080, "/v1/endpoints/7/deployedModels/42", "/v1/endpoints/7/deployedModels/42:predict", "42"
            ),
        ),
        # outside Vertex: the `serve` command's routes
        ({"AIP_STORAGE_URI": "file:///models/m"}, Settings("/models/m", 8080, "/health", "/predict", "")),
        (
            {"AIP_STORAGE_URI": "/m", "TFPIPE_MAX_REQUEST_BYTES": "1000"},
            Settings("/m", 8080, "/health", "/predict", "", 1000),
        ),
    ],
)
def test_settings_from_the_environment(environ, expected):
    assert Settings.from_environ(environ) == expected
    assert Settings.from_environ({"AIP_STORAGE_URI": "/m"}).max_request_bytes == 64 * 2**20


def test_a_request_limit_that_is_not_a_number_is_refused():
    with pytest.raises(ContainerError, match="TFPIPE_MAX_REQUEST_BYTES must be a positive number of bytes, got '2MB'"):
        Settings.from_environ({"AIP_STORAGE_URI": "/m", "TFPIPE_MAX_REQUEST_BYTES": "2MB"})
