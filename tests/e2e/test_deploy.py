"""The local deploy step on a trained model: the first deploy starts the server, the next reuses it, a failing
version is rolled back while the previous one keeps serving."""

import json
import os

import pytest
import requests

from components.lib.deploy import tf_serving
from components.lib.deploy.model_repository import publish, versions
from serving import lifecycle
from tests.helpers.serving_models import toy_model


def test_deploy_starts_reuses_and_rolls_back(trained_model, digits_data, tmp_path, monkeypatch):
    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    base, model_dir = str(tmp_path / "repo"), str(trained_model / "model")

    def deploy(version, name="digits"):
        return tf_serving.deploy(version.number, version.path, str(digits_data), base, name, rest_port=0, grpc_port=0)

    first = publish(model_dir, base, "digits", {"run": 1})
    try:
        info = deploy(first)
        assert info.started and info.version == 1 and len(info.smoke[0].class_ids) == 8
        # the pixel arrays and, PNG-encoded, the same images on the encoded-image signature
        assert [s.signature for s in info.smoke] == ["serving_default", "serving_image_bytes"]
        assert info.stop == f"python -m pipelines stop-serving --model-base-path {base} --model-name digits"
        with open(lifecycle.state_file(base, 0, 0)) as f:
            assert json.load(f)["rest_url"] == info.rest_url

        second = publish(model_dir, base, "digits", {"run": 2})
        again = deploy(second)
        assert not again.started and again.pid == info.pid and again.version == 2
        assert again.log == info.log and os.path.getsize(again.log) > 0  # the reused server's log
        # another model: the same server picks it up from the repository, and serves both
        beside = deploy(publish(model_dir, base, "shapes", {"run": 3}), "shapes")
        assert not beside.started and beside.pid == info.pid and beside.version == 1
        for name, version in (("digits", "2"), ("shapes", "1")):
            served = requests.get(f"{info.rest_url}/v1/models/{name}/metadata").json()["model_spec"]["version"]
            assert served == version

        broken = tmp_path / "broken"
        toy_model(str(broken), k=1)  # loads fine, but its signature does not classify images
        third = publish(str(broken), base, "digits", {"run": 4})
        with pytest.raises(
            tf_serving.DeployError,
            match=r"version 3 failed, rolled back: the model's "
            r"serving_default has no class_id output \(\['version', 'y'\]\) \(serving version 2 again\)",
        ):
            deploy(third)
        assert versions(base, "digits") == [1, 2]
        status = requests.get(f"{info.rest_url}/v1/models/digits/versions/2").json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        where = f"pid {info.pid}, REST {info.rest_url}"
        assert lifecycle.stop_server(base, "digits") == (
            f"stopped serving digits; the server ({where}) keeps serving shapes"
        )
        redeployed = deploy(publish(model_dir, base, "digits", {"run": 5}))  # a run serves a stopped model again
        assert redeployed.pid == info.pid and redeployed.version == 4
        assert lifecycle.stop_server(base, "shapes") == (
            f"stopped serving shapes; the server ({where}) keeps serving digits"
        )
        assert lifecycle.stop_server(base, "digits") == (
            f"stopped the server for {base} ({where}): digits was its last model"
        )
    finally:
        lifecycle.stop_server(base)
    assert lifecycle.running_server(base, 0, 0) is None
