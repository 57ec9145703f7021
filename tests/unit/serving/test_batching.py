"""Request batching: concurrent requests share model calls, each gets its own rows back."""

import threading

import numpy as np

from serving.batching import Batcher, BatchingOptions


def test_concurrent_requests_are_batched_and_split_back():
    calls = []
    gate = threading.Event()

    def run(arrays):
        gate.wait(5)  # hold the first call so the others queue up
        calls.append(arrays["x"].shape[0])
        return {"y": arrays["x"] * 2}

    batcher = Batcher(run, BatchingOptions(max_batch_size=4, timeout_s=0.0))
    futures = [batcher.submit({"x": np.full((1, 2), i, np.float32)}) for i in range(9)]
    gate.set()
    results = [f.result(5)["y"] for f in futures]
    batcher.close()
    assert [r.tolist() for r in results] == [[[2.0 * i, 2.0 * i]] for i in range(9)]
    assert sum(calls) == 9 and max(calls) <= 4 and len(calls) < 9


def test_different_shapes_run_in_separate_batches_and_errors_reach_every_request():
    seen = []

    def run(arrays):
        seen.append(arrays["x"].shape)
        if arrays["x"].shape[1] == 3:
            raise ValueError("bad width")
        return {"y": arrays["x"]}

    batcher = Batcher(run, BatchingOptions(max_batch_size=8, timeout_s=0.05))
    ok = [batcher.submit({"x": np.zeros((1, 2))}) for _ in range(2)]
    bad = [batcher.submit({"x": np.zeros((2, 3))}) for _ in range(2)]
    assert all(f.result(5)["y"].shape == (1, 2) for f in ok)
    for f in bad:
        assert isinstance(f.exception(5), ValueError)
    assert all(shape[1] in (2, 3) for shape in seen) and (2, 2) in seen and (4, 3) in seen
    batcher.close()
    late = batcher.submit({"x": np.ones((1, 2))})  # after close: runs unbatched, never lost
    assert late.result(5)["y"].tolist() == [[1.0, 1.0]]
