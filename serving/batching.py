"""Request batching (TF Serving's `--enable_batching`): concurrent requests for one signature are concatenated along
the batch dimension, run once, and split back. A batch closes at `max_batch_size` rows or `timeout_s` after its first
request (0: take whatever is queued); requests whose non-batch shapes differ run in separate batches."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchingOptions:
    max_batch_size: int = 32
    timeout_s: float = 0.0
    num_threads: int = 1


def _key(arrays: dict[str, np.ndarray]) -> tuple:
    return tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(arrays.items()))


def _rows(arrays: dict[str, np.ndarray]) -> int:
    return next(iter(arrays.values())).shape[0]


class Batcher:
    """Queue in front of `run(arrays) -> outputs`; `submit` returns a Future of the request's own outputs."""

    def __init__(self, run, options: BatchingOptions):
        self._run, self.options = run, options
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, daemon=True, name="batcher") for _ in range(options.num_threads)
        ]
        for t in self._threads:
            t.start()

    def submit(self, arrays: dict[str, np.ndarray]) -> Future:
        future: Future = Future()
        with self._lock:
            if not self._closed:
                self._queue.put((arrays, future))
                return future
        _resolve([(arrays, future)], self._run)  # closed (version unloading): run unbatched, never fail
        return future

    def close(self) -> None:
        """Stop accepting; queued requests still run; threads exit when the queue is drained."""
        with self._lock:
            self._closed = True
        for _ in self._threads:
            self._queue.put(None)

    def _loop(self) -> None:
        held = None
        while True:
            first = held or self._queue.get()
            held = None
            if first is None:
                return
            batch, rows = [first], _rows(first[0])
            key, deadline = _key(first[0]), time.monotonic() + self.options.timeout_s
            while rows < self.options.max_batch_size:
                try:
                    wait = deadline - time.monotonic()
                    item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None or _key(item[0]) != key or rows + _rows(item[0]) > self.options.max_batch_size:
                    held = item  # starts the next batch (or ends the loop)
                    break
                batch.append(item)
                rows += _rows(item[0])
            _resolve(batch, self._run)


def _resolve(batch: list, run) -> None:
    try:
        if len(batch) == 1:
            batch[0][1].set_result(run(batch[0][0]))
            return
        names = batch[0][0].keys()
        outputs = run({n: np.concatenate([arrays[n] for arrays, _ in batch]) for n in names})
        start = 0
        for arrays, future in batch:
            size = _rows(arrays)
            future.set_result({n: o[start : start + size] for n, o in outputs.items()})
            start += size
    except Exception as e:  # noqa: BLE001 (delivered to every waiting request)
        for _, future in batch:
            if not future.done():
                future.set_exception(e)
