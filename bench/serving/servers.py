"""The servers the benchmark starts: the command of each configuration (`Server`), its process (stopped whatever
happens), its readiness, and a check of its answers against a direct model call.

Ours runs as `python -m pipelines serve`, KServe's as `python -m bench.kserve_peer`, the floor as
`python -m bench.floor_peer`; each on two free ports (REST and gRPC)."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import ROOT
from bench.serving.configurations import EXTRA_ARGS, ONE_THREAD, SERVERS
from bench.serving.payloads import MODEL_NAME, PREDICT_METHOD
from core.cpus import available_cpus


@dataclass
class Server:
    """One configuration's server: its command, REST URL (the model's), gRPC port, readiness check, protocols
    measured, and the environment it starts with."""

    cmd: list[str]
    rest_url: str
    grpc_port: int
    ready: Callable[[], bool]
    protocols: list[str]
    env: dict

    def target(self, protocol: str) -> str:
        """What a client of `protocol` calls: the REST predict URL, or the gRPC address."""
        return f"{self.rest_url}:predict" if protocol == "rest" else f"127.0.0.1:{self.grpc_port}"


def plan_servers(args, model_dir: str, base: Path) -> dict[str, Server]:
    """The servers of `args.only` (all when unset), in SERVERS' order, each with free ports: ours serves the model
    repository `base`, KServe's the SavedModel `model_dir`."""
    batching = [
        "--enable-batching",
        "--max-batch-size",
        str(args.max_batch_size),
        "--batch-timeout-ms",
        str(args.batch_timeout_ms),
        "--num-batch-threads",
        str(args.num_batch_threads),
    ]
    found = {}
    for key, config in SERVERS.items():
        if args.only and key not in args.only:
            continue
        http, grpc_port = free_port(), free_port()
        rest_url = f"http://127.0.0.1:{http}/v1/models/{MODEL_NAME}"
        if config.side == "kserve":
            cmd = [sys.executable, "-m", "bench.kserve_peer", model_dir, MODEL_NAME, str(http), str(grpc_port)]
            cmd += ["--request-logs"] if args.kserve_request_logs else []
            ready = kserve_ready(rest_url)
        elif config.side == "floor":
            threads_ = str(2 * available_cpus())  # ours' default gRPC workers without batching
            cmd = [sys.executable, "-m", "bench.floor_peer", MODEL_NAME, str(http), str(grpc_port), threads_]
            ready = ours_ready(rest_url)
        else:
            cmd = [
                sys.executable,
                "-m",
                "pipelines",
                "serve",
                "--model-base-path",
                str(base),
                "--model-name",
                MODEL_NAME,
                "--rest-port",
                str(http),
                "--grpc-port",
                str(grpc_port),
            ]
            cmd += batching if config.batching else []
            cmd += EXTRA_ARGS.get(key, [])
            ready = ours_ready(rest_url)
        env = ONE_THREAD if config.threads == "one" else {}
        found[key] = Server(cmd, rest_url, grpc_port, ready, config.protocols, env)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(cmd: list[str], log_path: Path, extra_env: dict | None = None):
    """Start a server process and yield it; always terminate it and wait for it (SIGKILL after 30 s)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_ready(proc: subprocess.Popen, ready, log_path: Path, label: str, timeout: float = 240) -> float:
    """Poll `ready()` until true; fail early when the process exits. Returns the seconds waited."""
    start = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{label} exited with {proc.returncode}:\n{_tail(log_path)}")
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{label} not ready after {timeout:.0f} s:\n{_tail(log_path)}")
        time.sleep(0.25)
    return time.monotonic() - start


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _get_json(url: str):
    import requests

    try:
        r = requests.get(url, timeout=2)
        return r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


def kserve_ready(url: str):
    return lambda: (_get_json(url) or {}).get("ready") is True


def ours_ready(url: str):
    return lambda: any(s.get("state") == "AVAILABLE" for s in (_get_json(url) or {}).get("model_version_status", []))


def check_rest(url: str, bodies: list, expected: list[np.ndarray]) -> bool:
    """Every body's answer has the expected class ids (row format: one object per instance)."""
    import requests

    with requests.Session() as s:
        got = [
            [
                p["class_id"]
                for p in s.post(url, data=b, headers={"Content-Type": "application/json"}, timeout=30).json()[
                    "predictions"
                ]
            ]
            for b in bodies
        ]
    return all(np.array_equal(np.array(g), e) for g, e in zip(got, expected, strict=True))


def check_grpc(target: str, bodies: list, expected: list[np.ndarray]) -> bool:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    with grpc.insecure_channel(target) as channel:
        predict = channel.unary_unary(PREDICT_METHOD, response_deserializer=predict_pb2.PredictResponse.FromString)
        got = [tf.make_ndarray(predict(b, timeout=30).outputs["class_id"]) for b in bodies]
    return all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
