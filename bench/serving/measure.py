"""The measurement: the model and the requests prepared, every server started at once and its answers checked, then
each configuration measured once per round, rounds interleaved (`measure`, its figures in `Measured`)."""

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.serving.configurations import LARGE_REQUESTS, NAMES, SERVERS, THREADS, Point
from bench.serving.load import Measurement, load
from bench.serving.model import model_call_ms, prepare_model
from bench.serving.payloads import MODEL_NAME, grpc_request, rest_body
from bench.serving.servers import Server, check_grpc, check_rest, plan_servers, server_process, wait_ready

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@dataclass
class Measured:
    """What a run measured: each point's rounds (`raw`, in the order measured), whether each server's answers
    match a direct model call (None: the floor, no model to match), the servers' start-up seconds, the one-example
    model call's ms per thread setting, and the run's own facts (its start, its setup seconds, the request sizes,
    whether the model was reused)."""

    started: float
    model_reused: bool
    sizes: list[int]
    setup_seconds: float
    model_call_ms: dict[str, float]
    servers: dict[str, Server]
    startup: dict[str, float]
    correct: dict[tuple[str, str, int], bool | None]
    points: list[Point]
    raw: dict[Point, list[Measurement]]


def measure(args, workdir: Path) -> Measured:
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

    servers = plan_servers(args, model_dir, base)
    configs = [(key, protocol) for key, server in servers.items() for protocol in server.protocols]
    points: list[Point] = [(k, p, 1, c) for c in args.clients for k, p in configs]
    points += [(k, p, n, max(args.clients)) for n in sizes[1:] for k, p in configs if k in LARGE_REQUESTS]
    raw: dict[Point, list[Measurement]] = {m: [] for m in points}
    correct: dict[tuple[str, str, int], bool | None] = {}  # None: the floor, no model to match
    startup = {}
    with contextlib.ExitStack() as stack:
        procs = {
            key: stack.enter_context(server_process(server.cmd, workdir / f"{key}.log", server.env))
            for key, server in servers.items()
        }  # all started at once, idle while another is measured
        for key, server in servers.items():
            startup[key] = round(wait_ready(procs[key], server.ready, workdir / f"{key}.log", NAMES[key]), 1)
            for protocol in server.protocols:
                target = server.target(protocol)
                if SERVERS[key].side == "floor":  # no model: its fixed answer has nothing to match
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
            for key, protocol, n, clients in points:
                m = load(
                    protocol,
                    servers[key].target(protocol),
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
                    f" clients: {len(m.latencies_ms) / m.duration:>8,.0f} QPS, errors {m.errors}",
                    flush=True,
                )
    return Measured(
        started=started,
        model_reused=reused,
        sizes=sizes,
        setup_seconds=setup_seconds,
        model_call_ms=calls,
        servers=servers,
        startup=startup,
        correct=correct,
        points=points,
        raw=raw,
    )
