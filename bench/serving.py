"""Our TF-Serving-compatible server against KServe's Python model server, under one load generator.

    python -m bench.serving [--rounds 3] [--duration 3] [--warmup 0.5] [--clients 1 16] [--client-processes 4]
                            [--http-client http.client|requests] [--large-request 32] [--max-batch-size 32]
                            [--batch-timeout-ms 0] [--num-batch-threads 1] [--kserve-request-logs] [--epochs 3]
                            [--workdir DIR] [--quick]

The digits SavedModel (an 8×8 image an instance) is served by ours (`python -m pipelines serve`) and by a
`kserve.Model` hosting the same SavedModel (`bench/kserve_peer.py`, v1 protocol, request logs off as on ours), each
server its own process, all started before the first measurement. Each runs with TensorFlow's default thread pools
and with one TensorFlow thread (the same variables in both servers' environments); ours also with
`--enable-batching` at both settings, and with its model calls on a thread pool instead of its event loop. A last
server runs our two protocol stacks with no model (`bench/floor_peer.py`): what the transport alone costs.

One load generator for all: closed-loop clients in up to `--client-processes` processes (`http.client` keep-alive
connections for REST; for gRPC, a `PredictRequest` serialized once), one instance a request, and for ours without
batching also `--large-request` instances a request. Every server's answers are first checked against a direct
model call. Each configuration runs once per round (`--warmup` seconds unmeasured, then `--duration` seconds),
rounds interleaved so that drift in the machine's load hits every configuration alike; QPS is the median of the
rounds, latencies are pooled. Also measured: the model call alone, and the bytes of a request of 32 28×28 float32
images as REST JSON and as a gRPC `PredictRequest`.

Goals: ours ≥ 1.5× KServe's QPS at the most clients over REST, like for like (both without batching, the same
TensorFlow threads), at each thread setting; gRPC at least REST's QPS on ours; a gRPC request at most 0.3× the REST
request's bytes. The best configurations' ratio (each side's highest QPS at the most clients) is reported beside
the goal, not as it, since the two differ in more than the server. The load generator shares the CPUs with the
servers: on a small machine it takes CPU they would use.
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench import ROOT, train_digits
from bench.results import Recorder, result_path
from core.cpus import available_cpus

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODEL_NAME = "digits"
PREDICT_METHOD = "/tensorflow.serving.PredictionService/Predict"


# ---------------------------------------------------------------------------------------------------------------------
# Load generator (runs in spawned worker processes; imports only requests / grpc, never TensorFlow)


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
) -> dict:
    """Run `clients` closed-loop clients in `processes` worker processes; QPS, latency percentiles, errors."""
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
    return {
        "latencies_ms": np.array([x for p in parts for x in p[0]]) * 1000,
        "duration": duration,
        "errors": sum(p[1] for p in parts),
        "first_error": next((p[2] for p in parts if p[2]), ""),
        "server_cpu_s": server_cpu1 - server_cpu0,
        "client_cpu_s": sum(p[3] for p in parts),
        "client_processes": processes,
    }


def summarize(runs: list[dict]) -> dict:
    """Rounds of one configuration → median QPS (and each round's), pooled latency percentiles, CPU per request."""
    latencies = np.concatenate([r["latencies_ms"] for r in runs])
    n, seconds = len(latencies), sum(r["duration"] for r in runs)
    per_round = [round(len(r["latencies_ms"]) / r["duration"], 1) for r in runs]
    server_cpu, client_cpu = sum(r["server_cpu_s"] for r in runs), sum(r["client_cpu_s"] for r in runs)

    def pct(q):
        return round(float(np.percentile(latencies, q)), 3) if n else None

    return {
        "qps": round(float(np.median(per_round)), 1),
        "qps_rounds": per_round,
        "requests": int(n),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "mean_ms": round(float(latencies.mean()), 3) if n else None,
        "errors": int(sum(r["errors"] for r in runs)),
        "first_error": next((r["first_error"] for r in runs if r["first_error"]), ""),
        "server_cpu_ms_per_request": round(server_cpu * 1000 / n, 4) if n else None,
        "server_cpu_cores": round(server_cpu / seconds, 3),
        "client_cpu_ms_per_request": round(client_cpu * 1000 / n, 4) if n else None,
        "client_processes": runs[0]["client_processes"],
    }


# ---------------------------------------------------------------------------------------------------------------------
# Server processes


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


# ---------------------------------------------------------------------------------------------------------------------
# Requests


def rest_body(instances: np.ndarray) -> bytes:
    return json.dumps({"instances": instances.tolist()}).encode()


def grpc_request(images: np.ndarray, signature: str = "serving_default"):
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = MODEL_NAME, signature
    request.inputs["image"].CopyFrom(tf.make_tensor_proto(images))
    return request


def request_bytes(batch: int, size: int, seed: int = 0) -> dict:
    """REST JSON (as the seed client writes it) vs serialized gRPC PredictRequest, for random float32 images."""
    x = np.random.default_rng(seed).random((batch, size, size, 1), dtype=np.float32)
    rest = len(json.dumps({"signature_name": "serving_default", "instances": x.tolist()}))
    grpc_ = len(grpc_request(x).SerializeToString())
    return {
        "images": batch,
        "shape": list(x.shape),
        "dtype": "float32",
        "rest_json_bytes": rest,
        "grpc_bytes": grpc_,
        "raw_tensor_bytes": x.nbytes,
        "grpc_to_rest": round(grpc_ / rest, 4),
    }


# ---------------------------------------------------------------------------------------------------------------------


def prepare_model(workdir: Path, epochs: int) -> tuple[str, bool]:
    """Train the digits model into workdir (reused when workdir already holds it)."""

    model_dir = workdir / "job" / "model"
    if (model_dir / "saved_model.pb").exists() and (workdir / "data" / "stats.json").exists():
        return str(model_dir), True
    return train_digits(workdir, epochs), False


ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}  # TensorFlow reads them at start

