"""One batch job's prediction, input file by input file: the valid instances in batches, converted to the
signature's arrays (TF Serving's JSON rules, `serving.codec`), predicted, each instance written to its results or
errors line; a batch the model fails on is retried instance by instance, so that only the failing ones become
errors."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.lib.batch.instances import Files, InstanceConfig, Item, read_instances
from components.lib.batch.outputs import INTERNAL, INVALID_ARGUMENT, Shard, shard_uri, valid_batches
from components.lib.batch.parse_pool import POOLED_FORMATS, Recorder, pooled_batches
from core import progress
from serving import codec


@dataclass(frozen=True)
class Job:
    signature: Any
    inputs: dict
    instances_format: str
    config: InstanceConfig
    batch_size: int
    output_directory: str
    shards: int
    parse_pool: Any = None  # ParsePool: JSONL parsed in other processes

    def shard_uri(self, kind: str, index: int) -> str:
        return shard_uri(self.output_directory, kind, index, self.shards)

    def run_file(
        self, index: int, path: str, counter: progress.Counter | None = None, size: int = 0
    ) -> tuple[int, int]:
        """Predict one input file into its shard pair; returns (succeeded, failed). A reader thread parses and
        converts the next batches while this one runs the model (which releases the GIL). `counter`: the run's
        progress (this file's part: instances done, errors, files done, bytes read of its `size`)."""
        files = Files()
        with (
            files.open(self.shard_uri("results", index), "wb") as results,
            files.open(self.shard_uri("errors_stats", index), "wb") as errors,
            files.open(path, "rb") as stream,
        ):
            shard = Shard(results, errors, bool(self.config.key_field))
            batches = (
                pooled_batches(self, stream, shard, self.parse_pool)
                if self.parse_pool and self.instances_format in POOLED_FORMATS
                else _prefetched(
                    self.batches(read_instances(stream, self.instances_format, self.config, files, path), shard),
                    depth=2,
                )
            )
            for items, arrays in batches:
                self.run(items, arrays, shard)
                if counter:
                    done = shard.succeeded + shard.failed
                    read = size if stream.closed else stream.tell()  # a reader closes it at its end
                    counter.update(index, done=done, errors=shard.failed, files=0, bytes=read)
        if counter:
            counter.update(index, done=shard.succeeded + shard.failed, errors=shard.failed, files=1, bytes=size)
        return shard.succeeded, shard.failed

    def batches(self, items: Iterable[Item], shard: Shard | Recorder) -> Iterator[tuple[list[Item], dict]]:
        """Converted batches of the valid instances among `items`; invalid ones go straight to the errors file."""
        for batch in valid_batches(items, self.batch_size, shard):
            yield from self.convert(batch, shard)

    def convert(self, batch: list[Item], shard: Shard | Recorder) -> list[tuple[list[Item], dict]]:
        """Batched arrays; when the batch does not convert as a whole, instance by instance (bad ones become
        errors) grouped by shape."""
        try:
            return [(batch, codec.parse_instances([i.instance for i in batch], self.inputs))]
        except codec.RequestError:
            pass
        groups: dict[tuple, list] = {}
        for item in batch:
            try:
                arrays = codec.parse_instances([item.instance], self.inputs)
            except codec.RequestError as e:
                shard.error(item, INVALID_ARGUMENT, str(e))
                continue
            groups.setdefault(tuple(a.shape for a in arrays.values()), []).append((item, arrays))
        return [
            (
                [item for item, _ in group],
                {name: np.concatenate([arrays[name] for _, arrays in group]) for name in self.inputs},
            )
            for group in groups.values()
        ]

    def run(self, items: list[Item], arrays: dict, shard: Shard) -> None:
        """Predict a batch; when the model fails on it, instance by instance, so that only the instances it fails
        on (an undecodable image, a value out of range) become errors."""
        import tensorflow as tf

        try:
            outputs = self.signature(**{name: tf.constant(array) for name, array in arrays.items()})
            outputs = {name: tensor.numpy() for name, tensor in outputs.items()}
        except (tf.errors.OpError, ValueError, TypeError) as e:
            if len(items) > 1:
                for i, item in enumerate(items):
                    self.run([item], {name: array[i : i + 1] for name, array in arrays.items()}, shard)
                return
            shard.error(items[0], INTERNAL, f"model execution failed: {_error_line(e)}")
            return
        for item, prediction in zip(items, codec.rows(outputs)):
            shard.result(item, prediction)


def _prefetched(items: Iterator, depth: int) -> Iterator:
    """Iterate `items` in a background thread, at most `depth` ahead (its exceptions are re-raised here)."""
    done = object()
    ahead: queue.Queue = queue.Queue(depth)

    def produce():
        try:
            for item in items:
                ahead.put(item)
            ahead.put(done)
        except BaseException as e:  # noqa: BLE001 (re-raised in the consumer)
            ahead.put(e)

    threading.Thread(target=produce, daemon=True, name="batch-reader").start()
    while (item := ahead.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


def _error_line(error: Exception) -> str:
    """The informative line of a TF error, without the graph-execution preamble and stack trace."""
    lines = [
        line
        for line in str(error).splitlines()
        if line.strip()
        and not line[0].isspace()
        and not line.startswith(("Graph execution error", "Detected at node", "<stack traces"))
    ]
    return (lines[-1] if lines else str(error).strip())[:500]
