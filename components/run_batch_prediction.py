"""Self-hosted batch prediction with Vertex AI's input formats and output layout (DESIGN.md §3).

Inputs: local paths or gs:// URIs, globs, comma-separated; formats jsonl, csv, tf-record, tf-record-gzip, file-list
(tf-record records and file-list files reach the model as `{"b64": ...}`). Records become model instances as
Vertex's `InstanceConfig` says (`key_field`, `included_fields`, `excluded_fields`, `instance_type`; see
`instance_config`): CSV columns and JSON object fields are matched to the model's feature columns by name. Output:
`<prefix>/prediction-<model>-<timestamp>/prediction.results-0000K-of-0000N` and `prediction.errors_stats-...`, one
pair per input file. Every instance becomes exactly one results or errors line. Files are streamed and processed in
parallel, one batch per worker in memory. JSONL lines are parsed and converted in worker processes (see
`_ParsePool`), so parsing runs beside the model instead of sharing its process's interpreter lock.
"""

import base64
import collections
import contextlib
import csv
import dataclasses
import datetime
import fnmatch
import gc
import glob
import gzip
import io
import itertools
import multiprocessing
import os
import queue
import re
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import orjson
from kfp.dsl import Artifact, Output

from components.lib import storage
from components.lib.instance_formats import B64_FORMATS, FORMATS, KEYED_FORMATS
from components.lib.records import read_records
from serving import codec
from trainer import progress

INSTANCE_TYPES = ("", "object", "array")
INVALID_ARGUMENT, INTERNAL = 3, 13  # google.rpc.Code
CHUNK = 8 * 2**20  # gs:// read and upload chunk
_JSON = orjson.OPT_SERIALIZE_NUMPY
_WILDCARD = re.compile(r"[*?\[]")
_INT = re.compile(r"[+-]?\d{1,18}")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_SURROGATE = re.compile("[\udc80-\udcff]")


class BatchPredictionError(RuntimeError):
    """The batch run predicted, but more of its instances failed than its error budget allows (user-facing)."""


def check_error_budget(succeeded: int, failed: int, max_error_fraction: float, where: str = "") -> str:
    """The counts as a sentence, or BatchPredictionError when the run predicted nothing or the failed share exceeds
    `max_error_fraction` (0: no failure allowed; 1: any share; every failing instance has its errors line). The same
    rule on every target: Vertex's job itself succeeds whatever its instances do."""
    if not 0 <= max_error_fraction <= 1:
        raise ValueError(f"max_error_fraction must be in [0, 1], got {max_error_fraction}")
    total = succeeded + failed
    counts = f"{failed} of {total} instances failed, {succeeded} succeeded"
    if total == 0:
        raise BatchPredictionError(f"no instances were predicted: the input holds none{where}")
    if failed / total > max_error_fraction:
        raise BatchPredictionError(
            f"{counts} ({failed / total:.1%}), above max_error_fraction {max_error_fraction:.1%}{where}; each "
            "failure's reason is in prediction.errors_stats-*"
        )
    return f"{counts} ({failed / total:.1%}; max_error_fraction {max_error_fraction:.1%})"


class Item(NamedTuple):
    """One input instance: as given (for the output lines), its key, what the model gets, or why it is invalid."""

    given: Any
    key: Any = None
    instance: Any = None
    error: str | None = None


class Files:
    """Opens local paths and gs:// URIs (one storage client, created on first use, per worker)."""

    def __init__(self):
        self._client = None

    def open(self, uri: str, mode: str):
        if not storage.is_gcs(uri):
            return open(uri, mode)
        if self._client is None:
            self._client = storage.gcs_client()
        bucket, name = storage.split_gcs(uri)
        return self._client.bucket(bucket).blob(name).open(mode, chunk_size=CHUNK)

    def read(self, uri: str) -> bytes:
        with self.open(uri, "rb") as f:
            return f.read()


def input_size(uri: str) -> int:
    """The size in bytes of an input file (local or gs://), for the progress's share of the input read."""
    if not storage.is_gcs(uri):
        return os.path.getsize(uri)
    bucket, name = storage.split_gcs(uri)
    blob = storage.gcs_client().bucket(bucket).get_blob(name)
    return blob.size if blob is not None else 0


