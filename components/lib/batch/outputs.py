"""Batch prediction's output in Vertex AI's layout: `<prefix>/prediction-<model>-<timestamp>/` holding, per input
file, `prediction.results-0000K-of-0000N` (`{"instance"|"key": ..., "prediction": ...}` lines) and
`prediction.errors_stats-0000K-of-0000N` (`{"instance": ..., "error": {"code", "message"}}` lines)."""

import datetime
import os
import re
from collections.abc import Iterable, Iterator

import orjson

from components.lib.batch.instances import Item
from core import storage

INVALID_ARGUMENT, INTERNAL = 3, 13  # google.rpc.Code


_JSON = orjson.OPT_SERIALIZE_NUMPY


class Shard:
    """The results and errors lines of one input file."""

    def __init__(self, results, errors, keyed: bool):
        self.results, self.errors, self.keyed = results, errors, keyed
        self.succeeded = self.failed = 0

    def result(self, item: Item, prediction) -> None:
        line = {"key": item.key} if self.keyed else {"instance": item.given}
        line["prediction"] = prediction
        self.results.write(orjson.dumps(line, option=_JSON) + b"\n")
        self.succeeded += 1

    def error(self, item: Item, code: int, message: str) -> None:
        line = {"instance": item.given, "error": {"code": code, "message": message}}
        self.errors.write(orjson.dumps(line, option=_JSON) + b"\n")
        self.failed += 1


def shard_uri(output_directory: str, kind: str, index: int, shards: int) -> str:
    """Vertex's name of an input file's output: `prediction.results-00000-of-00002`, `prediction.errors_stats-...`."""
    return f"{output_directory}/prediction.{kind}-{index:05d}-of-{shards:05d}"


def valid_batches(items: Iterable[Item], batch_size: int, shard) -> Iterator[list[Item]]:
    """Batches of `batch_size` valid instances among `items`; invalid ones go straight to `shard`'s errors."""
    batch: list[Item] = []
    for item in items:
        if item.error is not None:
            shard.error(item, INVALID_ARGUMENT, item.error)
            continue
        batch.append(item)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def vertex_timestamp() -> str:
    """Vertex's output directory timestamp, e.g. 2026_11_22T13_05_43_681Z (UTC, milliseconds)."""
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y_%m_%dT%H_%M_%S_") + f"{now.microsecond // 1000:03d}Z"


def vertex_output_directory(output_prefix: str, model_display_name: str) -> str:
    name = re.sub(r"[^\w.-]", "_", model_display_name) or "model"
    path = f"{output_prefix.rstrip('/')}/prediction-{name}-{vertex_timestamp()}"
    if not storage.is_gcs(path):
        os.makedirs(path)
    return path
