"""TF Serving's aspired-version policies on the real server: availability-preserving (load the new version, then
unload the old) and resource-preserving (unload, then load), and what a request sees while the new version loads."""

from __future__ import annotations

import logging
import threading

import grpc
import pytest
import requests
from tensorflow_serving.apis import prediction_service_pb2_grpc

from serving import models, tensors
from serving.repository import Repository, ServedModels
from serving.server import ModelServer, ServerOptions
from tests.helpers.serving_models import publish, toy_model
from tests.unit.serving.test_server import grpc_request


class GatedLoads:
    """Stands in for serving.models.Servable: a load of a version in `gated` waits until `release` is set, after
    `started` is set; every other load goes straight through."""

    def __init__(self, gated: int):
        self.gated, self.started, self.release = gated, threading.Event(), threading.Event()

    def __call__(self, version, path, batching):
        if version == self.gated:
            self.started.set()
            assert self.release.wait(60), "the test never released the load"
        return real_servable(version, path, batching)


real_servable = models.Servable


def serving_lines(caplog) -> list[str]:
    """The server's load and unload lines, without the load's duration."""
    return [
        r.getMessage().split(" in ")[0]
        for r in caplog.records
        if r.name == "tfpipe.serving" and r.getMessage().startswith(("loaded ", "unloaded "))
    ]


def statuses(server: ModelServer) -> dict[str, str]:
    body = requests.get(f"{server.rest_url}/v1/models/toy", timeout=10).json()
    return {e["version"]: e["state"] for e in body["model_version_status"]}


@pytest.mark.parametrize(
    "transition,during,lines",
    [
        (
            "availability-preserving",
            {"rest": (200, 1), "grpc": "OK 1", "status": {"2": "LOADING", "1": "AVAILABLE"}},
            ["loaded toy version 1", "loaded toy version 2", "unloaded toy version 1"],
        ),
        (
            "resource-preserving",
            {
                "rest": (404, "Servable not found for request: Latest(toy)"),
                "grpc": "NOT_FOUND Servable not found for request: Latest(toy)",
                "status": {"2": "LOADING", "1": "END"},
            },
            ["loaded toy version 1", "unloaded toy version 1", "loaded toy version 2"],
        ),
    ],
)
def test_the_transition_orders_load_and_unload_and_decides_what_a_request_sees_meanwhile(
    tmp_path, monkeypatch, caplog, transition, during, lines
):
    caplog.set_level(logging.INFO, logger="tfpipe.serving")
    toy_model(str(tmp_path / "toy" / "1"), k=1)
    loads = GatedLoads(gated=2)
    monkeypatch.setattr(models, "Servable", loads)
    served = ServedModels(Repository(str(tmp_path), ("toy",)), poll_seconds=3600, transition=transition)
    server = ModelServer(served, ServerOptions(rest_port=0, grpc_port=0)).start()  # polls once, then hourly
    channel = grpc.insecure_channel(server.grpc_target)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

    def ask() -> dict:
        rest = requests.post(f"{server.rest_url}/v1/models/toy:predict", json={"instances": [[1, 1, 1]]}, timeout=10)
        answer = rest.json()
        try:
            response = stub.Predict(grpc_request(), timeout=10)
            grpc_answer = f"OK {tensors.to_array(response.outputs['version']).tolist()[0]}"
        except grpc.RpcError as e:
            grpc_answer = f"{e.code().name} {e.details()}"
        return {
            "rest": (rest.status_code, answer["predictions"][0]["version"] if rest.ok else answer["error"]),
            "grpc": grpc_answer,
            "status": statuses(server),
        }

    try:
        publish(toy_model(str(tmp_path / "staging"), k=2), str(tmp_path), "toy", "2")
        poll = threading.Thread(target=served.poll)
        poll.start()
        assert loads.started.wait(60)
        assert ask() == during
        loads.release.set()
        poll.join(60)
        assert ask() == {"rest": (200, 2), "grpc": "OK 2", "status": {"2": "AVAILABLE", "1": "END"}}
    finally:
        loads.release.set()
        channel.close()
        server.stop()
    assert serving_lines(caplog)[:3] == lines


def test_the_command_takes_the_aspired_version_policy(tmp_path, monkeypatch):
    """`--aspired-version-policy` reaches the served models (whose managers take it, above); an unknown one is
    refused naming the choices."""
    from click.testing import CliRunner

    from serving import command

    served = []

    class Recorder:  # stands in for ModelServer: records what the command built instead of serving
        def __init__(self, models, options):
            served.append(models)

        async def serve(self):
            return None

    monkeypatch.setattr("serving.server.ModelServer", Recorder)
    monkeypatch.setattr("serving.server.set_tensorflow_threads", lambda *args: None)
    arguments = ["--model-base-path", str(tmp_path), "--rest-port", "0", "--grpc-port", "0"]
    result = CliRunner().invoke(command.serve, arguments + ["--aspired-version-policy", "resource-preserving"])
    assert result.exit_code == 0, result.output
    assert [m.transition for m in served] == ["resource-preserving"]
    assert CliRunner().invoke(command.serve, arguments).exit_code == 0
    assert [m.transition for m in served] == ["resource-preserving", "availability-preserving"]
    refused = CliRunner().invoke(command.serve, arguments + ["--aspired-version-policy", "x"])
    assert refused.exit_code == 2
    assert refused.output.splitlines()[-1] == (
        "Error: Invalid value for '--aspired-version-policy': 'x' is not one of 'availability-preserving', "
        "'resource-preserving'."
    )
