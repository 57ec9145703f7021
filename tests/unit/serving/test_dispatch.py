"""serving.dispatch: a lone request's model call runs on the event loop, overlapping ones on the pool; and gRPC's
worker threads (serving.server)."""

import asyncio
import threading
from concurrent.futures import Future

import numpy as np
import pytest

from core.cpus import available_cpus
from serving.batching import BatchingOptions
from serving.dispatch import Dispatcher, default_threads
from serving.repository import Repository, ServedModels
from serving.server import ModelServer, ServerOptions


class RecordingServable:
    """Answers `x * 2`, recording the thread of each call and whether it was handed an executor."""

    def __init__(self):
        self.calls: list[tuple[str, bool]] = []

    def run(self, arrays):
        self.calls.append((threading.current_thread().name, True))
        return {"y": arrays["x"] * 2}

    def predict_future(self, arrays, signature="", executor=None):
        if executor is not None:
            return executor.submit(self.run, arrays)
        self.calls.append((threading.current_thread().name, False))
        future: Future = Future()
        future.set_result({"y": arrays["x"] * 2})
        return future


def test_a_lone_request_runs_on_the_loop_and_overlapping_ones_on_the_pool():
    servable, dispatcher = RecordingServable(), Dispatcher(threads=2)

    async def main():
        alone = await dispatcher.predict(servable, {"x": np.array([1])})
        together = await asyncio.gather(*(dispatcher.predict(servable, {"x": np.array([k])}) for k in range(8)))
        return threading.current_thread().name, alone, together

    try:
        loop_thread, alone, together = asyncio.run(main())
    finally:
        dispatcher.close()
    assert alone["y"].tolist() == [2]
    assert [r["y"].tolist() for r in together] == [[2 * k] for k in range(8)]
    assert servable.calls[0] == (loop_thread, False)
    pooled = servable.calls[1:]
    assert len(pooled) == 8 and all(name.startswith("model-call") and on_pool for name, on_pool in pooled)


def test_one_thread_keeps_every_call_on_the_loop():
    servable, dispatcher = RecordingServable(), Dispatcher(threads=1)

    async def main():
        await asyncio.gather(*(dispatcher.predict(servable, {"x": np.array([k])}) for k in range(4)))
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert servable.calls == [(loop_thread, False)] * 4


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (3, 3), (16, 16)])
def test_default_threads_keep_calls_on_the_loop_up_to_two_cpus(cpus, threads):
    assert default_threads(cpus) == threads


@pytest.mark.parametrize(
    ("options", "batching", "expected"),
    [
        ({}, None, 2 * available_cpus()),
        ({}, BatchingOptions(max_batch_size=64), max(64, 2 * available_cpus())),
        ({"grpc_threads": 3}, BatchingOptions(max_batch_size=64), 3),
    ],
)
def test_grpc_worker_threads(tmp_path, options, batching, expected):
    """Two per usable CPU; with batching, enough threads for a full batch; --grpc-max-threads overrides."""
    server = ModelServer(ServedModels(Repository(str(tmp_path)), batching=batching), ServerOptions(**options))
    assert server.grpc_worker_threads() == expected
