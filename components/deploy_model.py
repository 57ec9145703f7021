"""Self-hosted endpoint deploy: serve the published repository version and prove it answers.

Local target: starts `python -m serving` on the repository when no server is running for it (fully
detached, so it outlives the step and the run), waits until the new version is AVAILABLE, sends a smoke
prediction and compares it with the SavedModel's own answer; on any failure the new version is removed (rollback)
and the server falls back to the previous one. With `serving_url` (kubeflow: a TF Serving deployment on the same
repository; the `deploy_model_at_url` step) the server is only checked, not started.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components.lib.smoke import SmokeCheck, reference_checks


class DeployError(RuntimeError):
    """The new version could not be served; it has been rolled back."""


def state_dir() -> str:
    return os.environ.get("TFPIPE_SERVING_STATE", os.path.expanduser("~/.cache/tfpipe/serving"))


def state_file(base: str, model_name: str) -> str:
    digest = hashlib.sha1(f"{base.rstrip('/')}/{model_name}".encode()).hexdigest()[:12]
    return os.path.join(state_dir(), f"{model_name}-{digest}.json")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_server(base: str, model_name: str) -> dict | None:
    """The server recorded for this repository and model, if its process is alive and answers."""
    import requests

    path = state_file(base, model_name)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        info = json.load(f)
    if not _alive(info["pid"]):
        return None
    try:
        requests.get(f"{info['rest_url']}/v1/models/{model_name}", timeout=5)
    except requests.RequestException:
        return None
    return {**info, "log": _log_path(path)}


def launch_server(base: str, model_name: str, rest_port: int, grpc_port: int) -> tuple[subprocess.Popen, str]:
    """Start a detached server (own session and log file: it must outlive the pipeline step); returns the process
    and the file it writes its addresses to once serving."""
    os.makedirs(state_dir(), exist_ok=True)
    ready = state_file(base, model_name)
    if os.path.exists(ready):
        os.remove(ready)
    command = [
        sys.executable,
        "-m",
        "serving",
        "--model-base-path",
        base,
        "--model-name",
        model_name,
        "--rest-port",
        str(rest_port),
        "--grpc-port",
        str(grpc_port),
        "--ready-file",
        ready,
        "--enable-batching",
        "--max-batch-size",
        "32",
        "--batch-timeout-ms",
        "0",
    ]  # bench/serving.py
    with open(_log_path(ready), "ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    return process, ready


def wait_ready(process: subprocess.Popen, ready: str, timeout: float = 180) -> dict:
    """The launched server's addresses once it serves; its log tail if it exits or takes too long."""
    deadline = time.time() + timeout
    while not os.path.exists(ready):
        if process.poll() is not None or time.time() > deadline:
            if process.poll() is None:
                process.kill()
            raise DeployError(
                f"the model server did not start (exit code {process.poll()}); "
                f"last log lines:\n{_tail(_log_path(ready))}"
            )
        time.sleep(0.2)
    with open(ready) as f:
        return {**json.load(f), "log": _log_path(ready)}


def _log_path(ready: str) -> str:
    return ready.removesuffix(".json") + ".log"


def _tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def wait_available(rest_url: str, model_name: str, version: int, timeout: float = 180) -> None:
    """Until the server reports `version` AVAILABLE; a load error fails at once (END without an error is a version
    unloaded earlier that may load again, e.g. after a rollback)."""
    import requests

    deadline, last = time.time() + timeout, "no answer"
    while time.time() < deadline:
        try:
            response = requests.get(f"{rest_url}/v1/models/{model_name}/versions/{version}", timeout=5)
            if response.status_code == 200:
                (status,) = response.json()["model_version_status"]
                if status["state"] == "AVAILABLE":
                    return
                if status["state"] == "END" and status["status"]["error_code"] != "OK":
                    raise DeployError(f"version {version} failed to load: {status['status']['error_message']}")
                last = status["state"]
            else:
                last = response.json().get("error", response.text)
        except requests.RequestException as e:
            last = str(e)
        time.sleep(0.2)
    raise DeployError(f"version {version} was not AVAILABLE after {timeout:.0f}s (last: {last})")


def smoke_test(rest_url: str, model_name: str, version: int, check: SmokeCheck) -> dict:
    """Predict a check's examples through the server (TF Serving's REST API); its class ids must equal the
    SavedModel's."""
    import requests

    response = requests.post(
        f"{rest_url}/v1/models/{model_name}/versions/{version}:predict",
        json={"signature_name": check.signature, "instances": check.instances()},
        timeout=30,
    )
    body = response.json()
    if response.status_code != 200:
        raise DeployError(f"smoke prediction on {check.signature} failed ({response.status_code}): {body.get('error')}")
    return check.compare(body)


