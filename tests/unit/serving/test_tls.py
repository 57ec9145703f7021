"""TLS on the server's gRPC and REST APIs (TF Serving's --ssl_config_file), with certificates made for the test."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import requests
from click.testing import CliRunner
from tensorflow_serving.apis import prediction_service_pb2_grpc

from serving.client import PredictionError, ServingClient
from serving.command import serve
from serving.repository import Repository, ServedModels
from serving.server import ModelServer, ServerOptions
from serving.tls import ClientTls, read_ssl_config
from tests.helpers.certificates import make_certificates
from tests.helpers.serving_models import toy_model
from tests.unit.serving.test_server import grpc_request

X = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    toy_model(str(base / "toy" / "1"), k=2)
    return base


def start(repository, ssl_config_file: str) -> ModelServer:
    models = ServedModels(Repository(str(repository), ("toy",)), 0.1)
    options = ServerOptions(rest_port=0, grpc_port=0, ssl=read_ssl_config(ssl_config_file))
    return ModelServer(models, options).start()


@pytest.fixture(scope="module")
def tls_server(repository, certificates, tmp_path_factory):
    server = start(repository, certificates.ssl_config(tmp_path_factory.mktemp("tls") / "ssl.cfg"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mutual_server(repository, certificates, tmp_path_factory):
    config = certificates.ssl_config(tmp_path_factory.mktemp("mtls") / "ssl.cfg", client_verify=True)
    server = start(repository, config)
    yield server
    server.stop()


def predict_both(server: ModelServer, tls: ClientTls) -> dict[str, dict]:
    client = ServingClient(server.rest_url, server.grpc_target, "toy", tls=tls)
    try:
        return {protocol: client.predict({"x": X}, protocol=protocol) for protocol in ("rest", "grpc")}
    finally:
        client.close()


def refusals(server: ModelServer, tls: ClientTls) -> dict[str, str | int]:
    """Each protocol's PredictionError status for a client with `tls`."""
    client = ServingClient(server.rest_url, server.grpc_target, "toy", tls=tls, timeout=10)
    statuses = {}
    try:
        for protocol in ("rest", "grpc"):
            with pytest.raises(PredictionError) as refused:
                client.predict({"x": X}, protocol=protocol)
            statuses[protocol] = refused.value.status
    finally:
        client.close()
    return statuses


def test_grpc_predict_and_rest_predict_succeed_over_tls_with_the_ca(tls_server, certificates):
    assert tls_server.rest_url == f"https://127.0.0.1:{tls_server.rest_port}"
    answers = predict_both(tls_server, ClientTls(certificates.ca))
    for outputs in answers.values():
        assert outputs["y"].tolist() == [[2.0, 4.0, 6.0]]
        assert outputs["version"].tolist() == [2]  # the toy model answers its k


def test_a_plaintext_client_is_refused(tls_server):
    plain_url = tls_server.rest_url.replace("https://", "http://")
    with pytest.raises(requests.ConnectionError):
        requests.post(f"{plain_url}/v1/models/toy:predict", json={"instances": X.tolist()}, timeout=10)
    with grpc.insecure_channel(tls_server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(grpc_request(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_that_does_not_trust_the_servers_ca_is_refused(tls_server):
    with pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        requests.get(f"{tls_server.rest_url}/v1/models/toy", timeout=10)
    assert refusals(tls_server, ClientTls()) == {"rest": "UNAVAILABLE", "grpc": "UNAVAILABLE"}


def test_client_verify_refuses_a_client_without_a_certificate_or_with_another_cas(mutual_server, certificates):
    assert refusals(mutual_server, ClientTls(certificates.ca)) == {"rest": "UNAVAILABLE", "grpc": "UNAVAILABLE"}
    assert refusals(mutual_server, ClientTls(certificates.ca, certificates.other_client)) == {
        "rest": "UNAVAILABLE",
        "grpc": "UNAVAILABLE",
    }
    for outputs in predict_both(mutual_server, ClientTls(certificates.ca, certificates.client)).values():
        assert outputs["y"].tolist() == [[2.0, 4.0, 6.0]]


@pytest.mark.parametrize(
    "text,message",
    [
        ('server_key: "k"\n', "give the PEM text of both server_key and server_cert"),
        (
            "{pair}client_verify: true\n",
            "client_verify needs custom_ca, the PEM text of the CA that signs clients",
        ),
        (
            "server_keys: 1\n",
            '1:1 : Message type "tensorflow.serving.SSLConfig" has no field named "server_keys". (an SSLConfig text '
            "proto takes server_key, server_cert, custom_ca, client_verify)",
        ),
        ("{swapped}", "server_cert and server_key do not make a key pair (KEY_VALUES_MISMATCH)"),
        ('{pair}custom_ca: "not a certificate"\n', "custom_ca holds no PEM certificate"),
    ],
)
def test_an_unusable_ssl_config_is_refused_in_one_line(certificates, tmp_path, text, message):
    import json
    from pathlib import Path

    key, cert = (json.dumps(Path(p).read_text()) for p in (certificates.server_key, certificates.server_cert))
    other_key = Path(certificates.other_client).read_text().split("-----END CERTIFICATE-----\n")[1]
    config = tmp_path / "ssl.cfg"
    config.write_text(
        text.format(
            pair=f"server_key: {key}\nserver_cert: {cert}\n",
            swapped=f"server_key: {json.dumps(other_key)}\nserver_cert: {cert}\n",
        )
    )
    result = CliRunner().invoke(
        serve,
        ["--model-base-path", str(tmp_path), "--rest-port", "0", "--grpc-port", "0", "--ssl-config-file", str(config)],
    )
    assert result.exit_code == 1
    (line,) = result.output.splitlines()
    assert line == f"Error: --ssl-config-file {config}: {message}"
