"""Local endpoint deploy: a detached server on the repository, version checks, smoke test, rollback."""

import json
import os

import pytest
import requests

from components import deploy_model
from components.lib.model_repository import publish, versions
from tests.serving_models import toy_model


@pytest.mark.e2e
def test_deploy_starts_reuses_and_rolls_back(trained_model, digits_data, tmp_path, monkeypatch):
    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base, model_dir = str(tmp_path / "repo"), str(trained_model / "model")
    first = publish(model_dir, base, "digits", {"run": 1})
    try:
        info = deploy_model.deploy(first.number, first.path, str(digits_data), base, "digits", rest_port=0, grpc_port=0)
        assert info["started"] and info["version"] == 1 and info["smoke"]["examples"] == 8
        # the pixel arrays and, PNG-encoded, the same images on the encoded-image signature
        assert info["smoke"]["signatures"] == ["serving_default", "serving_image_bytes"]
        assert info["stop"] == f"python -m pipelines stop-serving --model-base-path {base} --model-name digits"
        with open(deploy_model.state_file(base, "digits")) as f:
            assert json.load(f)["rest_url"] == info["rest_url"]

        second = publish(model_dir, base, "digits", {"run": 2})
        again = deploy_model.deploy(second.number, second.path, str(digits_data), base, "digits")
        assert not again["started"] and again["pid"] == info["pid"] and again["version"] == 2
        assert again["log"] == info["log"] and os.path.getsize(again["log"]) > 0  # the reused server's log
        served = requests.get(f"{info['rest_url']}/v1/models/digits/metadata").json()["model_spec"]["version"]
        assert served == "2"

        broken = tmp_path / "broken"
        toy_model(str(broken), k=1)  # loads fine, but its signature does not classify images
        third = publish(str(broken), base, "digits", {"run": 3})
        with pytest.raises(
            deploy_model.DeployError,
            match=r"version 3 failed, rolled back: the published model's "
            r"serving_default has no class_id output \(\['version', 'y'\]\) \(serving version 2 again\)",
        ):
            deploy_model.deploy(third.number, third.path, str(digits_data), base, "digits")
        assert versions(base, "digits") == [1, 2]
        status = requests.get(f"{info['rest_url']}/v1/models/digits/versions/2").json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
    finally:
        assert deploy_model.stop_server(base, "digits")
    assert deploy_model.running_server(base, "digits") is None


def test_server_that_cannot_start_is_reported_with_its_log(trained_model, digits_data, tmp_path, monkeypatch):
    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base = str(tmp_path / "repo")
    version = publish(str(trained_model / "model"), base, "digits", {})
    with pytest.raises(
        deploy_model.DeployError, match="did not start .*rolled back|rolled back: the model server did not start"
    ):
        deploy_model.deploy(version.number, version.path, str(digits_data), base, "digits", rest_port=-5, grpc_port=0)
    assert versions(base, "digits") == []
    assert os.path.getsize(deploy_model.state_file(base, "digits").removesuffix(".json") + ".log") > 0


def test_smoke_test_fails_on_a_server_error_or_a_different_answer(tmp_path):
    import numpy as np

    from components.lib.smoke import SmokeCheck, SmokeFailed
    from serving.repository import Repository, ServedModels
    from serving.server import ModelServer, ServerOptions

    toy_model(str(tmp_path / "toy" / "1"), k=1)
    server = ModelServer(ServedModels(Repository(str(tmp_path))), ServerOptions(rest_port=0, grpc_port=-1)).start()
    try:
        images = SmokeCheck("serving_default", np.zeros((2, 8, 8, 1), np.float32), np.array([0, 0]))
        with pytest.raises(
            deploy_model.DeployError,
            match=r"smoke prediction on serving_default failed \(400\): "
            r"input 'x' expects",
        ):
            deploy_model.smoke_test(server.rest_url, "toy", 1, images)
        rows = SmokeCheck("serving_default", np.ones((2, 3), np.float32), np.array([0, 0]))
        with pytest.raises(SmokeFailed, match="smoke prediction on serving_default has no class_id"):
            deploy_model.smoke_test(server.rest_url, "toy", 1, rows)
    finally:
        server.stop()