# key: (label, side, TensorFlow threads, batching, protocols)
SERVERS = {
    "kserve": ("KServe", "kserve", "default", False, ["rest"]),
    "ours": ("ours", "ours", "default", False, ["rest", "grpc"]),
    "kserve_1t": ("KServe 1 TF thr", "kserve", "one", False, ["rest"]),
    "ours_1t": ("ours 1 TF thr", "ours", "one", False, ["rest", "grpc"]),
    "ours_batching": ("ours+batching", "ours", "default", True, ["rest", "grpc"]),
    "ours_batching_1t": ("ours+batch 1 thr", "ours", "one", True, ["rest"]),
    "ours_pool": ("ours, call pool", "ours", "default", False, ["rest"]),
    "floor": ("no model", "floor", "default", False, ["rest", "grpc"]),
}
# ours_pool: the model calls of overlapping requests on a pool of one thread per usable CPU (at least 2) instead of
# the event loop (serving.dispatch.default_threads), to show what the default's choice is worth on this machine.
# floor: our server's REST and gRPC stacks with no model (bench/floor_peer.py), what each protocol costs alone
POOL_THREADS = max(2, available_cpus())
EXTRA_ARGS = {"ours_pool": ["--request-threads", str(POOL_THREADS)]}
NAMES = {key: spec[0] for key, spec in SERVERS.items()}
LARGE_REQUESTS = ("ours", "ours_1t")  # also measured with --large-request instances a request, at the most clients
THREADS = {"default": "default (one per CPU)", "one": "1 intra-op, 1 inter-op"}
LIKE_FOR_LIKE = {"default_threads": ("ours", "kserve"), "one_tf_thread": ("ours_1t", "kserve_1t")}


