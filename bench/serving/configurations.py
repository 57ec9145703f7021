"""What the benchmark compares: the servers (`SERVERS`, each a `ServerConfig`), their TensorFlow thread settings
and extra flags, the pairs compared like for like, the servers also measured with large requests, and the key of a
measured configuration (`Point`)."""

from typing import NamedTuple

from core.cpus import available_cpus

Point = tuple[str, str, int, int]  # a measured configuration: (server, protocol, instances a request, clients)


class ServerConfig(NamedTuple):
    label: str
    side: str  # kserve | ours | floor
    threads: str  # a key of THREADS
    batching: bool
    protocols: list[str]


ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}  # TensorFlow reads them at start

SERVERS = {
    "kserve": ServerConfig("KServe", "kserve", "default", False, ["rest"]),
    "ours": ServerConfig("ours", "ours", "default", False, ["rest", "grpc"]),
    "kserve_1t": ServerConfig("KServe 1 TF thr", "kserve", "one", False, ["rest"]),
    "ours_1t": ServerConfig("ours 1 TF thr", "ours", "one", False, ["rest", "grpc"]),
    "ours_batching": ServerConfig("ours+batching", "ours", "default", True, ["rest", "grpc"]),
    "ours_batching_1t": ServerConfig("ours+batch 1 thr", "ours", "one", True, ["rest"]),
    "ours_pool": ServerConfig("ours, call pool", "ours", "default", False, ["rest"]),
    "floor": ServerConfig("no model", "floor", "default", False, ["rest", "grpc"]),
}
# ours_pool: the model calls of overlapping requests on a pool of one thread per usable CPU (at least 2) instead of
# the event loop (serving.dispatch.default_threads), to show what the default's choice is worth on this machine.
# floor: our server's REST and gRPC stacks with no model (bench/floor_peer.py), what each protocol costs alone
POOL_THREADS = max(2, available_cpus())
EXTRA_ARGS = {"ours_pool": ["--request-threads", str(POOL_THREADS)]}
NAMES = {key: config.label for key, config in SERVERS.items()}
LARGE_REQUESTS = ("ours", "ours_1t")  # also measured with --large-request instances a request, at the most clients
THREADS = {"default": "default (one per CPU)", "one": "1 intra-op, 1 inter-op"}
LIKE_FOR_LIKE = {"default_threads": ("ours", "kserve"), "one_tf_thread": ("ours_1t", "kserve_1t")}
