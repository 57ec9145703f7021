"""Local endpoint deploy: one detached server per repository and ports for all its models, version checks, smoke
test, rollback, stopping one model or the whole server."""

import os
import socket

import numpy as np
import pytest
import requests
from click.testing import CliRunner

from components.lib.deploy import tf_serving
from components.lib.deploy.model_repository import publish, versions
from pipelines.cli import cli
from serving import lifecycle, ports
from tests.helpers import serving_models
from tests.helpers.serving_models import toy_model


def test_stop_one_model_then_the_whole_server(tmp_path, monkeypatch):
    """A server started for the repository serves every model in it; stopping one unloads it for good (models
    published later are picked up, not it), the others keep serving; without a name the server stops."""
    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base = str(tmp_path / "repo")
    for name in ("a", "b"):
        toy_model(f"{base}/{name}/1", k=1)
    server = lifecycle.wait_ready(lifecycle.launch_server(base, 0, 0))
    url, where = server["rest_url"], f"pid {server['pid']}, REST {server['rest_url']}"
    try:
        for name in ("a", "b"):
            tf_serving.wait_available(url, name, 1)
        stop_a = CliRunner().invoke(cli, ["stop-serving", "--model-base-path", base, "--model-name", "a"])
        assert (stop_a.exit_code, stop_a.output) == (0, f"stopped serving a; the server ({where}) keeps serving b\n")
        serving_models.publish(toy_model(str(tmp_path / "staging"), k=3), base, "c", "1")
        tf_serving.wait_available(url, "c", 1)
        assert requests.get(f"{url}/v1/models/a").status_code == 404
        tf_serving.wait_available(url, "b", 1)
        with pytest.raises(ValueError, match=f"{base} has no model nope \\(its models: a, b, c\\)"):
            lifecycle.stop_server(base, "nope")
        stop_all = CliRunner().invoke(cli, ["stop-serving", "--model-base-path", base])
        assert (stop_all.exit_code, stop_all.output) == (0, f"stopped the server for {base} ({where})\n")
    finally:
        lifecycle.stop_server(base)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/v1/models/b", timeout=5)
    assert lifecycle.running_server(base, 0, 0) is None
    none = CliRunner().invoke(cli, ["stop-serving", "--model-base-path", base])
    assert (none.exit_code, none.output) == (1, f"Error: no server is running for {base}\n")


def test_a_port_in_use_fails_the_deploy_in_one_line_naming_it(trained_model, digits_data, tmp_path, monkeypatch):
    """The server's own error reaches the step's message: the port, what holds it, the option that picks another."""
    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base = str(tmp_path / "repo")
    version = publish(str(trained_model / "model"), base, "digits", {})
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port, holder = held.getsockname()[1], ports.holder(held.getsockname()[1])
        with pytest.raises(tf_serving.DeployError) as error:
            tf_serving.deploy(
                version.number, version.path, str(digits_data), base, "digits", rest_port=port, grpc_port=0
            )
    log = lifecycle.state_file(base, port, 0).removesuffix(".json") + ".log"
    assert str(error.value) == (
        "deploying digits version 1 failed, rolled back: the model server did not start (exit code 1): "
        f"port {port} (REST, 127.0.0.1) is in use by {holder}; choose another with --rest-port PORT, or "
        f"--rest-port 0 for any free port (log: {log})"
    )
    assert holder.startswith(f"pid {os.getpid()} (") and versions(base, "digits") == []


def test_smoke_test_fails_on_a_server_error_or_a_different_answer(tmp_path):
    import numpy as np

    from components.lib.deploy.smoke import SmokeCheck, SmokeFailed
    from serving.repository import Repository, ServedModels
    from serving.server import ModelServer, ServerOptions

    toy_model(str(tmp_path / "toy" / "1"), k=1)
    server = ModelServer(ServedModels(Repository(str(tmp_path))), ServerOptions(rest_port=0, grpc_port=-1)).start()
    try:
        images = SmokeCheck("serving_default", np.zeros((2, 8, 8, 1), np.float32), np.array([0, 0]))
        with pytest.raises(
            tf_serving.DeployError,
            match=r"smoke prediction on serving_default failed \(400\): "
            r"input 'x' expects",
        ):
            tf_serving.smoke_test(server.rest_url, "toy", 1, images)
        rows = SmokeCheck("serving_default", np.ones((2, 3), np.float32), np.array([0, 0]))
        with pytest.raises(SmokeFailed, match="smoke prediction on serving_default has no class_id"):
            tf_serving.smoke_test(server.rest_url, "toy", 1, rows)
    finally:
        server.stop()


