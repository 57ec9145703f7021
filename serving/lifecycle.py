"""The local server's lifecycle, for the deploy step and `stop-serving`: one detached `python -m serving` per model
repository and ports, serving every model of the repository, found again by later runs through its record.

The state folder (`$TFPIPE_SERVING_STATE`, default `~/.cache/tfpipe/serving`) holds, per server, its record (the
ready file the server writes once it serves: pid, REST URL, gRPC target), its log (`.log`, appended) and its skip
file (`.skip`: the models it must not serve, one a line, which the server reads at every poll). A record whose
process is gone or does not answer names no server.
"""

from __future__ import annotations

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

from core import names
from serving.models import Transition
from serving.repository import model_names, read_names
from serving.tls import DEFAULT_CLIENT_TLS, ClientTls


class ServerError(RuntimeError):
    """The server did not start; the message says why (its error line, or its log's tail)."""


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
    except requests.exceptions.SSLError:
        pass  # a TLS server whose certificate or client check this probe does not pass: it answered
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


def launch_server(
    base: str,
    rest_port: int,
    grpc_port: int,
    ssl_config_file: str = "",
    version_policy: Transition = "availability-preserving",
) -> Launched:
    """Start a detached server for the whole repository (own session and log file: it must outlive the step), over
    TLS with `ssl_config_file` (TF Serving's SSLConfig, `serving.tls`), replacing versions with `version_policy`
    (its `--aspired-version-policy`)."""
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
        "--aspired-version-policy",
        version_policy,
    ] + (["--ssl-config-file", ssl_config_file] if ssl_config_file else [])
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
        raise ServerError(f"the model server did not start (exit code {code}): {_why(launched)}")
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


def reuse_server(
    base: str,
    rest_port: int,
    grpc_port: int,
    model_name: str,
    version_policy: Transition = "availability-preserving",
) -> dict | None:
    """The live server recorded for this repository and these ports, told to serve `model_name` again if
    `stop-serving --model-name` had stopped it; None when no such server runs. ServerError when it replaces
    versions with another aspired-version policy than `version_policy` (it serves every model of the repository:
    not restarted behind their back)."""
    state = state_file(base, rest_port, grpc_port)
    if (server := _recorded(state)) is None:
        return None
    running = server.get("aspired_version_policy", "availability-preserving")  # records older than the option
    if running != version_policy:
        raise ServerError(
            f"the server for {base} (pid {server['pid']}, REST {server['rest_url']}) replaces versions "
            f"{running}, not {version_policy}: stop it (python -m pipelines stop-serving --model-base-path {base}) "
            f"or set serving_version_policy: {running}"
        )
    if model_name in (skipped := _skipped(state)):
        _write_skipped(state, skipped - {model_name})
    return server


def stop_server(base: str, model_name: str = "", tls: ClientTls = DEFAULT_CLIENT_TLS, timeout: float = 30) -> str:
    """Stop the servers recorded for this repository, or only their serving of `model_name` (a server stops with its
    last model; `tls`: how to reach a TLS server to see it unloaded); says what it did, "" when none was running. ValueError: no such model; TimeoutError: a server
    still serves it after `timeout`, InvalidName: `model_name` is no model name."""
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
        _wait_unloaded(server["rest_url"], model_name, tls, timeout)
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


def _wait_unloaded(rest_url: str, model_name: str, tls: ClientTls, timeout: float) -> None:
    """Until the server no longer knows `model_name` (it reads its skip file at every poll)."""
    import requests

    deadline = time.time() + timeout
    url = f"{rest_url}/v1/models/{model_name}"
    while requests.get(url, timeout=5, **tls.requests_options()).status_code != 404:
        if time.time() > deadline:
            raise TimeoutError(f"the server at {rest_url} still serves {model_name} after {timeout:.0f}s")
        time.sleep(0.2)