def model_call_ms(model_dir: str, images: np.ndarray, one_thread: bool, calls: int, warmup: int) -> float:
    """Mean ms of a one-example `serving_default` call in a fresh process (TensorFlow's pools are fixed when it
    starts), after `warmup` unmeasured calls."""
    code = (
        "import sys, time, numpy as np, tensorflow as tf\n"
        "f = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "x = [tf.constant(v[None]) for v in np.load(sys.argv[2])]\n"
        "n, w = int(sys.argv[3]), int(sys.argv[4])\n"
        "for k in range(w): f(image=x[k % len(x)])['class_id'].numpy()\n"
        "t = time.perf_counter()\n"
        "for k in range(n): f(image=x[k % len(x)])['class_id'].numpy()\n"
        "print((time.perf_counter() - t) / n * 1000)\n"
    )
    with tempfile.NamedTemporaryFile(suffix=".npy") as f:
        np.save(f.name, images)
        env = dict(os.environ, **(ONE_THREAD if one_thread else {}))
        done = subprocess.run(
            [sys.executable, "-c", code, model_dir, f.name, str(calls), str(warmup)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
    return round(float(done.stdout.strip().splitlines()[-1]), 4)


def run(args, workdir: Path) -> dict:
    import tensorflow as tf

    from trainer import data

    started = time.time()
    model_dir, reused = prepare_model(workdir, args.epochs)
    base = workdir / "models"
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(model_dir, base / MODEL_NAME / "1")
    stats = data.load_stats(str(workdir / "data"))
    test = np.concatenate(
        [x.numpy() for x, _ in data.make_dataset(str(workdir / "data"), "test", stats, 256, training=False)]
    ).astype(np.float32)
    images = test[:64]
    expected = tf.saved_model.load(model_dir).signatures["serving_default"](image=tf.constant(images))
    expected = expected["class_id"].numpy()
    sizes = [1] + ([args.large_request] if args.large_request > 1 else [])
    picks = {
        n: [np.arange(k * n, (k + 1) * n) % len(images) for k in range(len(images) if n == 1 else 8)] for n in sizes
    }
    bodies = {
        (n, protocol): [
            rest_body(images[p]) if protocol == "rest" else grpc_request(images[p]).SerializeToString()
            for p in picks[n]
        ]
        for n in sizes
        for protocol in ("rest", "grpc")
    }
    expected_ids = {n: [expected[p] for p in picks[n]] for n in sizes}
    setup_seconds = time.time() - started
    calls = {
        threads: model_call_ms(model_dir, images, threads == "one", args.model_calls, args.model_calls // 10)
        for threads in THREADS
    }
    print(f"[bench] one-example model call (ms): {calls}", flush=True)

    batching = [
        "--enable-batching",
        "--max-batch-size",
        str(args.max_batch_size),
        "--batch-timeout-ms",
        str(args.batch_timeout_ms),
        "--num-batch-threads",
        str(args.num_batch_threads),
    ]
    servers = {}  # key: (cmd, REST URL, gRPC port, readiness check, protocols, environment)
    for key, (_label, side, threads, batched, protocols) in SERVERS.items():
        if args.only and key not in args.only:
            continue
        http, grpc_port = free_port(), free_port()
        rest_url = f"http://127.0.0.1:{http}/v1/models/{MODEL_NAME}"
        if side == "kserve":
            cmd = [sys.executable, "-m", "bench.kserve_peer", model_dir, MODEL_NAME, str(http), str(grpc_port)]
            cmd += ["--request-logs"] if args.kserve_request_logs else []
            ready = kserve_ready(rest_url)
        elif side == "floor":
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
            cmd += batching if batched else []
            cmd += EXTRA_ARGS.get(key, [])
            ready = ours_ready(rest_url)
        servers[key] = (cmd, rest_url, grpc_port, ready, protocols, ONE_THREAD if threads == "one" else {})
    configs = [(key, protocol) for key, (*_, protocols, _) in servers.items() for protocol in protocols]
    measured = [(k, p, 1, c) for c in args.clients for k, p in configs]  # (server, protocol, instances, clients)
    measured += [(k, p, n, max(args.clients)) for n in sizes[1:] for k, p in configs if k in LARGE_REQUESTS]
    raw: dict[tuple, list] = {m: [] for m in measured}
    correct: dict[tuple, bool | None] = {}  # None: the floor, no model to match
    startup = {}
    with contextlib.ExitStack() as stack:
        procs = {
            key: stack.enter_context(server_process(cmd, workdir / f"{key}.log", server[-1]))
            for key, (cmd, *server) in servers.items()
        }  # all started at once, idle while another is measured
        for key, (_cmd, rest_url, grpc_port, ready, protocols, _) in servers.items():
            startup[key] = round(wait_ready(procs[key], ready, workdir / f"{key}.log", NAMES[key]), 1)
            for protocol in protocols:
                target = f"{rest_url}:predict" if protocol == "rest" else f"127.0.0.1:{grpc_port}"
                if SERVERS[key][1] == "floor":  # no model: its fixed answer has nothing to match
                    correct[key, protocol, 1] = None
                    continue
                check = check_rest if protocol == "rest" else check_grpc
                for n in sizes if key in LARGE_REQUESTS else [1]:
                    correct[key, protocol, n] = check(target, bodies[n, protocol], expected_ids[n])
        print(
            f"[bench] servers ready (s): {startup}; class ids match: "
            f"{ {f'{k}/{p}/{n}': v for (k, p, n), v in correct.items()} }",
            flush=True,
        )
        for round_ in range(args.rounds):  # interleaved, so that drift in the machine's load hits every config
            for key, protocol, n, clients in measured:
                rest_url, grpc_port = servers[key][1], servers[key][2]
                target = f"{rest_url}:predict" if protocol == "rest" else f"127.0.0.1:{grpc_port}"
                m = load(
                    protocol,
                    target,
                    bodies[n, protocol],
                    clients,
                    args.client_processes,
                    args.warmup,
                    args.duration,
                    procs[key].pid,
                    args.http_client,
                )
                raw[key, protocol, n, clients].append(m)
                print(
                    f"[bench] round {round_ + 1}/{args.rounds} {NAMES[key]:<17}{protocol:<5}{n:>3} inst{clients:>3}"
                    f" clients: {len(m['latencies_ms']) / m['duration']:>8,.0f} QPS, errors {m['errors']}",
                    flush=True,
                )
    rows = [
        {
            "server": k,
            "side": SERVERS[k][1],
            "protocol": p,
            "instances": n,
            "clients": c,
            "batching": SERVERS[k][3],
            "tensorflow_threads": THREADS[SERVERS[k][2]],
            "class_ids_match": correct[k, p, n],
            **summarize(raw[k, p, n, c]),
        }
        for k, p, n, c in measured
    ]
    for row in rows:
        row["instances_per_s"] = round(row["qps"] * row["instances"], 1)
    bytes_cmp = request_bytes(args.bytes_batch, args.bytes_size)
    top = max(args.clients)
    comparisons = compare(rows, raw, args.clients)
    like = comparisons["like_for_like"]
    goal_pairs = [like[name][str(top)] for name in like if str(top) in like[name]]
    errors = sum(r["errors"] for r in rows)
    grpc_rest = grpc_vs_rest([r for r in rows if r["side"] == "ours"])
    return {
        "dataset": "builtin:digits",
        "epochs": args.epochs,
        "model_reused": reused,
        "model_input": [None, 8, 8, 1],
        "request_instances": sizes,
        "settings": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "rounds": args.rounds,
            "clients": args.clients,
            "client_processes": args.client_processes,
            "http_client": args.http_client,
            "client": "closed loop; requests.Session or http.client (REST) / grpc channel with pre-serialized "
            "PredictRequest (gRPC), one per client; bodies encoded once before the run",
            "servers": {
                key: {
                    "side": side,
                    "tensorflow_threads": THREADS[threads],
                    "batching": batched,
                    **({"request_threads": POOL_THREADS} if key in EXTRA_ARGS else {}),
                }
                for key, (_label, side, threads, batched, _protocols) in SERVERS.items()
                if key in servers
            },
            "ours_batching": {
                "max_batch_size": args.max_batch_size,
                "batch_timeout_ms": args.batch_timeout_ms,
                "num_batch_threads": args.num_batch_threads,
            },
            "kserve": {
                "workers": 1,
                "request_logs": args.kserve_request_logs,
                "model": "kserve.Model, sync predict calling serving_default",
            },
        },
        "versions": {
            p: _version(p)
            for p in (
                "kserve",
                "tensorflow",
                "grpcio",
                "uvicorn",
                "starlette",
                "fastapi",
                "requests",
                "orjson",
                "uvloop",
            )
        },
        "setup_seconds": round(setup_seconds, 1),
        "server_startup_seconds": startup,
        "seconds": round(time.time() - started, 1),
        "model_call_ms": {
            "default_threads": calls["default"],
            "one_tf_thread": calls["one"],
            "calls": args.model_calls,
        },
        "runs": rows,
        "like_for_like": like,
        "grpc_vs_rest": grpc_rest,
        "transport_floor": grpc_vs_rest([r for r in rows if r["side"] == "floor"]),
        "request_threads": comparisons["request_threads"],
        "best": comparisons["best"],
        "request_bytes": bytes_cmp,
        "goal": {
            "qps_clients": top,
            "qps_ratio_min": 1.5,
            "like_for_like_met": bool(goal_pairs) and all(c["met"] for c in goal_pairs),
            "like_for_like_ratios": {name: like[name][str(top)]["ratio"] for name in like if str(top) in like[name]},
            "best_ratio": comparisons["best"].get(str(top), {}).get("ratio"),
            "grpc_to_rest_bytes": bytes_cmp["grpc_to_rest"],
            "bytes_ratio_max": 0.3,
            "bytes_met": bytes_cmp["grpc_to_rest"] <= 0.3,
            "grpc_at_least_rest": {f"{c['server']}/{c['instances']}/{c['clients']}": c["met"] for c in grpc_rest},
            "errors": errors,
            "all_correct": all(r["class_ids_match"] for r in rows if r["side"] != "floor"),
        },
    }


def compare(rows: list[dict], raw: dict, client_counts: list[int]) -> dict:
    """Ours vs KServe over REST at each client count: like for like (no batching, the same TensorFlow threads), then
    each side's best configuration (highest median QPS), with the ratio of median QPS and each round's ratio; and
    ours with its model calls on the event loop against on a pool, at the most clients."""

    def row(server, clients):
        return next(
            (
                r
                for r in rows
                if (r["server"], r["protocol"], r["instances"], r["clients"]) == (server, "rest", 1, clients)
            ),
            None,
        )

    def pair(ours_key, kserve_key, clients) -> dict | None:
        o, k = row(ours_key, clients), row(kserve_key, clients)
        if not (o and k and k["qps"]):
            return None
        rounds = [
            round(len(a["latencies_ms"]) / len(b["latencies_ms"]), 3) if len(b["latencies_ms"]) else None
            for a, b in zip(raw[ours_key, "rest", 1, clients], raw[kserve_key, "rest", 1, clients])
        ]
        return {
            "ours": ours_key,
            "kserve": kserve_key,
            "ours_label": NAMES[ours_key],
            "kserve_label": NAMES[kserve_key],
            "ours_qps": o["qps"],
            "kserve_qps": k["qps"],
            "ours_p50_ms": o["p50_ms"],
            "kserve_p50_ms": k["p50_ms"],
            "ours_server_cpu_ms_per_request": o["server_cpu_ms_per_request"],
            "kserve_server_cpu_ms_per_request": k["server_cpu_ms_per_request"],
            "ratio": round(o["qps"] / k["qps"], 3),
            "ratio_per_round": rounds,
            "rounds_at_least_1_5": sum(1 for x in rounds if x is not None and x >= 1.5),
            "met": o["qps"] / k["qps"] >= 1.5,
        }

    like: dict[str, dict] = {}
    for name, (ours_key, kserve_key) in LIKE_FOR_LIKE.items():
        for clients in client_counts:
            c = pair(ours_key, kserve_key, clients)
            if c:
                like.setdefault(name, {})[str(clients)] = c
    best: dict[str, dict] = {}
    for clients in client_counts:
        candidates = {
            side: [
                r
                for r in rows
                if r["side"] == side and r["protocol"] == "rest" and r["instances"] == 1 and r["clients"] == clients
            ]
            for side in ("ours", "kserve")
        }
        if all(candidates.values()):
            o = max(candidates["ours"], key=lambda r: r["qps"])
            k = max(candidates["kserve"], key=lambda r: r["qps"])
            c = pair(o["server"], k["server"], clients)
            if c:
                c["ours_settings"] = {"batching": o["batching"], "tensorflow_threads": o["tensorflow_threads"]}
                c["kserve_settings"] = {"batching": k["batching"], "tensorflow_threads": k["tensorflow_threads"]}
                best[str(clients)] = c
    top = max(client_counts)
    inline, pool = row("ours", top), row("ours_pool", top)
    request_threads = (
        {
            "clients": top,
            "event_loop_qps": inline["qps"],
            "pool_qps": pool["qps"],
            "pool_threads": POOL_THREADS,
            "event_loop_to_pool": round(inline["qps"] / pool["qps"], 3),
        }
        if inline and pool and pool["qps"]
        else None
    )
    return {"like_for_like": like, "best": best, "request_threads": request_threads}


def grpc_vs_rest(rows: list[dict]) -> list[dict]:
    """Ours over gRPC against ours over REST, the same server, request size and clients: the ratio of median QPS."""
    out = []
    for g in rows:
        if g["protocol"] != "grpc":
            continue
        same = ("server", "instances", "clients")
        r = next((r for r in rows if r["protocol"] == "rest" and all(r[k] == g[k] for k in same)), None)
        if r and r["qps"]:
            out.append(
                {
                    **{k: g[k] for k in same},
                    "label": NAMES[g["server"]],
                    "grpc_qps": g["qps"],
                    "rest_qps": r["qps"],
                    "grpc_server_cpu_ms_per_request": g["server_cpu_ms_per_request"],
                    "rest_server_cpu_ms_per_request": r["server_cpu_ms_per_request"],
                    "grpc_client_cpu_ms_per_request": g["client_cpu_ms_per_request"],
                    "rest_client_cpu_ms_per_request": r["client_cpu_ms_per_request"],
                    "ratio": round(g["qps"] / r["qps"], 3),
                    "met": g["qps"] >= r["qps"],
                }
            )
    return out


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def print_report(r: dict) -> None:
    s = r["settings"]
    b = s["ours_batching"]
    print(
        f"\nServing {r['dataset']} ({' or '.join(map(str, r['request_instances']))} instances/request), {s['rounds']} interleaved rounds of {s['warmup_s']} s "
        f"warm-up + {s['duration_s']} s measured (QPS: median of rounds, latency: pooled), client processes ≤ "
        f"{s['client_processes']}, REST client {s['http_client']}; batching: max {b['max_batch_size']}, timeout "
        f"{b['batch_timeout_ms']} ms, {b['num_batch_threads']} thread(s); kserve {r['versions']['kserve']}, "
        f"tensorflow {r['versions']['tensorflow']}"
    )
    print(
        f"model call, one example: {r['model_call_ms']['default_threads']:.3f} ms with TensorFlow's default pools, "
        f"{r['model_call_ms']['one_tf_thread']:.3f} ms on one thread"
    )
    print(
        f"{'server':<17}{'proto':<6}{'inst':>5}{'clients':>8}{'QPS':>9}{'rounds min-max':>16}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'errors':>8}{'srv ms/req':>11}{'srv cores':>10}{'cli ms/req':>11}{'correct':>9}"
    )
    for row in r["runs"]:
        spread = f"{min(row['qps_rounds']):,.0f}-{max(row['qps_rounds']):,.0f}"
        print(
            f"{NAMES[row['server']]:<17}{row['protocol']:<6}{row['instances']:>5}{row['clients']:>8}{row['qps']:>9,.0f}{spread:>16}"
            f"{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['errors']:>8}{row['server_cpu_ms_per_request']:>11.3f}"
            f"{row['server_cpu_cores']:>10.2f}{row['client_cpu_ms_per_request']:>11.3f}"
            f"{str(row['class_ids_match']):>9}"
        )
    for row in r["runs"]:
        if row["errors"]:
            print(
                f"errors in {NAMES[row['server']]} {row['protocol']} {row['instances']} instances {row['clients']} "
                f"clients: {row['first_error']}"
            )
    q = r["request_bytes"]
    print(
        f"request bytes, {q['images']} random {q['shape'][1]}×{q['shape'][2]} float32 images: REST JSON "
        f"{q['rest_json_bytes']:,} B, gRPC PredictRequest {q['grpc_bytes']:,} B (raw tensor {q['raw_tensor_bytes']:,}"
        f" B) → gRPC/REST {q['grpc_to_rest']:.3f}"
    )

    def line(c: dict) -> str:
        return (
            f"{c['ours_label']} {c['ours_qps']:,.0f} / {c['kserve_label']} {c['kserve_qps']:,.0f} = {c['ratio']:.2f}× "
            f"(per round: {', '.join(f'{x:.2f}' for x in c['ratio_per_round'] if x is not None)})"
        )

    g = r["goal"]
    top = str(g["qps_clients"])
    print(f"like for like (REST, no batching, the same TensorFlow threads), {top} clients; goal ≥ 1.5×:")
    for name, by_clients in r["like_for_like"].items():
        if top in by_clients:
            c = by_clients[top]
            print(f"  {name.replace('_', ' ')}: {line(c)} ... {'PASS' if c['met'] else 'FAIL'}")
    if top in r["best"]:
        print(f"each side's best configuration (REST, {top} clients; not the goal): {line(r['best'][top])}")
    print("gRPC against REST (ours, the same server, request size and clients); goal ≥ 1×:")
    for c in r["grpc_vs_rest"]:
        print(
            f"  {c['label']}, {c['instances']} instance(s), {c['clients']} clients: {c['grpc_qps']:,.0f} / "
            f"{c['rest_qps']:,.0f} QPS = {c['ratio']:.2f}× ... {'PASS' if c['met'] else 'FAIL'}"
        )
    print("the transports alone (no model: bench/floor_peer.py), gRPC against REST:")
    for c in r["transport_floor"]:
        print(
            f"  {c['clients']} clients: {c['grpc_qps']:,.0f} / {c['rest_qps']:,.0f} QPS = {c['ratio']:.2f}×; server CPU "
            f"{c['grpc_server_cpu_ms_per_request']:.3f} / {c['rest_server_cpu_ms_per_request']:.3f} ms a request"
        )
    if t := r["request_threads"]:
        print(
            f"ours' model calls on the event loop (the default here) against a pool of {t['pool_threads']} threads, "
            f"REST, {t['clients']} clients: {t['event_loop_qps']:,.0f} / {t['pool_qps']:,.0f} QPS = "
            f"{t['event_loop_to_pool']:.2f}×"
        )
    print(f"goal gRPC ≤ 0.3× REST bytes: {g['grpc_to_rest_bytes']:.3f}× ... {'PASS' if g['bytes_met'] else 'FAIL'}")
    print(
        f"errors: {g['errors']} ({'PASS' if g['errors'] == 0 else 'FAIL'}); class ids match a direct call: "
        f"{g['all_correct']}; run time {r['seconds']:.0f} s"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per configuration and round")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each measurement")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over all configurations (QPS: median)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    p.add_argument("--client-processes", type=int, default=4, help="load-generator processes (≤ clients)")
    p.add_argument(
        "--http-client",
        choices=["http.client", "requests"],
        default="http.client",
        help="REST client of the load generator; requests.Session costs ~1 ms of client CPU per request "
        "(about 4× http.client's, more than the servers' own), which on a small machine takes the CPU "
        "the servers would use and pulls every REST QPS towards the same value",
    )
    p.add_argument(
        "--large-request",
        type=int,
        default=32,
        help="instances a request in the request-size comparison (ours, REST and gRPC, the most clients; 1: none)",
    )
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=0.0,
        help="0 (TF Serving's CPU starting point): a batch takes what is queued when the thread is free",
    )
    p.add_argument("--num-batch-threads", type=int, default=1)
    p.add_argument(
        "--kserve-request-logs",
        action="store_true",
        help="keep KServe's per-request access/latency logs (its default; off here as on ours)",
    )
    p.add_argument("--only", nargs="+", choices=list(SERVERS), help="servers to run")
    p.add_argument("--model-calls", type=int, default=3000, help="timed one-example model calls per thread setting")
    p.add_argument("--bytes-batch", type=int, default=32)
    p.add_argument("--bytes-size", type=int, default=28)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="keep the data, model and server logs here (reused when present)")
    p.add_argument(
        "--quick", action="store_true", help="1 round of 0.2 + 0.5 s, 1 and 4 clients, 1 epoch: checks that it works"
    )
    p.add_argument("--output", type=Path, help="JSON results [bench/results/serving.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup, args.clients = 1, 0.5, 0.2, [1, 4]
        args.client_processes, args.epochs, args.model_calls = 2, 1, 300
    recorder = Recorder("serving", args, quick=args.quick)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so that every server process is stopped
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
            result = run(args, Path(tmp))
    print_report(result)
    recorder.save(result, result_path("serving", args.quick, args.output))


if __name__ == "__main__":
    main()