def expand_inputs(instances: str) -> list[str]:
    """The files matched by comma-separated paths or globs (local or gs://), in order, without duplicates."""
    files = []
    for pattern in filter(None, (p.strip() for p in instances.split(","))):
        matched = (
            _match_gcs(pattern)
            if storage.is_gcs(pattern)
            else sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        )
        if not matched:
            raise FileNotFoundError(f"no input files match {pattern!r}")
        files += matched
    if not files:
        raise FileNotFoundError(f"no input files given in {instances!r}")
    return list(dict.fromkeys(files))


def _match_gcs(pattern: str) -> list[str]:
    bucket, name = storage.split_gcs(pattern)
    client = storage.gcs_client()
    wildcard = _WILDCARD.search(name)
    if not wildcard:
        return [pattern] if client.bucket(bucket).get_blob(name) is not None else []
    parts = name.split("/")  # wildcards match within one path segment, as local globs do
    return sorted(
        f"gs://{bucket}/{blob.name}"
        for blob in client.list_blobs(bucket, prefix=name[: wildcard.start()])
        if _segments_match(blob.name.split("/"), parts)
    )


def _segments_match(segments: list[str], parts: list[str]) -> bool:
    return len(segments) == len(parts) and all(fnmatch.fnmatchcase(s, p) for s, p in zip(segments, parts))


@dataclass(frozen=True)
class InstanceConfig:
    """How a record's fields become the instance sent to the model (Vertex's `BatchPredictionJob.InstanceConfig`).
    `by_features`: `included_fields` are the model's own feature columns (matched by name)."""

    instance_type: str = ""
    key_field: str = ""
    included_fields: tuple[str, ...] = ()
    excluded_fields: tuple[str, ...] = ()
    by_features: bool = False

    @property
    def shapes_objects(self) -> bool:
        """Whether JSONL instances must be objects (fields are picked from them)."""
        return bool(self.key_field or self.included_fields or self.excluded_fields or self.instance_type == "object")


def _names(value) -> tuple[str, ...]:
    """Field names from a list or a comma-separated string (blanks dropped)."""
    items = value.split(",") if isinstance(value, str) else (value or [])
    return tuple(n for n in (str(i).strip() for i in items) if n)


def instance_config(
    instances_format: str,
    key_field: str = "",
    included_fields=(),
    excluded_fields=(),
    instance_type: str = "",
    feature_names=(),
) -> InstanceConfig:
    """The instance config of a batch job, the same on every target (the Vertex job receives its fields).

    - `included_fields` (in that order) or `excluded_fields` (not both) pick the fields of CSV rows and JSONL
      objects; `key_field` is never sent to the model (the output carries it as `key` instead of the instance);
    - `instance_type`: "object" or "array" (JSONL objects become `[value of each included field]`); CSV rows are
      always arrays; tf-record and file-list records are `{"b64": ...}`, without fields;
    - when the model names its feature columns (`feature_names`, the trainer's `assets.extra/features.txt`) and no
      `included_fields` are given, CSV rows and JSONL objects sent as arrays carry exactly those columns, by name, in
      the model's order: other columns (a label, ids) stay out, and the CSV's column order does not matter.
    Raises ValueError for a combination Vertex would refuse or that could not work. `feature_names=None` (not
    known yet: checking the options before the model is read) skips what depends on them.
    """
    key_field = (key_field or "").strip()
    included, excluded, features = _names(included_fields), _names(excluded_fields), _names(feature_names)
    if instance_type not in INSTANCE_TYPES:
        raise ValueError(f"unknown instance_type {instance_type!r}; allowed: object, array (or empty)")
    if instances_format not in KEYED_FORMATS:
        given = [
            name
            for name, value in (
                ("key_field", key_field),
                ("included_fields", included),
                ("excluded_fields", excluded),
                ("instance_type", instance_type),
            )
            if value
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to "
                f"{' and '.join(KEYED_FORMATS)} instances, not "
                f'{instances_format} (whose records reach the model as {{"b64": ...}})'
            )
        return InstanceConfig()
    if included and excluded:
        raise ValueError("give included_fields or excluded_fields, not both (Vertex refuses both)")
    if key_field and key_field in included:
        raise ValueError(f"key_field {key_field!r} is never sent to the model; remove it from included_fields")
    if instances_format == "csv" and instance_type == "object":
        raise ValueError("CSV rows reach the model as arrays; instance_type 'object' applies to jsonl only")
    by_features = False
    if features and not included and (instances_format == "csv" or instance_type == "array"):
        clash = [f for f in features if f in excluded or f == key_field]
        if clash:
            raise ValueError(
                f"{'excluded_fields' if set(clash) & set(excluded) else 'key_field'} names the model's "
                f"feature column(s) {clash}; the model takes {list(features)}"
            )
        included, excluded, by_features = features, (), True
    if instances_format == "jsonl" and instance_type == "array" and not included and feature_names is not None:
        raise ValueError(
            "instance_type 'array' turns JSONL objects into arrays in the order of included_fields: "
            "give included_fields (the model does not name its feature columns)"
        )
    return InstanceConfig(instance_type, key_field, included, excluded, by_features)


