"""The result record, the JSON that bench/results/serving.json holds: the settings, the versions, each measured
configuration's figures, the comparisons and the goals met or not."""

import time
from importlib import metadata

from bench.serving.configurations import EXTRA_ARGS, POOL_THREADS, SERVERS, THREADS
from bench.serving.measure import Measured
from bench.serving.payloads import request_bytes
from bench.serving.stats import compare, grpc_vs_rest, summarize


def record(args, measured: Measured) -> dict:
    """The run's record from its measurements; the request bytes are measured here."""
    raw, correct = measured.raw, measured.correct
    rows = [
        {
            "server": k,
            "side": SERVERS[k].side,
            "protocol": p,
            "instances": n,
            "clients": c,
            "batching": SERVERS[k].batching,
            "tensorflow_threads": THREADS[SERVERS[k].threads],
            "class_ids_match": correct[k, p, n],
            **summarize(raw[k, p, n, c]),
        }
        for k, p, n, c in measured.points
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
        "model_reused": measured.model_reused,
        "model_input": [None, 8, 8, 1],
        "request_instances": measured.sizes,
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
                    "side": config.side,
                    "tensorflow_threads": THREADS[config.threads],
                    "batching": config.batching,
                    **({"request_threads": POOL_THREADS} if key in EXTRA_ARGS else {}),
                }
                for key, config in SERVERS.items()
                if key in measured.servers
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
        "setup_seconds": round(measured.setup_seconds, 1),
        "server_startup_seconds": measured.startup,
        "seconds": round(time.time() - measured.started, 1),
        "model_call_ms": {
            "default_threads": measured.model_call_ms["default"],
            "one_tf_thread": measured.model_call_ms["one"],
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


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""
