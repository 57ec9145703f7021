"""The load generator: closed-loop clients in spawned worker processes (they import only requests / grpc, never
TensorFlow), and the measurement of one configuration in one round (`Measurement`)."""

import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.serving.payloads import PREDICT_METHOD


@dataclass
class Measurement:
    """One configuration in one round: the latencies of the requests in the measured window, the window's seconds,
    the errors (and the first one's message), the CPU seconds of the server and of the clients in the window."""

    latencies_ms: np.ndarray
    duration: float
    errors: int
    first_error: str
    server_cpu_s: float
    client_cpu_s: float
    client_processes: int


def _client(
    kind: str,
    target: str,
    bodies: list,
    offset: int,
    go: threading.Event,
    window: list,
    out: dict,
    http_client: str = "requests",
) -> None:
    """One closed-loop client: send requests back to back until window[1]; keep latencies of those in the window."""
    latencies, errors, first_error = [], 0, ""
    if kind == "rest" and http_client == "http.client":
        import http.client
        from urllib.parse import urlsplit

        url = urlsplit(target)
        connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
        headers = {"Content-Type": "application/json"}

        def call(body):
            connection.request("POST", url.path, body, headers)
            r = connection.getresponse()
            content = r.read()
            if r.status != 200 or b'"class_id"' not in content:
                raise RuntimeError(f"HTTP {r.status}: {content[:200]!r}")
    elif kind == "rest":
        import requests

        session = requests.Session()
        headers = {"Content-Type": "application/json"}

        def call(body):
            r = session.post(target, data=body, headers=headers, timeout=30)
            if r.status_code != 200 or b'"class_id"' not in r.content:
                raise RuntimeError(f"HTTP {r.status_code}: {r.content[:200]!r}")
    else:
        import grpc

        channel = grpc.insecure_channel(target)
        predict = channel.unary_unary(PREDICT_METHOD)  # bytes in, bytes out: the bodies are serialized already

        def call(body):
            if b"class_id" not in predict(body, timeout=30):
                raise RuntimeError("the PredictResponse has no class_id output")

    try:
        call(bodies[offset % len(bodies)])  # connect before the clock starts
    except Exception as e:  # noqa: BLE001 (reported as an error of this run)
        errors, first_error = 1, f"{type(e).__name__}: {e}"[:300]
    out["connected"].release()
    go.wait()
    start, end = window
    i = offset
    while True:
        t0 = time.monotonic()
        if t0 >= end:
            break
        try:
            call(bodies[i % len(bodies)])
        except Exception as e:  # noqa: BLE001
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"[:300]
            time.sleep(0.01)
            continue
        finally:
            i += 1
        t1 = time.monotonic()
        if t0 >= start and t1 <= end:
            latencies.append(t1 - t0)
    with out["lock"]:
        out["latencies"].extend(latencies)
        out["errors"] += errors
        out["first_error"] = out["first_error"] or first_error


def _worker(
    kind, target, bodies, threads, first_client, warmup, duration, ready, go, start_at, results, http_client
) -> None:
    """A load-generator process: `threads` clients; reports (latencies, errors, first error, CPU s in window)."""
    out: dict[str, Any] = {
        "latencies": [],
        "errors": 0,
        "first_error": "",
        "lock": threading.Lock(),
        "connected": threading.Semaphore(0),
    }
    go_local, window = threading.Event(), [0.0, 0.0]
    clients = [
        threading.Thread(
            target=_client,
            args=(kind, target, bodies, first_client + k, go_local, window, out, http_client),
            daemon=True,
        )
        for k in range(threads)
    ]
    for c in clients:
        c.start()
    for _ in clients:
        out["connected"].acquire()
    ready.put(os.getpid())
    go.wait()
    window[0] = start_at.value + warmup
    window[1] = window[0] + duration
    go_local.set()
    time.sleep(max(0.0, window[0] - time.monotonic()))
    cpu0 = time.process_time()
    time.sleep(max(0.0, window[1] - time.monotonic()))
    cpu1 = time.process_time()
    for c in clients:
        c.join(60)
    results.put((out["latencies"], out["errors"], out["first_error"], cpu1 - cpu0))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(
    kind: str,
    target: str,
    bodies: list,
    clients: int,
    processes: int,
    warmup: float,
    duration: float,
    server_pid: int,
    http_client: str = "requests",
) -> Measurement:
    """Run `clients` closed-loop clients in `processes` worker processes; their latencies, errors and CPU time."""
    ctx = multiprocessing.get_context("spawn")
    processes = max(1, min(processes, clients))
    ready, results, go, start_at = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    split = [clients // processes + (1 if k < clients % processes else 0) for k in range(processes)]
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                kind,
                target,
                bodies,
                n,
                sum(split[:k]) * 7,
                warmup,
                duration,
                ready,
                go,
                start_at,
                results,
                http_client,
            ),
            daemon=True,
        )
        for k, n in enumerate(split)
    ]
    try:
        for w in workers:
            w.start()
        for _ in workers:
            ready.get(timeout=120)
        start_at.value = time.monotonic() + 0.05
        go.set()
        time.sleep(max(0.0, start_at.value + warmup - time.monotonic()))
        server_cpu0 = _cpu_seconds(server_pid)
        time.sleep(max(0.0, start_at.value + warmup + duration - time.monotonic()))
        server_cpu1 = _cpu_seconds(server_pid)
        parts = [results.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(30)
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
                w.join(5)
    return Measurement(
        latencies_ms=np.array([x for p in parts for x in p[0]]) * 1000,
        duration=duration,
        errors=sum(p[1] for p in parts),
        first_error=next((p[2] for p in parts if p[2]), ""),
        server_cpu_s=server_cpu1 - server_cpu0,
        client_cpu_s=sum(p[3] for p in parts),
        client_processes=processes,
    )