def test_the_deploy_starts_a_mutual_tls_server_and_checks_it_over_tls(
    trained_model, digits_data, tmp_path, monkeypatch
):
    """With an SSLConfig file the launched server speaks only TLS and wants a client certificate: the deploy's
    version check and smoke test reach it with the CA and the client certificate; a check that does not trust the
    server's CA fails in one line and rolls the version back; stop-serving --model-name reaches it the same way."""
    from serving.tls import ClientTls
    from tests.helpers.certificates import make_certificates

    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    certificates = make_certificates(tmp_path / "certificates")
    config = certificates.ssl_config(tmp_path / "ssl.cfg", client_verify=True)
    tls = ClientTls(certificates.ca, certificates.client)
    base = str(tmp_path / "repo")
    first = publish(str(trained_model / "model"), base, "digits", {})
    try:
        served = tf_serving.deploy(
            first.number, first.path, str(digits_data), base, "digits", "", 0, 0, ssl_config_file=config, tls=tls
        )
        assert served.rest_url.startswith("https://127.0.0.1:") and served.smoke[0].signature == "serving_default"
        plain = served.rest_url.replace("https://", "http://")
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{plain}/v1/models/digits", timeout=5)
        second = publish(str(trained_model / "model"), base, "digits", {})
        with pytest.raises(tf_serving.DeployError) as error:
            tf_serving.deploy(second.number, second.path, str(digits_data), base, "digits", "", 0, 0, tls=ClientTls())
        assert str(error.value) == (
            f"deploying digits version 2 failed, rolled back: TLS to {served.rest_url} failed: [SSL: "
            "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain "
            "(_ssl.c:1006) (the previous version 1 is not serving: TLS to "
            f"{served.rest_url} failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
            "certificate in certificate chain (_ssl.c:1006))"
        )
        assert versions(base, "digits") == [1]
        serving_models.publish(toy_model(str(tmp_path / "staging"), k=3), base, "toy", "1")
        tf_serving.wait_available(served.rest_url, "toy", 1, tls=tls)
        stop = CliRunner().invoke(
            cli,
            ["stop-serving", "--model-base-path", base, "--model-name", "toy"]
            + ["--ca-file", certificates.ca, "--client-cert-file", certificates.client],
        )
        where = f"pid {served.pid}, REST {served.rest_url}"
        assert (stop.exit_code, stop.output) == (0, f"stopped serving toy; the server ({where}) keeps serving digits\n")
    finally:
        lifecycle.stop_server(base)


def transitions(log: str, model_name: str) -> list[str]:
    """The server log's load, unload and failed-load lines of a model, without time stamps and load durations."""
    with open(log) as f:
        messages = [line.split(" ", 3)[-1].rstrip("\n") for line in f]
    return [
        m.split(" in ")[0] if m.startswith("loaded ") else m
        for m in messages
        if m.startswith((f"loaded {model_name} ", f"unloaded {model_name} ", f"failed to load {model_name} "))
    ]


def deploy_step(version, digits_data, base: str, endpoint: str, version_policy: str):
    """The local deploy step (components.deploy_model) on a published version, on the server for `base` (any free
    ports), plaintext."""
    from kfp.dsl import Artifact, Dataset, Model

    from components.deploy_model import deploy_model

    published = Model(uri=version.path, metadata={"version": float(version.number), "path": version.path})
    return deploy_model(
        published, Dataset(uri=str(digits_data)), base, "digits", "", 0, 0, "", "", "", version_policy,
        Artifact(uri=endpoint),
    )  # fmt: skip


