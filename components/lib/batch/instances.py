"""Batch prediction's inputs: the files an `instances` value names (local paths or gs:// URIs, globs,
comma-separated), and how each format's records become model instances as Vertex's `InstanceConfig` says
(`key_field`, `included_fields`, `excluded_fields`, `instance_type`; see `instance_config`): CSV columns and JSON
object fields are matched to the model's feature columns by name; tf-record records and file-list files reach the
model as `{"b64": ...}`."""

import base64
import csv
import fnmatch
import glob
import gzip
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from components.lib.batch.instance_formats import ARRAY_FORMATS, KEYED_FORMATS
from components.lib.prep.records import read_records
from core import storage

INSTANCE_TYPES = ("", "object", "array")


CHUNK = 8 * 2**20  # gs:// read and upload chunk


_WILDCARD = re.compile(r"[*?\[]")


_INT = re.compile(r"[+-]?\d{1,18}")


_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


_SURROGATE = re.compile("[\udc80-\udcff]")


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

    - `included_fields` (in that order) or `excluded_fields` (not both) pick the fields of CSV rows, JSONL
      objects and BigQuery rows; `key_field` is never sent to the model (the output carries it as `key`);
    - `instance_type` "object" or "array" (JSONL objects become `[value of each included field]`); CSV rows are
      always arrays; tf-record and file-list records are `{"b64": ...}`, without fields;
    - BigQuery rows (Vertex only) are arrays in the table's column order unless `instance_type` is "object";
    - without `included_fields`, CSV and BigQuery rows and JSONL objects sent as arrays carry exactly the model's
      feature columns when it names them (`feature_names`, the trainer's `assets.extra/features.txt`), by name, in
      its order.
    Raises ValueError for a combination Vertex would refuse or that could not work. `feature_names=None` (not
    known yet: the options checked before the model is read) skips what depends on them.
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
                f"{', '.join(KEYED_FORMATS[:-1])} and {KEYED_FORMATS[-1]} instances, not "
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
    as_array = instance_type == "array" or (instances_format in ARRAY_FORMATS and instance_type != "object")
    if features and not included and as_array:
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


def read_jsonl(stream, config: InstanceConfig) -> Iterator[Item]:
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
        return read_jsonl(stream, config)
    if instances_format == "csv":
        return _read_csv(stream, config, name)
    if instances_format == "file-list":
        return _read_file_list(stream, files)
    return _read_tf_record(stream, instances_format == "tf-record-gzip")