def _read_jsonl(stream, config: InstanceConfig) -> Iterator[Item]:
    """One JSON value a line (blank lines are not instances). Objects lose their key field (the item's key) and keep
    the included (or all but the excluded) fields, as an array with instance type "array"; other values pass
    unchanged where no field has to be picked."""
    for line in stream:
        line = line.strip()
        if not line:
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            yield Item(line.decode("utf-8", "replace"), error=f"invalid JSON: {e}")
            continue
        given = orjson.Fragment(line)  # written back exactly as given
        if not isinstance(value, dict):
            if not config.shapes_objects or (config.instance_type == "array" and not config.key_field):
                yield Item(given, instance=value)  # already what the model takes (an array line stays an array)
            elif config.key_field:
                yield Item(given, error=f"key_field '{config.key_field}' needs an object instance with that field")
            else:
                yield Item(
                    given,
                    error="included_fields, excluded_fields and instance_type 'object' pick fields of "
                    "object instances; this line is not a JSON object",
                )
            continue
        if config.key_field and config.key_field not in value:
            yield Item(given, error=f"key_field '{config.key_field}' needs an object instance with that field")
            continue
        key = value.pop(config.key_field) if config.key_field else None
        if config.included_fields:
            missing = [f for f in config.included_fields if f not in value]
            if missing:
                what = "the model's feature field(s)" if config.by_features else "included field(s)"
                yield Item(given, error=f"the object lacks {what} {missing}")
                continue
            value = {f: value[f] for f in config.included_fields}
        elif config.excluded_fields:
            value = {k: v for k, v in value.items() if k not in config.excluded_fields}
        yield Item(given, key, list(value.values()) if config.instance_type == "array" else value)


def _number(text: str):
    stripped = text.strip()
    if _INT.fullmatch(stripped):
        return int(stripped)
    return float(stripped) if _FLOAT.fullmatch(stripped) else text


def csv_columns(header: list[str], config: InstanceConfig, name: str = "the CSV") -> list[int]:
    """Indexes of the header's columns that make an instance, in instance order: the included fields (the model's
    feature columns by default, by name), else every column but the key and the excluded ones."""
    if config.key_field and config.key_field not in header:
        raise ValueError(f"key_field '{config.key_field}' is not a column of the header of {name}: {header}")
    if config.included_fields:
        missing = [f for f in config.included_fields if f not in header]
        if missing:
            if config.by_features:
                raise ValueError(
                    f"the header of {name} lacks the model's feature column(s) {missing}; the model takes "
                    f"{list(config.included_fields)} (matched by name, in any order), the header has {header}. "
                    "Rename the columns, or name the ones to send, in the model's order, with included_fields"
                )
            raise ValueError(f"included_fields {missing} are not columns of the header of {name}: {header}")
        return [header.index(f) for f in config.included_fields]
    return [i for i, h in enumerate(header) if h != config.key_field and h not in config.excluded_fields]


