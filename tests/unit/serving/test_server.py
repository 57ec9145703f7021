"""The TF-Serving-compatible server: REST and gRPC contract, errors, versions, labels, warmup, hot swap."""

from __future__ import annotations

import json
import re
import threading
import time

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving import ports
from serving.batching import BatchingOptions
from serving.client import PredictionError, ServingClient
from serving.models import Policy
from serving.repository import Repository, ServedModels
from serving.server import ModelServer, ServerOptions
from tests.helpers.model_answers import prepared_class_ids
from tests.helpers.serving_models import publish, remove, toy_model


@pytest.fixture
def repo(tmp_path):
    base = tmp_path / "models"
    toy_model(str(base / "toy" / "1"), k=1)
    return base


def start(base, policy=None, labels=None, batching=None, names=("toy",), **options) -> ModelServer:
    """A server on free ports for `names` in the repository `base` (none: every model folder)."""
    models = ServedModels(Repository(str(base), names, policy or Policy(), labels or {}), 0.1, batching)
    return ModelServer(models, ServerOptions(rest_port=0, grpc_port=0, **options)).start()


@pytest.fixture
def server(repo):
    s = start(repo, labels={"stable": 1, "canary": 9}, max_request_bytes=4096)
    yield s
    s.stop()


def post(server, path, body=None, data=None):
    return requests.post(f"{server.rest_url}/v1/models/{path}", json=body, data=data, timeout=10)


def test_rest_row_and_columnar(server):
    row = post(server, "toy:predict", {"instances": [[1, 2, 3], [4, 5, 6]]})
    assert row.status_code == 200
    assert row.json() == {"predictions": [{"y": [1.0, 2.0, 3.0], "version": 1}, {"y": [4.0, 5.0, 6.0], "version": 1}]}
    named = post(
        server, "toy/versions/1:predict", {"instances": [{"x": [1, 2, 3]}], "signature_name": "serving_default"}
    )
    assert named.json() == {"predictions": [{"y": [1.0, 2.0, 3.0], "version": 1}]}
    columnar = post(server, "toy/labels/stable:predict", {"inputs": {"x": [[1, 1, 1], [2, 2, 2]]}})
    assert columnar.json() == {"outputs": {"y": [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], "version": [1, 1]}}
    bare = post(server, "toy:predict", {"inputs": [[0, 0, 1]]})
    assert bare.json() == {"outputs": {"y": [[0.0, 0.0, 1.0]], "version": [1]}}


def test_single_output_is_returned_without_its_name(tmp_path):
    toy_model(str(tmp_path / "toy" / "3"), k=2, single_output=True)
    s = start(tmp_path)
    try:
        assert post(s, "toy:predict", {"instances": [[1, 2, 3]]}).json() == {"predictions": [[2.0, 4.0, 6.0]]}
        assert post(s, "toy:predict", {"inputs": [[1, 2, 3]]}).json() == {"outputs": [[2.0, 4.0, 6.0]]}
    finally:
        s.stop()


