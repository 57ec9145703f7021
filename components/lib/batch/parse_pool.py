"""Processes that parse and convert JSONL lines beside the model (`ParsePool`), so that parsing does not share the
model's process and its interpreter lock; each file's output is what the in-process path writes."""

from __future__ import annotations

import collections
import dataclasses
import gc
import io
import itertools
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

import orjson

from components.lib.batch.instances import Item, read_jsonl
from components.lib.batch.outputs import Shard

if TYPE_CHECKING:
    from components.lib.batch.predictor import Job


POOLED_FORMATS = ("jsonl",)  # one instance a line: chunks of lines parse independently (CSV rows may span lines)


CHUNK_BATCHES = 8  # batches of lines per chunk sent to a parsing process


class ParsePool:
    """Processes that parse and convert chunks of JSONL lines for `Job.run_file` (`pooled_batches`), forked
    before TensorFlow runs anything in this process (nothing to import again; parsing needs no TensorFlow), with
    the garbage collector off as in `_collector_paused`. Chunks are replayed in input order, so each file's output
    is what the in-process path writes. A process that dies (killed for memory) fails the run (BrokenProcessPool)
    instead of hanging it. A context manager."""

    def __init__(self, processes: int):
        self._pool = None
        if processes >= 1 and "fork" in multiprocessing.get_all_start_methods():
            self._pool = ProcessPoolExecutor(
                processes, mp_context=multiprocessing.get_context("fork"), initializer=gc.disable
            )
            self._pool.submit(int).result()  # fork them all now, before this process starts TensorFlow's runtime
        self.processes = processes if self._pool else 0

    @classmethod
    def for_format(cls, instances_format: str, processes: int | None) -> ParsePool:
        """For the formats parsed that way: `processes`, by default half the CPUs this process may use (the model
        gets the others, see `model_threads`); none on one CPU or for the other formats."""
        if instances_format not in POOLED_FORMATS:
            return cls(0)
        if processes is None:
            from core.cpus import available_cpus

            processes = available_cpus() // 2
        return cls(processes)

    def model_threads(self) -> None:
        """With parsing processes, TensorFlow's pools get the CPUs they leave, so that the pools' hand-offs do not
        compete with the parsers for a CPU. Only before TensorFlow's runtime starts in this process; else its pools
        stay as they are."""
        if not self.processes:
            return
        import tensorflow as tf

        from core.cpus import available_cpus

        threads = max(1, available_cpus() - self.processes)
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # the runtime runs already (a caller used TensorFlow before)
            pass

    @property
    def active(self) -> ParsePool | None:
        return self if self.processes else None

    def submit(self, job: Job, chunk: bytes):
        assert self._pool is not None  # `active` hands out only pools with processes
        return self._pool.submit(_parse_chunk, job, chunk)

    def __enter__(self) -> ParsePool:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _parse_chunk(job: Job, chunk: bytes) -> list[tuple]:
    """In a parsing process: what `Job.batches` makes of a chunk of whole lines, as events in order:
    `("error", item, code, message)` and `("batch", items, arrays)`. The items leave without their parsed instance
    (the arrays carry it), and an `orjson.Fragment` given (the line as written, which does not pickle) as
    `("line", N)`: the chunk's Nth non-blank line, which the sender has."""
    items = list(read_jsonl(io.BytesIO(chunk), job.config))
    index = {id(item): i for i, item in enumerate(items)}  # one item a non-blank line

    def portable(item: Item) -> Item:
        given = ("line", index[id(item)]) if isinstance(item.given, orjson.Fragment) else item.given
        return item._replace(given=given, instance=None)

    events: list[tuple] = []
    for converted, arrays in job.batches(items, Recorder(events, portable)):  # errors are recorded as they come
        events.append(("batch", [portable(i) for i in converted], arrays))
    return events


class Recorder:
    """Stands in for a `Shard` in a parsing process: records errors as events."""

    def __init__(self, events: list, portable):
        self.events, self.portable = events, portable

    def error(self, item: Item, code: int, message: str) -> None:
        self.events.append(("error", self.portable(item), code, message))


def pooled_batches(job: Job, stream, shard: Shard, pool: ParsePool) -> Iterator[tuple[list[Item], dict]]:
    """`Job.batches` with the parsing in `pool`'s processes: chunks of lines go out, at most two per process
    ahead; each chunk's errors are written and its batches yielded in input order."""
    portable = dataclasses.replace(job, signature=None, parse_pool=None)  # the model and the pool stay here
    lines_per_chunk = job.batch_size * CHUNK_BATCHES
    pending: collections.deque = collections.deque()

    def restored(item: Item, lines: list[bytes]) -> Item:
        given = item.given
        if isinstance(given, tuple) and len(given) == 2 and given[0] == "line":
            return item._replace(given=orjson.Fragment(lines[given[1]]))
        return item

    def replay(chunk: bytes, events: list[tuple]):
        lines = [line for line in (raw.strip() for raw in chunk.split(b"\n")) if line]  # as the reader skips blanks
        for kind, item, *rest in events:
            if kind == "error":
                shard.error(restored(item, lines), *rest)
            else:
                yield [restored(i, lines) for i in item], rest[0]

    while chunk := b"".join(itertools.islice(stream, lines_per_chunk)):
        pending.append((chunk, pool.submit(portable, chunk)))
        if len(pending) > 2 * pool.processes:
            chunk, result = pending.popleft()
            yield from replay(chunk, result.result())
    while pending:
        chunk, result = pending.popleft()
        yield from replay(chunk, result.result())
