"""Self-hosted endpoint deploy: serve the published repository version and prove it answers.

Local target: one server per repository and ports serves every model of the repository (`python -m serving`, fully
detached, so it outlives the step and the run). Its record in the state folder, keyed by repository and ports, lets
a later run find it: the server picks the new model or version up from the repository itself; with none running,
the step starts one. It waits until the new version is AVAILABLE, sends a smoke prediction and compares it with the
SavedModel's own answer; on any failure the new version is removed (rollback) and the server falls back to the
previous one. With `serving_url` (kubeflow: a TF Serving deployment on the same repository; the
`deploy_model_at_url` step) the server is only checked, not started.
"""

import contextlib
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components.lib.smoke import SmokeCheck, reference_checks


class DeployError(RuntimeError):
    """The new version could not be served; it has been rolled back."""


def state_dir() -> str:
    return os.environ.get("TFPIPE_SERVING_STATE", os.path.expanduser("~/.cache/tfpipe/serving"))


def _repository_key(base: str) -> str:
    base = base.rstrip("/")
    return f"{os.path.basename(base) or 'repository'}-{hashlib.sha1(base.encode()).hexdigest()[:12]}"


def state_file(base: str, rest_port: int, grpc_port: int) -> str:
    """The record (ready file) of the server started for this repository on these ports, as asked (0: any free
    port); its log (`.log`) and the models it must not serve (`.skip`, one a line) sit beside it."""
    return os.path.join(state_dir(), f"{_repository_key(base)}-{rest_port}-{grpc_port}.json")


def _beside(state: str, suffix: str) -> str:
    return state.removesuffix(".json") + suffix


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # not a child of this process
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # this process started it, and it has exited
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _recorded(state: str) -> dict | None:
    """The server a record names, if its process is alive and answers."""
    import requests

    if not os.path.isfile(state):
        return None
    with open(state) as f:
        info = json.load(f)
    if not _alive(info["pid"]):
        return None
    try:
        requests.get(f"{info['rest_url']}/v1/models/-", timeout=5)  # any answer will do
    except requests.RequestException:
        return None
    return {**info, "log": _beside(state, ".log")}


def running_server(base: str, rest_port: int, grpc_port: int) -> dict | None:
    """The server recorded for this repository and these ports, if it is alive and answers."""
    return _recorded(state_file(base, rest_port, grpc_port))


def _running_servers(base: str) -> list[tuple[str, dict]]:
    """(record, server) of every live server recorded for this repository, whatever its ports."""
    records = sorted(glob.glob(os.path.join(glob.escape(state_dir()), f"{_repository_key(base)}-*.json")))
    return [(state, server) for state in records if (server := _recorded(state)) is not None]


def _skipped(state: str) -> set[str]:
    from serving.repository import read_names

    return read_names(_beside(state, ".skip"))


def _write_skipped(state: str, names: set[str]) -> None:
    path = _beside(state, ".skip")
    with open(f"{path}.tmp", "w") as f:
        f.writelines(f"{name}\n" for name in sorted(names))
    os.replace(f"{path}.tmp", path)


@dataclass
class Launched:
    process: subprocess.Popen
    state: str  # the ready file it writes once serving
    log_start: int  # where its own lines start in the (appended) log


