"""The run's report on stdout: the settings, a table of every measured configuration, the request bytes, the
comparisons and each goal met or not, from the result record."""

from bench.serving.configurations import NAMES


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
