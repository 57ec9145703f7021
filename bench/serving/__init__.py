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