def _read_csv(stream, config: InstanceConfig, name: str = "the CSV") -> Iterator[Item]:
    """Rows after the header; each as given (every value, numbers parsed) and as its instance: the values of the
    instance's columns (see `csv_columns`), in their order."""
    reader = csv.reader(io.TextIOWrapper(stream, encoding="utf-8-sig", errors="surrogateescape", newline=""))
    header = next(reader, None)
    if header is None:
        return
    header = [h.strip() for h in header]
    columns = csv_columns(header, config, name)
    left_out = [h for i, h in enumerate(header) if i not in columns and h != config.key_field]
    print(
        f"{name}: instances from columns {[header[i] for i in columns]}"
        + (f"; not sent: {left_out}" if left_out else ""),
        flush=True,
    )
    key = header.index(config.key_field) if config.key_field else None
    whole = columns == [i for i in range(len(header)) if i != key]
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield Item(f"line {reader.line_num}", error=f"undecodable CSV row: {e}")
            continue
        if not row:
            continue
        if any(_SURROGATE.search(v) for v in row):
            yield Item(
                [v.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for v in row],
                error="the row is not valid UTF-8",
            )
        elif len(row) != len(header):
            yield Item(row, error=f"the row has {len(row)} fields; the header has {len(header)}")
        else:
            values = [_number(v) for v in row]
            instance = values if whole and key is None else [values[i] for i in columns]
            yield Item(values, None if key is None else values[key], instance)


def _b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode()}


def _read_tf_record(stream, compressed: bool) -> Iterator[Item]:
    for index, record in enumerate(read_records(gzip.GzipFile(fileobj=stream) if compressed else stream)):
        if isinstance(record, str):
            yield Item(f"record {index}", error=record)
        else:
            value = _b64(record)
            yield Item(value, instance=value)


def _read_file_list(stream, files: Files) -> Iterator[Item]:
    """One instance per listed file (its bytes as b64); the instance as given is the path."""
    from google.api_core.exceptions import GoogleAPICallError

    for line in stream:
        uri = line.decode("utf-8", "replace").strip()
        if not uri:
            continue
        try:
            data = files.read(uri)
        except (OSError, GoogleAPICallError) as e:
            yield Item(uri, error=f"cannot read {uri}: {str(e)[:300]}")
            continue
        yield Item(uri, instance=_b64(data))


def read_instances(stream, instances_format: str, config: InstanceConfig, files: Files, name: str) -> Iterator[Item]:
    """The instances of one input file's binary stream."""
    if instances_format == "jsonl":
        return _read_jsonl(stream, config)
    if instances_format == "csv":
        return _read_csv(stream, config, name)
    if instances_format == "file-list":
        return _read_file_list(stream, files)
    return _read_tf_record(stream, instances_format == "tf-record-gzip")


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


@dataclass(frozen=True)
class _Job:
    signature: Any
    inputs: dict
    instances_format: str
    config: InstanceConfig
    batch_size: int
    output_directory: str
    shards: int
    parse_pool: Any = None  # _ParsePool: JSONL parsed in other processes

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
                _pooled_batches(self, stream, shard, self.parse_pool)
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

    def batches(self, items: Iterable[Item], shard: "Shard | _Recorder") -> Iterator[tuple[list[Item], dict]]:
        """Converted batches of the valid instances among `items`; invalid ones go straight to the errors file."""
        for batch in valid_batches(items, self.batch_size, shard):
            yield from self.convert(batch, shard)

    def convert(self, batch: list[Item], shard: "Shard | _Recorder") -> list[tuple[list[Item], dict]]:
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


POOLED_FORMATS = ("jsonl",)  # one instance a line: chunks of lines parse independently (CSV rows may span lines)
CHUNK_BATCHES = 8  # batches of lines per chunk sent to a parsing process