def deploy(
    version: int,
    version_path: str,
    data_dir: str,
    base: str,
    model_name: str,
    serving_url: str = "",
    rest_port: int = 8501,
    grpc_port: int = 8500,
    timeout: float = 180,
) -> dict:
    """Serve `version` (already published) and check it; roll it back and raise DeployError on failure."""
    from components.lib.model_repository import remove_version

    server: dict | None = None
    try:
        launched = None
        if serving_url:
            server = {
                "rest_url": serving_url.rstrip("/"),
                "grpc_target": "",
                "pid": None,
                "log": None,
                "started": False,
            }
        elif (server := running_server(base, model_name)) is not None:
            server = {**server, "started": False}
        else:
            launched = launch_server(base, model_name, rest_port, grpc_port)
        checks = reference_checks(version_path, data_dir)  # while a launched server starts
        if launched:
            server = {**wait_ready(*launched, timeout), "started": True}
        assert server is not None  # one of the three branches above set it
        wait_available(server["rest_url"], model_name, version, timeout)
        smokes = [smoke_test(server["rest_url"], model_name, version, check) for check in checks]
        smoke = {**smokes[0], "signatures": [s["signature_name"] for s in smokes]}
    except Exception as e:
        remove_version(base, model_name, version)
        raise DeployError(
            f"deploying {model_name} version {version} failed, rolled back: {e}" + _restored(server, base, model_name)
        ) from e
    return {
        **server,
        "model_name": model_name,
        "version": version,
        "base_path": base,
        "smoke": smoke,
        "stop": f"python -m pipelines stop-serving --model-base-path {base} --model-name {model_name}"
        if server.get("pid")
        else "",
    }


def _restored(server: dict | None, base: str, model_name: str, timeout: float = 60) -> str:
    """After a rollback: wait until the server is back on the previous version; say which one (or why not)."""
    from components.lib.model_repository import champion

    previous = champion(base, model_name)
    if server is None or previous is None:
        return ""
    try:
        wait_available(server["rest_url"], model_name, previous.number, timeout)
    except DeployError as e:
        return f" (the previous version {previous.number} is not serving: {e})"
    return f" (serving version {previous.number} again)"


def stop_server(base: str, model_name: str, timeout: float = 30) -> bool:
    """Stop the recorded server for this repository and model; False when none was running."""
    info = running_server(base, model_name)
    if info is None:
        return False
    os.kill(info["pid"], signal.SIGTERM)
    deadline = time.time() + timeout
    while _alive(info["pid"]) and time.time() < deadline:
        time.sleep(0.1)
    os.remove(state_file(base, model_name))
    return True


def deploy_model(
    published: Input[Model],
    dataset: Input[Dataset],
    model_repository: str,
    model_name: str,
    serving_url: str,
    rest_port: int,
    grpc_port: int,
    endpoint: Output[Artifact],
) -> NamedTuple("Outputs", [("rest_url", str), ("grpc_target", str), ("version", int)]):
    """KFP step (self-hosted): start (or reuse) the local server on the repository, wait for the new version,
    smoke-test it, roll back on failure. `serving_url` set: check that server instead of starting one.

    Args:
        published: The published repository version.
        dataset: The prepared data (examples for the smoke test).
        model_repository: The versioned model repository the server watches.
        model_name: The model's name in the repository and on the server.
        serving_url: URL of a TF Serving watching the repository (empty: start or reuse the local server).
        rest_port: The local server's REST port (0: any free port).
        grpc_port: The local server's gRPC port (0: any free port).
    """
    import json
    from collections import namedtuple

    from components.deploy_model import deploy

    # KFP hands artifact metadata on through JSON/protobuf numbers: the version arrives as a float (3.0)
    version, path = int(published.metadata["version"]), published.metadata["path"]
    info = deploy(version, path, dataset.path, model_repository, model_name, serving_url, rest_port, grpc_port)
    endpoint.metadata.update({k: info[k] for k in ("rest_url", "grpc_target", "version", "pid")})
    with open(endpoint.path, "w") as f:
        json.dump(info, f, indent=2)
    print(
        f"serving {model_name} version {version}: REST {info['rest_url']}, gRPC {info['grpc_target'] or '-'}"
        + (f"; stop it with: {info['stop']}" if info["stop"] else "")
    )
    Outputs = namedtuple("Outputs", ["rest_url", "grpc_target", "version"])
    return Outputs(info["rest_url"], info["grpc_target"], version)
