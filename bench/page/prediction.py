"""The renderers of the prediction side's benchmarks: serving (our model server against KServe), batch_predict."""

from __future__ import annotations

from bench.page.format import NONE, Blocks, Result, listing, met, number, plain, seconds, significant, table, times, yes


def serving(result: Result) -> Blocks:
    servers, goal = result["settings"]["servers"], result["goal"]
    sides = {"ours": "ours", "kserve": "KServe", "floor": "no model"}

    def server(name: str) -> str:
        settings = servers[name]
        label = [sides[settings["side"]]]
        label += ["batching"] if settings["batching"] else []
        label += [f"calls on {settings['request_threads']} threads"] if "request_threads" in settings else []
        return ", ".join(label)

    def threads(name: str) -> str:
        return str(servers[name]["tensorflow_threads"])

    def by_clients(entries: dict[str, Result]) -> list[tuple[int, Result]]:
        return sorted((int(clients), entry) for clients, entry in entries.items())

    def rounds(entry: Result) -> str:
        return f"**{times(entry['ratio'])}** ({listing(times(r) for r in entry['ratio_per_round'])})"

    def grpc_goal(entry: Result) -> str:
        verdict = goal["grpc_at_least_rest"].get(f"{entry['server']}/{entry['instances']}/{entry['clients']}")
        return NONE if verdict is None else met(verdict)  # the transports alone are not the goal's

    like = [
        [
            threads(entry["ours"]),
            number(clients),
            number(entry["kserve_qps"]),
            number(entry["ours_qps"]),
            rounds(entry),
            f"{number(entry['kserve_p50_ms'], 2)} / {number(entry['ours_p50_ms'], 2)}",
            f"{number(entry['kserve_server_cpu_ms_per_request'], 2)} / {number(entry['ours_server_cpu_ms_per_request'], 2)}",
            met(entry["met"]) if clients == goal["qps_clients"] else NONE,
        ]
        for setting in result["like_for_like"].values()
        for clients, entry in by_clients(setting)
    ]
    like_header = [
        "TensorFlow threads",
        "clients",
        "KServe QPS",
        "ours QPS",
        "ours / KServe (rounds)",
        "p50 ms, KServe / ours",
        "server CPU ms a request, KServe / ours",
        f"goal ≥ {plain(goal['qps_ratio_min'])}×",
    ]
    best = [
        [
            number(clients),
            f"{server(entry['ours'])}; {threads(entry['ours'])}",
            f"{server(entry['kserve'])}; {threads(entry['kserve'])}",
            f"{number(entry['ours_qps'])} / {number(entry['kserve_qps'])}",
            rounds(entry),
        ]
        for clients, entry in by_clients(result["best"])
    ]
    protocols = [
        [
            server(entry["server"]),
            threads(entry["server"]),
            number(entry["instances"]),
            number(entry["clients"]),
            number(entry["grpc_qps"]),
            number(entry["rest_qps"]),
            f"**{times(entry['ratio'])}**",
            f"{number(entry['grpc_server_cpu_ms_per_request'], 2)} / {number(entry['rest_server_cpu_ms_per_request'], 2)}",
            grpc_goal(entry),
        ]
        for entry in [*result["grpc_vs_rest"], *result["transport_floor"]]
    ]
    protocols_header = [
        "server",
        "TensorFlow threads",
        "instances a request",
        "clients",
        "gRPC QPS",
        "REST QPS",
        "gRPC / REST",
        "server CPU ms a request, gRPC / REST",
        "goal gRPC ≥ REST",
    ]
    runs = [
        [
            server(run["server"]),
            threads(run["server"]),
            run["protocol"],
            number(run["instances"]),
            number(run["clients"]),
            number(run["qps"]),
            number(run["p50_ms"], 2),
            number(run["p99_ms"], 2),
            number(run["server_cpu_ms_per_request"], 2),
            number(run["client_cpu_ms_per_request"], 2),
        ]
        for run in result["runs"]
    ]
    runs_header = [
        "server",
        "TensorFlow threads",
        "protocol",
        "instances a request",
        "clients",
        "QPS",
        "p50 ms",
        "p99 ms",
        "server CPU ms a request",
        "client CPU ms a request",
    ]
    calls, pool, request = result["model_call_ms"], result["request_threads"], result["request_bytes"]
    return [
        f"Goals: ours ≥ {plain(goal['qps_ratio_min'])}× KServe's QPS at {number(goal['qps_clients'])} clients, like "
        f"for like: {met(goal['like_for_like_met'])}; a gRPC request at most {plain(goal['bytes_ratio_max'])}× the "
        f"REST request's bytes: {met(goal['bytes_met'])}; gRPC at least REST's QPS: per configuration, below. "
        f"Errors: {number(goal['errors'])}; every server's answers as a direct model call's: {yes(goal['all_correct'])}.",
        "Like for like (REST, no batching, one instance a request):",
        table(like_header, like),
        "Each side's best configuration (the highest QPS over REST; not the goal):",
        table(["clients", "ours", "KServe", "QPS, ours / KServe", "ratio (rounds)"], best),
        "gRPC against REST on ours, and on the transports alone (no model):",
        table(protocols_header, protocols),
        f"Request bytes of {number(request['images'])} images of {'×'.join(map(str, request['shape'][1:]))} "
        f"{request['dtype']}: {number(request['rest_json_bytes'])} B as REST JSON, {number(request['grpc_bytes'])} B as "
        f"a gRPC `PredictRequest` (the raw tensor: {number(request['raw_tensor_bytes'])} B): "
        f"**{times(request['grpc_to_rest'])}** (goal ≤ {plain(goal['bytes_ratio_max'])}×: {met(goal['bytes_met'])}). "
        f"Ours' model calls on its event loop against a pool of {number(pool['pool_threads'])} threads (REST, "
        f"{number(pool['clients'])} clients): {number(pool['event_loop_qps'])} against {number(pool['pool_qps'])} QPS, "
        f"{times(pool['event_loop_to_pool'])}. The model call alone: {significant(calls['default_threads'])} ms with "
        f"the default threads, {significant(calls['one_tf_thread'])} ms with one ({number(calls['calls'])} calls).",
        "Every configuration:",
        table(runs_header, runs),
        f"Versions: {listing(f'{name} {version}' for name, version in result['versions'].items())}.",
    ]