def test_a_resource_preserving_rollout_unloads_the_old_version_before_the_new_one_loads(
    trained_model, digits_data, tmp_path, monkeypatch, capsys
):
    """serving_version_policy resource-preserving: the step starts the server with it; the next version replaces
    the first one unloading it first, and the step waits through the gap and says so; a run asking for the other
    policy is refused in one line naming the running one, and its version is rolled back."""
    import json

    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base = str(tmp_path / "repo")
    first = publish(str(trained_model / "model"), base, "digits", {})
    try:
        deploy_step(first, digits_data, base, str(tmp_path / "first.json"), "resource-preserving")
        with open(lifecycle.state_file(base, 0, 0)) as f:
            server = json.load(f)
        assert server["aspired_version_policy"] == "resource-preserving"
        url, stop = server["rest_url"], f"python -m pipelines stop-serving --model-base-path {base} --model-name digits"
        capsys.readouterr()
        second = publish(str(trained_model / "model"), base, "digits", {})
        outputs = deploy_step(second, digits_data, base, str(tmp_path / "second.json"), "resource-preserving")
        assert outputs.version == 2
        assert capsys.readouterr().out.splitlines() == [
            "resource-preserving: digits version 1 was unloaded before version 2 loaded (requests in between got "
            "NOT_FOUND)",
            f"serving digits version 2: REST {url}, gRPC {server['grpc_target']}; stop it with: {stop}",
        ]
        with open(tmp_path / "second.json") as f:
            assert json.load(f)["unloaded_first"] == 1
        log = lifecycle.state_file(base, 0, 0).removesuffix(".json") + ".log"
        assert transitions(log, "digits") == [
            "loaded digits version 1",
            "unloaded digits version 1",
            "loaded digits version 2",
        ]
        third = publish(str(trained_model / "model"), base, "digits", {})
        with pytest.raises(tf_serving.DeployError) as error:
            deploy_step(third, digits_data, base, str(tmp_path / "third.json"), "availability-preserving")
        assert str(error.value) == (
            f"deploying digits version 3 failed, rolled back: the server for {base} (pid {server['pid']}, REST "
            f"{url}) replaces versions resource-preserving, not availability-preserving: stop it (python -m "
            f"pipelines stop-serving --model-base-path {base}) or set serving_version_policy: resource-preserving"
        )
        assert versions(base, "digits") == [1, 2]
        assert requests.get(f"{url}/v1/models/digits/metadata").json()["model_spec"]["version"] == "2"
    finally:
        lifecycle.stop_server(base)


def test_a_resource_preserving_rollout_whose_new_version_fails_reloads_the_previous_one(
    trained_model, digits_data, tmp_path, monkeypatch
):
    """Under resource-preserving a version that fails to load has left no version serving: the rollback removes it,
    the server loads the previous version again, and the step's error says both in one line."""
    import shutil

    from core.warmup import write_warmup_requests

    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base = str(tmp_path / "repo")
    first = publish(str(trained_model / "model"), base, "digits", {})
    broken = shutil.copytree(trained_model / "model", tmp_path / "broken")
    write_warmup_requests(str(broken), [("no_such_signature", {"x": np.zeros((1, 8, 8, 1), np.float32)})])
    try:
        served = tf_serving.deploy(
            first.number, first.path, str(digits_data), base, "digits", "", 0, 0, version_policy="resource-preserving"
        )
        second = publish(str(broken), base, "digits", {})
        with pytest.raises(tf_serving.DeployError) as error:
            tf_serving.deploy(
                second.number, second.path, str(digits_data), base, "digits", "", 0, 0,
                version_policy="resource-preserving",
            )  # fmt: skip
        failure = (
            'NotFound: Serving signature name: "no_such_signature" not found in signature def (available: '
            "['serving_default', 'serving_image_bytes'])"
        )
        assert str(error.value) == (
            f"deploying digits version 2 failed, rolled back: version 2 failed to load: {failure} (resource-"
            "preserving had unloaded version 1 first: no version served digits since; serving version 1 again)"
        )
        assert transitions(served.log, "digits") == [
            "loaded digits version 1",
            "unloaded digits version 1",
            f"failed to load digits version 2: {failure}",
            "loaded digits version 1",
        ]
        assert versions(base, "digits") == [1]
        metadata = requests.get(f"{served.rest_url}/v1/models/digits/metadata", timeout=10).json()
        assert metadata["model_spec"]["version"] == "1"
    finally:
        lifecycle.stop_server(base)


def test_the_local_run_hands_serving_version_policy_to_the_deploy_step():
    """The pipeline input (default availability-preserving) reaches the local deploy step's version_policy."""
    from google.protobuf import json_format

    from pipelines.training import build_pipeline

    spec = json_format.MessageToDict(build_pipeline("local").pipeline_spec)
    root = spec["root"]["inputDefinitions"]["parameters"]["serving_version_policy"]
    assert (root["defaultValue"], root["parameterType"]) == ("availability-preserving", "STRING")
    deploy = next(
        c["dag"]["tasks"]["deploy-model"]
        for c in spec["components"].values()
        if "deploy-model" in c.get("dag", {}).get("tasks", {})
    )
    assert deploy["inputs"]["parameters"]["version_policy"] == {
        "componentInputParameter": "pipelinechannel--serving_version_policy"
    }
