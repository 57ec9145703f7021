"""The statistics: one configuration's rounds summarized (median QPS, pooled latency percentiles, CPU a request),
ours against KServe (like for like and each side's best), and gRPC against REST on the same server."""

import numpy as np

from bench.serving.configurations import LIKE_FOR_LIKE, NAMES, POOL_THREADS, Point
from bench.serving.load import Measurement


def summarize(runs: list[Measurement]) -> dict:
    """Rounds of one configuration → median QPS (and each round's), pooled latency percentiles, CPU per request."""
    latencies = np.concatenate([r.latencies_ms for r in runs])
    n, seconds = len(latencies), sum(r.duration for r in runs)
    per_round = [round(len(r.latencies_ms) / r.duration, 1) for r in runs]
    server_cpu, client_cpu = sum(r.server_cpu_s for r in runs), sum(r.client_cpu_s for r in runs)

    def pct(q):
        return round(float(np.percentile(latencies, q)), 3) if n else None

    return {
        "qps": round(float(np.median(per_round)), 1),
        "qps_rounds": per_round,
        "requests": int(n),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "mean_ms": round(float(latencies.mean()), 3) if n else None,
        "errors": int(sum(r.errors for r in runs)),
        "first_error": next((r.first_error for r in runs if r.first_error), ""),
        "server_cpu_ms_per_request": round(server_cpu * 1000 / n, 4) if n else None,
        "server_cpu_cores": round(server_cpu / seconds, 3),
        "client_cpu_ms_per_request": round(client_cpu * 1000 / n, 4) if n else None,
        "client_processes": runs[0].client_processes,
    }


def compare(rows: list[dict], raw: dict[Point, list[Measurement]], client_counts: list[int]) -> dict:
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
            round(len(a.latencies_ms) / len(b.latencies_ms), 3) if len(b.latencies_ms) else None
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