def batch_predict(result: Result) -> Blocks:
    rows = [
        [
            number(run["files"]),
            run["parsing"],
            number(run["instances_per_second"]),
            f"**{times(run['ratio'])}**",
            times(run["ratio_to_one_thread_predict"]),
            f"{number(run['instances_per_second_with_load'])}; {times(run['ratio_with_load'])}",
            f"{seconds(run['seconds_median'], 3)}",
            number(run["failed"]),
            yes(run["class_ids_match"]),
        ]
        for run in result["batch_predict"]
    ]
    header = [
        "files",
        "parsing",
        "instances/s",
        "vs `model.predict`",
        "vs `model.predict`, one TF thread",
        "with the model load: instances/s; vs `model.predict`",
        "seconds (median)",
        "failed",
        "class ids match",
    ]
    return [
        f"{number(result['instances'])} instances ({result['instances_format']}, {result['dataset']}), batch size "
        f"{number(result['batch_size'])}, medians of {number(result['repeats'])} runs; the model load, "
        f"{seconds(result['model_load_seconds'], 3)}, is left out of the rates. `model.predict`: "
        f"{number(result['model_predict_instances_per_second'])} instances/s with TensorFlow's default threads (runs: "
        f"{listing(number(r) for r in result['model_predict_instances_per_second_runs'])}), "
        f"{number(result['model_predict_one_tensorflow_thread_instances_per_second'])} with one TensorFlow thread "
        f"(runs: {listing(number(r) for r in result['model_predict_one_tensorflow_thread_runs'])}).",
        table(header, rows),
        f"Goal: {result['goal']} (instances/s against `model.predict`'s).",
    ]