def launch_server(base: str, rest_port: int, grpc_port: int) -> Launched:
    """Start a detached server for the whole repository (own session and log file: it must outlive the step)."""
    os.makedirs(state_dir(), exist_ok=True)
    state = state_file(base, rest_port, grpc_port)
    for stale in (state, _beside(state, ".skip")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(stale)
    command = [
        sys.executable,
        "-m",
        "serving",
        "--model-base-path",
        base,
        "--rest-port",
        str(rest_port),
        "--grpc-port",
        str(grpc_port),
        "--ready-file",
        state,
        "--skip-models-file",
        _beside(state, ".skip"),
        "--enable-batching",
        "--max-batch-size",
        "32",
        "--batch-timeout-ms",
        "0",
    ]  # bench/serving.py
    with open(_beside(state, ".log"), "ab") as log:
        log_start = log.tell()
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    return Launched(process, state, log_start)


def wait_ready(launched: Launched, timeout: float = 180) -> dict:
    """The launched server's addresses once it serves; why not (its error line, or its log's tail) if it exits or
    takes too long."""
    deadline = time.time() + timeout
    while not os.path.exists(launched.state):
        code = launched.process.poll()
        if code is None and time.time() < deadline:
            time.sleep(0.2)
            continue
        if code is None:
            launched.process.kill()
            code = launched.process.wait()
        raise DeployError(f"the model server did not start (exit code {code}): {_why(launched)}")
    with open(launched.state) as f:
        return {**json.load(f), "log": _beside(launched.state, ".log")}


def _why(launched: Launched) -> str:
    """The server's own `Error: ...` line (one line, with where its log is), else the tail of its log."""
    path = _beside(launched.state, ".log")
    with open(path, "rb") as f:
        f.seek(launched.log_start)
        lines = f.read().decode(errors="replace").splitlines()
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error: ")]
    if errors:
        return f"{errors[-1]} (log: {path})"
    return f"last lines of {path}:\n" + "\n".join(lines[-15:])


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
    """Serve `version` (already published) and check it; roll it back and raise DeployError on failure (an
    invalid `serving_url` too). `model_name` and `base` must be valid (components.lib.names): InvalidName."""
    from components.lib import names
    from components.lib.model_repository import remove_version

    names.model_name(model_name)  # also a line of the server's skip file and a URL path segment
    names.location(base, "model_repository")
    server: dict | None = None
    try:
        launched = None
        if serving_url:
            names.url(serving_url, "serving_url")
            server = {
                "rest_url": serving_url.rstrip("/"),
                "grpc_target": "",
                "pid": None,
                "log": None,
                "started": False,
            }
        elif (server := running_server(base, rest_port, grpc_port)) is not None:
            state = state_file(base, rest_port, grpc_port)
            if model_name in (skipped := _skipped(state)):  # stopped earlier with stop-serving: serve it again
                _write_skipped(state, skipped - {model_name})
            server = {**server, "started": False}
        else:
            launched = launch_server(base, rest_port, grpc_port)
        checks = reference_checks(version_path, data_dir)  # while a launched server starts
        if launched:
            server = {**wait_ready(launched, timeout), "started": True}
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


def stop_server(base: str, model_name: str = "", timeout: float = 30) -> str:
    """Stop the servers recorded for this repository, or only their serving of `model_name` (a server stops with its
    last model); says what it did, "" when none was running. ValueError: no such model; TimeoutError: a server
    still serves it after `timeout`, InvalidName: `model_name` is no model name."""
    from components.lib import names
    from serving.repository import model_names

    if model_name:
        names.model_name(model_name, "--model-name")  # written as a line of the server's skip file
    servers = _running_servers(base)
    models = model_names(base) if servers and model_name else []
    if model_name and servers and model_name not in models:
        raise ValueError(f"{base} has no model {model_name} (its models: {', '.join(models) or 'none'})")
    done = []
    for state, server in servers:
        where = f"pid {server['pid']}, REST {server['rest_url']}"
        skipped = _skipped(state) | {model_name}
        others = [m for m in models if m not in skipped]
        if not others:
            _stop(state, server["pid"], timeout)
            last = f": {model_name} was its last model" if model_name else ""
            done.append(f"stopped the server for {base} ({where}){last}")
            continue
        _write_skipped(state, skipped)
        _wait_unloaded(server["rest_url"], model_name, timeout)
        done.append(f"stopped serving {model_name}; the server ({where}) keeps serving {', '.join(others)}")
    return "\n".join(done)


def _stop(state: str, pid: int, timeout: float) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    for record in (state, _beside(state, ".skip")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(record)


def _wait_unloaded(rest_url: str, model_name: str, timeout: float) -> None:
    """Until the server no longer knows `model_name` (it reads its skip file at every poll)."""
    import requests

    deadline = time.time() + timeout
    while requests.get(f"{rest_url}/v1/models/{model_name}", timeout=5).status_code != 404:
        if time.time() > deadline:
            raise TimeoutError(f"the server at {rest_url} still serves {model_name} after {timeout:.0f}s")
        time.sleep(0.2)


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
    from trainer.fast_exit import skip_exit_collection

    skip_exit_collection()
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