@pytest.mark.parametrize(
    "path,kwargs,status,message",
    [
        ("toy:predict", {"data": "{not json"}, 400, "JSON Parse error"),
        ("toy:predict", {"body": {"instances": [[1, 2, 3]], "inputs": [[1, 2, 3]]}}, 400, "either 'instances'"),
        ("toy:predict", {"body": {"examples": []}}, 400, "missing 'instances' or 'inputs'"),
        ("toy:predict", {"body": {"instances": [[1, 2]]}}, 400, "input 'x' expects shape [3] per instance, got [2]"),
        ("toy:predict", {"body": {"instances": [[1, 2, 3], [1, 2]]}}, 400, "input 'x'"),
        ("toy:predict", {"body": {"inputs": [["a", "b", "c"]]}}, 400, "cannot convert to float32"),
        ("toy:predict", {"body": {"instances": [[1, 2, 3]], "signature_name": "nope"}}, 404, '"nope" not found'),
        ("other:predict", {"body": {"instances": [[1, 2, 3]]}}, 404, "Servable not found for request: Latest(other)"),
        ("toy/versions/7:predict", {"body": {"instances": [[1, 2, 3]]}}, 404, "Specific(toy, 7)"),
        ("toy/versions/x:predict", {"body": {"instances": [[1, 2, 3]]}}, 400, "Failed to convert version"),
        ("toy/labels/nope:predict", {"body": {"instances": [[1, 2, 3]]}}, 404, "Unrecognized servable version label"),
        ("toy/labels/canary:predict", {"body": {"instances": [[1, 2, 3]]}}, 404, "points at version 9"),
        ("toy:predict", {"data": json.dumps({"instances": [[1.5, 2, 3]] * 400})}, 413, "exceeds the 4096-byte limit"),
    ],
)
def test_rest_errors(server, path, kwargs, status, message):
    response = post(server, path, kwargs.get("body"), kwargs.get("data"))
    assert response.status_code == status
    assert message in response.json()["error"]


def test_rest_status_and_metadata(server):
    expected = {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    for path in ("toy", "toy/versions/1", "toy/labels/stable"):
        assert requests.get(f"{server.rest_url}/v1/models/{path}").json() == expected
    assert requests.get(f"{server.rest_url}/v1/models/toy/versions/5").status_code == 404
    meta = requests.get(f"{server.rest_url}/v1/models/toy/metadata").json()
    assert meta["model_spec"] == {"name": "toy", "signature_name": "", "version": "1"}
    signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert signature["inputs"]["x"]["tensor_shape"]["dim"][1]["size"] == "3"
    assert sorted(signature["outputs"]) == ["version", "y"]
    assert signature["method_name"] == "tensorflow/serving/predict"


def test_vertex_routes(tmp_path):
    s = start(tmp_path / "empty")
    try:
        assert requests.get(f"{s.rest_url}/health").status_code == 503
        toy_model(str(tmp_path / "empty" / "toy" / "1"), k=3)
        deadline = time.time() + 30
        while requests.get(f"{s.rest_url}/health").status_code != 200:
            assert time.time() < deadline, "the version never loaded"
            time.sleep(0.1)
        body = requests.post(f"{s.rest_url}/predict", json={"instances": [[1, 0, 0]], "parameters": {}}).json()
        assert body == {"predictions": [{"y": [3.0, 0.0, 0.0], "version": 3}], "deployedModelId": ""}
    finally:
        s.stop()


def grpc_request(model="toy", version=None, label=None, x=((1.0, 2.0, 3.0),)):
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model, "serving_default"
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.asarray(x, dtype=np.float32)))
    return request


def test_grpc_predict_status_metadata(server):
    channel = grpc.insecure_channel(server.grpc_target)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    response = stub.Predict(grpc_request(label="stable"), 10)
    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["y"]), [[1.0, 2.0, 3.0]])
    assert (response.model_spec.name, response.model_spec.version.value) == ("toy", 1)
    filtered = grpc_request()
    filtered.output_filter.append("version")
    assert list(stub.Predict(filtered, 10).outputs) == ["version"]

    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "toy"
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_request, 10)
    (entry,) = status.model_version_status
    assert (entry.version, entry.state, entry.status.error_code) == (
        1,
        get_model_status_pb2.ModelVersionStatus.AVAILABLE,
        0,
    )

    meta_request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    meta_request.model_spec.name = "toy"
    meta = stub.GetModelMetadata(meta_request, 10)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    meta.metadata["signature_def"].Unpack(signatures)
    assert list(signatures.signature_def["serving_default"].inputs) == ["x"]

    for request, code, message in [
        (grpc_request(version=4), grpc.StatusCode.NOT_FOUND, "Specific(toy, 4)"),
        (grpc_request(model="nope"), grpc.StatusCode.NOT_FOUND, "Latest(nope)"),
        (grpc_request(x=((1.0, 2.0),)), grpc.StatusCode.INVALID_ARGUMENT, "expects shape [None, 3], got [1, 2]"),
    ]:
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(request, 10)
        assert error.value.code() == code and message in error.value.details()
    double = grpc_request()
    double.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((1, 3))))
    with pytest.raises(grpc.RpcError, match="expects float32 but float64 is provided"):
        stub.Predict(double, 10)