class _ParsePool:
    """Processes that parse and convert chunks of JSONL lines for `_Job.run_file` (`_pooled_batches`), forked
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
    def for_format(cls, instances_format: str, processes: int | None) -> "_ParsePool":
        """For the formats parsed that way: `processes`, by default half the CPUs this process may use (the model
        gets the others, see `model_threads`); none on one CPU or for the other formats."""
        if instances_format not in POOLED_FORMATS:
            return cls(0)
        if processes is None:
            from components.lib.cpus import available_cpus

            processes = available_cpus() // 2
        return cls(processes)

    def model_threads(self) -> None:
        """With parsing processes, TensorFlow's pools get the CPUs they leave (measured on the digits model, 2 CPUs:
        a batch of 64 in 0.4 ms on one thread, 0.6-0.8 ms on two, whose hand-offs then also compete with the
        parser). Only before TensorFlow's runtime starts in this process; else its pools stay as they are."""
        if not self.processes:
            return
        import tensorflow as tf

        from components.lib.cpus import available_cpus

        threads = max(1, available_cpus() - self.processes)
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # the runtime runs already (a caller used TensorFlow before)
            pass

    @property
    def active(self) -> "_ParsePool | None":
        return self if self.processes else None

    def submit(self, job: "_Job", chunk: bytes):
        assert self._pool is not None  # `active` hands out only pools with processes
        return self._pool.submit(_parse_chunk, job, chunk)

    def __enter__(self) -> "_ParsePool":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _parse_chunk(job: "_Job", chunk: bytes) -> list[tuple]:
    """In a parsing process: what `_Job.batches` makes of a chunk of whole lines, as events in order:
    `("error", item, code, message)` and `("batch", items, arrays)`. The items leave without their parsed instance
    (the arrays carry it), and an `orjson.Fragment` given (the line as written, which does not pickle) as
    `("line", N)`: the chunk's Nth non-blank line, which the sender has."""
    items = list(_read_jsonl(io.BytesIO(chunk), job.config))
    index = {id(item): i for i, item in enumerate(items)}  # one item a non-blank line

    def portable(item: Item) -> Item:
        given = ("line", index[id(item)]) if isinstance(item.given, orjson.Fragment) else item.given
        return item._replace(given=given, instance=None)

    events: list[tuple] = []
    for converted, arrays in job.batches(items, _Recorder(events, portable)):  # errors are recorded as they come
        events.append(("batch", [portable(i) for i in converted], arrays))
    return events


class _Recorder:
    """Stands in for a `Shard` in a parsing process: records errors as events."""

    def __init__(self, events: list, portable):
        self.events, self.portable = events, portable

    def error(self, item: Item, code: int, message: str) -> None:
        self.events.append(("error", self.portable(item), code, message))


def _pooled_batches(job: "_Job", stream, shard: "Shard", pool: _ParsePool) -> Iterator[tuple[list[Item], dict]]:
    """`_Job.batches` with the parsing in `pool`'s processes: chunks of lines go out, at most two per process
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


@contextlib.contextmanager
def _collector_paused():
    """Pause the cyclic garbage collector for the run: parsing creates many short-lived acyclic objects (freed by
    reference counting), and every collection would rescan the loaded model's objects (measured on 10,000 digits
    instances: JSON parsing 1.46 s with the collector, 0.29 s frozen, 0.10 s paused)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_arguments(instances_format: str, batch_size: int, parallelism: int, **fields) -> None:
    if instances_format not in FORMATS:
        raise ValueError(f"unknown instances_format {instances_format!r}; allowed: {', '.join(FORMATS)}")
    instance_config(instances_format, **fields, feature_names=None)  # the options, before any file is read
    if batch_size < 1 or parallelism < 1:
        raise ValueError(f"batch_size and parallelism must be >= 1, got {batch_size} and {parallelism}")


def _takes_strings(inputs: dict) -> bool:
    """Whether a signature's inputs ({name: is a string input}) all take strings (e.g. `{"b64": ...}` values)."""
    return bool(inputs) and all(inputs.values())


def choose_signature(signatures: dict[str, dict[str, bool]], signature_name: str, instances_format: str) -> str:
    """The signature a batch job calls: `signature_name` when given (it must exist), else `serving_default`, except
    for records that reach the model as `{"b64": ...}` (file-list, tf-record) when `serving_default` takes no
    strings and the model has an encoded-image signature (`serving_image_bytes`, image models of this trainer): a
    file list of images is predicted from the files' bytes. `signatures`: {name: {input: is a string input}}."""
    from trainer.schema import IMAGE_BYTES_SIGNATURE

    if signature_name:
        if signatures and signature_name not in signatures:
            raise ValueError(f"the model has no signature {signature_name!r}; available: {sorted(signatures)}")
        return signature_name
    if (
        instances_format in B64_FORMATS
        and IMAGE_BYTES_SIGNATURE in signatures
        and not _takes_strings(signatures.get("serving_default", {}))
    ):
        return IMAGE_BYTES_SIGNATURE
    return "serving_default"


