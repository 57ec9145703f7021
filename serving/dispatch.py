"""Where a request's model call runs: on the event loop when the request is alone, on a pool of threads when requests
overlap (when there is a pool: `default_threads`). A call on the loop has no hand-off (the lowest latency for one
client); on the pool, TensorFlow computes with the GIL released while the loop reads, parses and answers other
requests, so the server can use more than one CPU. REST's handlers use it; gRPC runs each call on a worker thread of
its own server (serving.grpc_service)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from core.cpus import available_cpus
from serving.models import Servable


def default_threads(cpus: int) -> int:
    """Model-call threads for `cpus` usable CPUs: none (every call on the loop) up to 2, else one per CPU. On 2 CPUs
    the hand-offs to a pool cost more than the overlap frees (see bench.serving, `request_threads`)."""
    return 1 if cpus <= 2 else cpus


class Dispatcher:
    """Runs model calls for the event loop's handlers. `threads` (0: `default_threads` for the CPUs it may use,
    `available_cpus`; 1: every call on the loop)."""

    def __init__(self, threads: int = 0):
        threads = threads or default_threads(available_cpus())
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="model-call") if threads > 1 else None
        self._in_flight = 0

    async def predict(self, servable: Servable, arrays: dict[str, np.ndarray], signature: str = "") -> dict:
        """The outputs of `servable` on `arrays` (batched when the servable batches)."""
        self._in_flight += 1
        try:
            if self._pool:
                await asyncio.sleep(0)  # requests received with this one reach this point and are counted
            pool = self._pool if self._in_flight > 1 else None
            future = servable.predict_future(arrays, signature, pool)
            return future.result() if future.done() else await asyncio.wrap_future(future)
        finally:
            self._in_flight -= 1

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(wait=True)