def test_client_rest_and_grpc(server):
    client = ServingClient(server.rest_url, server.grpc_target, "toy")
    for protocol in ("rest", "grpc"):
        out = client.predict(np.array([[1, 2, 3]], np.float32), protocol=protocol)
        np.testing.assert_array_equal(out["y"], [[1.0, 2.0, 3.0]])
        np.testing.assert_array_equal(out["version"], [1])
        with pytest.raises(PredictionError, match="Specific\\(toy, 8\\)"):
            client.predict(np.ones((1, 3), np.float32), version=8, protocol=protocol)
    assert client.status()[0]["state"] == "AVAILABLE"
    client.close()


def test_seed_rest_and_grpc_clients_work_unchanged(tmp_path):
    """The book chapter's client code, verbatim apart from the ports, against a model like the book's."""
    import os

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tf_keras

    model = tf_keras.Sequential(
        [
            tf_keras.layers.Flatten(input_shape=[28, 28], dtype=tf.uint8),
            tf_keras.layers.Rescaling(scale=1 / 255),
            tf_keras.layers.Dense(100, activation="relu"),
            tf_keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model_name = "my_mnist_model"
    model.save(str(tmp_path / model_name / "0001"), save_format="tf")
    X_new = np.random.default_rng(0).integers(0, 255, (3, 28, 28), dtype=np.uint8)
    expected = model.predict(X_new, verbose=0)
    s = start(tmp_path, names=(model_name,))
    try:
        request_json = json.dumps({"signature_name": "serving_default", "instances": X_new.tolist()})
        server_url = f"{s.rest_url}/v1/models/my_mnist_model:predict"
        response = requests.post(server_url, data=request_json)
        response.raise_for_status()  # raise an exception in case of error
        response = response.json()
        y_proba = np.array(response["predictions"])
        np.testing.assert_allclose(y_proba, expected, atol=1e-6)

        from tensorflow_serving.apis.predict_pb2 import PredictRequest

        request = PredictRequest()
        request.model_spec.name = model_name
        request.model_spec.signature_name = "serving_default"
        input_name = model.input_names[0]  # == "flatten_input"
        request.inputs[input_name].CopyFrom(tf.make_tensor_proto(X_new))
        channel = grpc.insecure_channel(s.grpc_target)
        predict_service = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = predict_service.Predict(request, timeout=10.0)
        output_name = model.output_names[0]  # == "dense_1"
        outputs_proto = response.outputs[output_name]
        y_proba = tf.make_ndarray(outputs_proto)
        np.testing.assert_allclose(y_proba, expected, atol=1e-6)
        assert response.model_spec.version.value == 1
    finally:
        s.stop()


def test_two_models_from_one_process_at_their_routes_and_by_grpc_name(repo):
    toy_model(str(repo / "quad" / "1"), k=4)
    s = start(repo, names=())
    try:
        for name, k in (("toy", 1), ("quad", 4)):
            row = post(s, f"{name}/versions/1:predict", {"instances": [[1, 2, 3]]}).json()
            assert row == {"predictions": [{"y": [k * 1.0, k * 2.0, k * 3.0], "version": k}]}
            status = requests.get(f"{s.rest_url}/v1/models/{name}").json()["model_version_status"]
            assert [(e["version"], e["state"]) for e in status] == [("1", "AVAILABLE")]
            meta = requests.get(f"{s.rest_url}/v1/models/{name}/metadata").json()
            assert meta["model_spec"] == {"name": name, "signature_name": "", "version": "1"}
            response = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(s.grpc_target)).Predict(
                grpc_request(model=name), 10
            )
            assert (response.model_spec.name, response.model_spec.version.value) == (name, 1)
            np.testing.assert_array_equal(tf.make_ndarray(response.outputs["version"]), [k])
        assert requests.get(f"{s.rest_url}/v1/models/nope").json() == {
            "error": "Could not find any versions of model nope"
        }
        vertex = requests.post(f"{s.rest_url}/predict", json={"instances": [[1, 2, 3]]})
        assert (
            vertex.status_code == 404
            and "this server serves quad, toy: use /v1/models/NAME:predict" in vertex.json()["error"]
        )
    finally:
        s.stop()


def test_each_model_has_its_policy_and_labels_from_a_model_config_file(tmp_path):
    """TF Serving's --model_config_file: per-model base_path, version policy and labels; edited while serving, the
    server follows it (a model left out is unloaded)."""
    from serving.repository import ModelConfigFile

    for v in (1, 2, 3):
        toy_model(str(tmp_path / "a" / str(v)), k=v)
        toy_model(str(tmp_path / "b" / str(v)), k=10 * v)
    a = f'config {{ name: "a" base_path: "{tmp_path / "a"}" model_platform: "tensorflow" model_version_policy {{ all {{}} }} }}'
    b = (
        f'config {{ name: "b" base_path: "{tmp_path / "b"}" '
        "model_version_policy { specific { versions: 1 versions: 2 } } version_labels { key: 'stable' value: 1 } }"
    )
    config = tmp_path / "models.config"
    config.write_text(f"model_config_list {{ {a} {b} }}")
    server = ModelServer(ServedModels(ModelConfigFile(str(config)), 0.1), ServerOptions(rest_port=0, grpc_port=0))
    server.start()

    def available(name):
        answer = requests.get(f"{server.rest_url}/v1/models/{name}")
        if answer.status_code != 200:
            return []
        return sorted(int(e["version"]) for e in answer.json()["model_version_status"] if e["state"] == "AVAILABLE")

    try:
        assert (available("a"), available("b")) == ([1, 2, 3], [1, 2])
        assert (
            post(server, "b/labels/stable:predict", {"instances": [[1, 1, 1]]}).json()["predictions"][0]["version"]
            == 10
        )
        config.write_text(f"model_config_list {{ {a} }}")
        wait_for(lambda: available("b") == [])
        assert available("a") == [1, 2, 3]
    finally:
        server.stop()


def test_a_port_in_use_is_one_line_naming_it_its_holder_and_the_option(tmp_path):
    """From `python -m serving` (before TensorFlow loads) and from an in-process server's gRPC port."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "serving",
                "--model-base-path",
                str(tmp_path),
                "--rest-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert not re.findall(r"\| +tensorflow$", done.stderr, re.M)  # -X importtime's lines
        assert done.stderr.splitlines()[-1] == (
            f"Error: port {port} (REST, 127.0.0.1) is in use by {ports.holder(port)}; "
            "choose another with --rest-port PORT, or --rest-port 0 for any free port"
        )
        assert ports.holder(port).startswith(f"pid {os.getpid()} (")
        with pytest.raises(
            RuntimeError, match=f"port {port} \\(gRPC, 127.0.0.1\\) is in use by pid {os.getpid()} .*--grpc-port 0"
        ):
            ModelServer(ServedModels(Repository(str(tmp_path))), ServerOptions(rest_port=0, grpc_port=port)).start()


def test_the_command_refuses_model_options_beside_a_model_config_file(tmp_path):
    import subprocess
    import sys

    def serve(*args):
        return subprocess.run([sys.executable, "-m", "serving", *args], capture_output=True, text=True, timeout=120)

    both = serve("--model-config-file", "m.config", "--model-base-path", "r", "--model-name", "a", "--latest", "2")
    assert both.returncode == 1 and both.stderr == (
        "Error: --model-config-file gives each model's base_path, version policy and labels: leave out "
        "--model-base-path, --model-name, --latest\n"
    )
    assert serve().stderr == "Error: give the repository to serve (--model-base-path) or a --model-config-file\n"
    (tmp_path / "bad.config").write_text("model_config_list { config { name: 'a' } }")
    bad = serve("--model-config-file", str(tmp_path / "bad.config"))
    assert bad.returncode == 1 and bad.stderr.splitlines()[-1] == (
        f"Error: --model-config-file {tmp_path / 'bad.config'}: model 'a': every config needs a name of its own and "
        "a base_path"
    )


def load_clients(server, stop, n=16):
    """`n` threads posting until `stop` is set; returns (versions seen in order per thread, failures)."""
    seen, failures = [[] for _ in range(n)], []

    def client(i):
        session = requests.Session()
        while not stop.is_set():
            try:
                r = session.post(
                    f"{server.rest_url}/v1/models/toy:predict", json={"instances": [[1, 1, 1]]}, timeout=30
                )
                if r.status_code != 200:
                    failures.append(r.text)
                else:
                    seen[i].append(r.json()["predictions"][0]["version"])
            except requests.RequestException as e:
                failures.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return seen, failures, threads


def wait_for(condition, timeout=60):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_hot_swap_and_rollback_under_load(repo, tmp_path):
    """A second model published beside the first, then a new version of the first and its rollback, all while 16
    clients call the first: not one request fails."""
    s = start(repo, names=())  # every model folder of the repository
    stop = threading.Event()
    seen, failures, threads = load_clients(s, stop)
    try:
        wait_for(lambda: all(len(v) >= 3 for v in seen))
        marks = [len(v) for v in seen]
        publish(toy_model(str(tmp_path / "staging-other"), k=7), str(repo), "other", "1")
        wait_for(lambda: requests.get(f"{s.rest_url}/v1/models/other").status_code == 200)
        assert post(s, "other:predict", {"instances": [[1, 1, 1]]}).json()["predictions"][0]["version"] == 7
        wait_for(lambda: all(len(v) > m + 2 for v, m in zip(seen, marks)))  # the first kept answering meanwhile
        publish(toy_model(str(tmp_path / "staging2"), k=2), str(repo), "toy", "2")
        wait_for(lambda: all(v and v[-1] == 2 for v in seen))
        statuses = {
            e["version"]: e["state"] for e in requests.get(f"{s.rest_url}/v1/models/toy").json()["model_version_status"]
        }
        assert statuses == {"2": "AVAILABLE", "1": "END"}
        marks = [len(v) for v in seen]
        remove(str(repo / "toy" / "2"))  # roll back: the previous version takes over again
        wait_for(lambda: all(len(v) > m + 2 and v[-1] == 1 for v, m in zip(seen, marks)))
    finally:
        stop.set()
        for t in threads:
            t.join()
        s.stop()
    assert failures == []
    for versions in seen:  # each client saw 1, then 2, then 1 again: no flapping
        changes = [v for i, v in enumerate(versions) if i == 0 or versions[i - 1] != v]
        assert changes == [1, 2, 1]


def test_version_policies_and_labels(tmp_path):
    for v in (1, 2, 3):
        toy_model(str(tmp_path / "toy" / str(v)), k=v)

    def versions_served(server):
        return sorted(
            int(e["version"])
            for e in requests.get(f"{server.rest_url}/v1/models/toy").json()["model_version_status"]
            if e["state"] == "AVAILABLE"
        )

    for policy, expected in [
        (Policy("latest", 2), [2, 3]),
        (Policy("all"), [1, 2, 3]),
        (Policy("specific", versions=(1, 3)), [1, 3]),
    ]:
        s = start(tmp_path, policy, labels={"stable": 1})
        try:
            assert versions_served(s) == expected
            assert post(s, "toy:predict", {"instances": [[1, 1, 1]]}).json()["predictions"][0]["version"] == 3
            stable = post(s, "toy/labels/stable:predict", {"instances": [[1, 1, 1]]})
            assert stable.status_code == (200 if 1 in expected else 404)
        finally:
            s.stop()


def test_warmup_requests_run_before_a_version_is_available(tmp_path):
    toy_model(str(tmp_path / "toy" / "1"), k=1, warmup_inputs={"x": np.ones((2, 3), np.float32)})
    toy_model(str(tmp_path / "toy" / "2"), k=2, warmup_inputs={"x": np.ones((2, 5), np.float32)})  # bad warmup
    s = start(tmp_path, Policy("all"))
    try:
        statuses = {e["version"]: e for e in requests.get(f"{s.rest_url}/v1/models/toy").json()["model_version_status"]}
        assert statuses["1"]["state"] == "AVAILABLE"
        assert statuses["2"]["state"] == "END" and statuses["2"]["status"]["error_code"] == "UNKNOWN"
        assert "expects shape" in statuses["2"]["status"]["error_message"]
        assert post(s, "toy:predict", {"instances": [[1, 1, 1]]}).json()["predictions"][0]["version"] == 1
    finally:
        s.stop()


def test_batching_server_answers_every_request_correctly(repo):
    s = start(repo, batching=BatchingOptions(max_batch_size=8, timeout_s=0.005))
    results, errors = {}, []

    def call(i):
        r = post(s, "toy:predict", {"instances": [[i, i, i]] * (1 + i % 3)})
        (results.__setitem__(i, r.json()["predictions"]) if r.status_code == 200 else errors.append(r.text))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(32)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        s.stop()
    assert errors == []
    assert all(results[i] == [{"y": [float(i)] * 3, "version": 1}] * (1 + i % 3) for i in range(32))


def test_an_image_model_answers_encoded_images_on_rest_grpc_and_the_vertex_route(image_folder_model, tmp_path):
    """The trainer's image models have a second signature, `serving_image_bytes`, for encoded images: REST clients
    send `{"b64": ...}` with its name, gRPC clients a string tensor, Vertex requests name it in `parameters`.
    `serving_default` keeps taking pixel arrays, and says where encoded images go."""
    import base64
    import shutil

    folder, data_dir, job = image_folder_model
    shutil.copytree(job / "model", tmp_path / "models" / "pets" / "1")
    server = start(tmp_path / "models", names=("pets",))
    try:
        deadline = time.time() + 60
        while requests.get(f"{server.rest_url}/health").status_code != 200:  # loaded and warmed up (both signatures)
            assert time.time() < deadline, "the version never loaded"
            time.sleep(0.1)
        paths = sorted(folder.rglob("*.png"))[::5]
        expected = prepared_class_ids(job / "model", data_dir)
        want = [expected[str(p.relative_to(folder))] for p in paths]
        images = [{"b64": base64.b64encode(p.read_bytes()).decode()} for p in paths]

        rest = requests.post(
            f"{server.rest_url}/v1/models/pets:predict",
            json={"signature_name": "serving_image_bytes", "instances": images},
        ).json()
        assert [p["class_id"] for p in rest["predictions"]] == want
        client = ServingClient(server.rest_url, server.grpc_target, "pets")
        encoded = np.array([p.read_bytes() for p in paths], dtype=object)
        for protocol in ("rest", "grpc"):
            out = client.predict(encoded, signature_name="serving_image_bytes", protocol=protocol)
            assert out["class_id"].tolist() == want and out["probabilities"].shape == (len(paths), 2)
        client.close()
        vertex = requests.post(
            f"{server.rest_url}/predict",
            json={"instances": images, "parameters": {"signature_name": "serving_image_bytes"}},
        ).json()
        assert [p["class_id"] for p in vertex["predictions"]] == want

        wrong = requests.post(f"{server.rest_url}/v1/models/pets:predict", json={"instances": images[:1]})
        assert wrong.status_code == 400 and wrong.json()["error"] == (
            "input 'image' has dtype float32; b64 objects need a string input; this model takes encoded bytes on "
            'signature \'serving_image_bytes\': send "signature_name": "serving_image_bytes"'
        )
        wrong = requests.post(f"{server.rest_url}/predict", json={"instances": images[:1]})
        assert wrong.status_code == 400 and wrong.json()["error"].endswith(
            'send "parameters": {"signature_name": "serving_image_bytes"}'
        )
    finally:
        server.stop()


def test_event_loop_is_uvloop_and_tensorflow_threads_are_settable():
    """The server runs on uvloop (C transports); `--tensorflow-intra-op-parallelism` / `--tensorflow-inter-op-
    parallelism` set TensorFlow's pools before any model loads (a fresh process: they are fixed once TF starts)."""
    import asyncio
    import subprocess
    import sys

    from serving.server import run

    async def loop_module():
        return type(asyncio.get_running_loop()).__module__

    assert run(loop_module()).startswith("uvloop")
    code = (
        "import sys; from serving.server import set_tensorflow_threads; "
        "set_tensorflow_threads(1, 2, spin_wait={spin}); "
        "import tensorflow as tf; from tensorflow.python.eager import context; "
        "sent = []; original = context.pywrap_tfe.TFE_ContextOptionsSetConfig; "
        "context.pywrap_tfe.TFE_ContextOptionsSetConfig = lambda o, c: (sent.append(c), original(o, c))[1]; "
        "tf.constant(1.0) + 1; config = context.config_pb2.ConfigProto.FromString(sent[0]); "
        "print(tf.config.threading.get_intra_op_parallelism_threads(), "
        "tf.config.threading.get_inter_op_parallelism_threads(), config.intra_op_parallelism_threads, "
        "config.inter_op_parallelism_threads, config.experimental.disable_thread_spinning)"
    )
    for spin, disabled in ((False, "True"), (True, "False")):  # what the runtime is started with
        done = subprocess.run(
            [sys.executable, "-c", code.format(spin=spin)], capture_output=True, text=True, timeout=120
        )
        assert done.stdout.split() == ["1", "2", "1", "2", disabled], done.stderr[-500:]


def test_tensorflow_pools_spin_only_above_two_cpus():
    from serving.server import default_spin_wait

    assert [default_spin_wait(cpus) for cpus in (1, 2, 3, 16)] == [False, False, True, True]


def test_flat_call_answers_what_the_structured_call_answers(tmp_path):
    """One-input signatures are called through their flat function; the outputs are the structured call's."""
    from serving.models import flat_call

    toy_model(str(tmp_path / "m"), k=3)
    fn = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    flat = {k: v.numpy() for k, v in flat_call(fn)({"x": x}).items()}
    structured = {k: v.numpy() for k, v in fn(x=tf.constant(x)).items()}
    assert flat.keys() == {"y", "version"}
    assert flat.keys() == structured.keys()
    for key in flat:
        np.testing.assert_array_equal(flat[key], structured[key])


def test_the_heap_is_frozen_once_models_load_and_an_unloaded_version_is_collected(tmp_path):
    """After a version loads, everything alive is out of the garbage collector's passes (gc.freeze); the cycles an
    unloaded version leaves (thousands of objects) are collected at the next poll, not kept frozen."""
    import gc

    toy_model(str(tmp_path / "toy" / "1"), k=1)
    models = ServedModels(Repository(str(tmp_path), ("toy",), Policy(), {}), poll_seconds=3600)  # polled by hand
    models.start()
    try:
        assert gc.get_freeze_count() > 0
        publish(toy_model(str(tmp_path / "staging"), k=2), str(tmp_path), "toy", "2")
        models.poll()  # loads version 2, unloads version 1
        assert models.resolve("toy").version == 2
        models.poll()  # settles
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        left = gc.collect()  # what the settle left uncollected
        assert frozen > 0 and left < 50
    finally:
        models.stop()
        gc.unfreeze()