def model_signatures(model_uri: str) -> dict[str, dict[str, bool]]:
    """{signature: {input: is a string input}} of the SavedModel at `model_uri` (local or gs://), read from its
    `saved_model.pb` without loading the model; {} when it cannot be read."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    try:
        proto = saved_model_pb2.SavedModel.FromString(Files().read(f"{model_uri.rstrip('/')}/saved_model.pb"))
    except Exception as e:  # noqa: BLE001 (missing, unreadable or not a SavedModel: the default signature applies)
        print(f"cannot read the signatures of {model_uri}: {str(e)[:200]}")
        return {}
    if not proto.meta_graphs:
        return {}
    return {
        name: {key: info.dtype == types_pb2.DT_STRING for key, info in signature.inputs.items()}
        for name, signature in proto.meta_graphs[0].signature_def.items()
    }


def model_feature_names(model_uri: str) -> list[str]:
    """The feature column names a model was trained on (`assets.extra/features.txt` in its directory, local or
    gs://); [] when it names none (image models, models from elsewhere)."""
    from trainer.schema import FEATURES_FILE

    path = f"{model_uri.rstrip('/')}/{FEATURES_FILE}"
    try:
        text = Files().read(path).decode("utf-8")
    except FileNotFoundError:
        return []
    except Exception as e:  # noqa: BLE001 (google.api_core NotFound on gs://, without importing it here)
        if type(e).__name__ == "NotFound":
            return []
        raise
    return [line.strip() for line in text.splitlines() if line.strip()]


def batch_predict(
    model_path: str,
    instances: str,
    instances_format: str,
    output_prefix: str,
    model_display_name: str,
    batch_size: int = 64,
    parallelism: int = 4,
    key_field: str = "",
    signature_name: str = "",
    included_fields=(),
    excluded_fields=(),
    instance_type: str = "",
    parse_processes: int | None = None,
) -> dict:
    """Predict every instance of `instances` with the SavedModel at `model_path` (local or gs://) into Vertex's
    layout under `output_prefix`; returns a summary (output_directory, counts, input files, throughput, the
    signature used). The field options make instances of records as `instance_config` says; the signature is
    `choose_signature`'s. `parse_processes`: processes that parse JSONL (None: half the CPUs this process may use,
    the model's TensorFlow threads the others; 0: none, parse in this one, TensorFlow's threads as they are)."""
    import tensorflow as tf

    start = time.perf_counter()
    fields = dict(
        key_field=key_field,
        included_fields=included_fields,
        excluded_fields=excluded_fields,
        instance_type=instance_type,
    )
    _check_arguments(instances_format, batch_size, parallelism, **fields)
    files = expand_inputs(instances)
    with storage.staged(model_path) as local_model, _ParsePool.for_format(instances_format, parse_processes) as parse:
        parse.model_threads()
        config = instance_config(instances_format, **fields, feature_names=model_feature_names(local_model))
        loaded = tf.saved_model.load(local_model)
        inputs = {name: codec.signature_inputs(fn) for name, fn in loaded.signatures.items()}
        try:
            signature_name = choose_signature(
                {name: {k: i.dtype == object for k, i in spec.items()} for name, spec in inputs.items()},
                signature_name,
                instances_format,
            )
        except ValueError as e:
            raise ValueError(f"{e} (model {model_path})") from None
        if signature_name not in loaded.signatures:
            raise ValueError(
                f"the model at {model_path} has no signature {signature_name!r}; available: {sorted(loaded.signatures)}"
            )
        print(f"signature {signature_name}: inputs {sorted(inputs[signature_name])}", flush=True)
        signature = loaded.signatures[signature_name]
        job = _Job(
            signature,
            codec.signature_inputs(signature),
            instances_format,
            config,
            batch_size,
            vertex_output_directory(output_prefix, model_display_name),
            len(files),
            parse_pool=parse.active,
        )
        sizes = [input_size(f) for f in files]
        input_bytes = sum(sizes) or 1
        counter = progress.Counter(
            "batch",
            "instances",
            lambda c: (
                f"{c['done']} instances, {c['errors']} errors, {c['files']}/{len(files)} files, "
                f"{c['bytes'] / input_bytes:.0%} of the input read"
            ),
            fraction=lambda c: c["bytes"] / input_bytes,
        )
        with _collector_paused(), ThreadPoolExecutor(min(parallelism, len(files))) as pool:
            counts = list(pool.map(job.run_file, range(len(files)), files, [counter] * len(files), sizes))
        counter.finish()
    seconds = time.perf_counter() - start
    succeeded, failed = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return {
        "output_directory": job.output_directory,
        "instances": succeeded + failed,
        "succeeded": succeeded,
        "failed": failed,
        "files": files,
        "seconds": round(seconds, 3),
        "instances_per_second": round((succeeded + failed) / seconds, 1),
        "signature_name": signature_name,
    }


def resolve_model(model_repository: str, model_name: str, model: str) -> str:
    """The SavedModel to use: the repository's champion (`model` empty), one of its versions (`model` all
    digits), or `model` itself (a path or URI)."""
    from components.lib import model_repository as repository

    if model and not model.isdigit():
        return model
    if not model_repository:
        raise ValueError("no model repository configured: set model_repository, or give a model path")
    if not model:
        version = repository.champion(model_repository, model_name)
        if version is None:
            raise FileNotFoundError(f"the model repository {model_repository} has no versions of {model_name!r}")
        return version.path
    available = repository.versions(model_repository, model_name)
    if int(model) not in available:
        raise FileNotFoundError(f"no version {model} of {model_name!r} in {model_repository}; versions: {available}")
    return repository.read_version(model_repository, model_name, int(model)).path


def run_batch_prediction(
    model_repository: str,
    model_name: str,
    model: str,
    instances: str,
    instances_format: str,
    batch_size: int,
    key_field: str,
    included_fields: list,
    excluded_fields: list,
    instance_type: str,
    max_error_fraction: float,
    signature_name: str,
    predictions: Output[Artifact],
) -> NamedTuple("Outputs", [("output_directory", str), ("succeeded", int), ("failed", int)]):
    """KFP step (self-hosted): batch prediction into Vertex's layout inside the `predictions` artifact folder; fails
    (with the counts) when more than `max_error_fraction` of the instances failed.

    Args:
        model_repository: The versioned model repository.
        model_name: The model's name in the repository.
        model: The version: a number or a SavedModel path (empty: the champion, the newest version).
        instances: The instances: comma-separated paths or globs.
        instances_format: Format of the instances: jsonl, csv, tf-record, tf-record-gzip or file-list.
        batch_size: Instances per prediction call.
        key_field: Field identifying an instance: never sent to the model; the output carries it as `key`.
        included_fields: Fields sent to the model, in this order (empty: the model's feature columns).
        excluded_fields: Fields not sent to the model.
        instance_type: JSONL objects sent as objects or as arrays (empty: as given).
        max_error_fraction: The step fails when a larger share of the instances failed.
        signature_name: The signature to call (empty: chosen from the model and the instances).
    """
    from trainer.fast_exit import skip_exit_collection

    skip_exit_collection()
    import os
    from collections import namedtuple

    from components.lib import names
    from components.run_batch_prediction import batch_predict, check_error_budget, resolve_model

    names.model_name(model_name)  # run parameters can be set without the CLI (the KFP UI, a recurring run)
    if model_repository:
        names.location(model_repository, "model_repository")
    names.locations(instances, "instances")
    model_path = resolve_model(model_repository, model_name, model)
    os.makedirs(predictions.path, exist_ok=True)
    summary = batch_predict(
        model_path,
        instances,
        instances_format,
        predictions.path,
        model_name,
        batch_size=batch_size,
        key_field=key_field,
        included_fields=included_fields,
        excluded_fields=excluded_fields,
        instance_type=instance_type,
        signature_name=signature_name,
    )
    output_uri = f"{predictions.uri.rstrip('/')}/{os.path.basename(summary['output_directory'])}"
    predictions.metadata.update(summary, output_directory=output_uri, model=model_path)
    print(f"{summary['succeeded']} predictions, {summary['failed']} errors in {output_uri}")
    print(check_error_budget(summary["succeeded"], summary["failed"], max_error_fraction, f" (in {output_uri})"))
    Outputs = namedtuple("Outputs", ["output_directory", "succeeded", "failed"])
    return Outputs(output_uri, summary["succeeded"], summary["failed"])
