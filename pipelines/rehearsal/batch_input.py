"""How Vertex AI turns a batch prediction job's input files into the instances its model's container receives, for the
double, written from Vertex's documentation and not from the project's reader (`components.lib.batch.instances`), so
that a difference between the self-hosted batch step and Vertex shows (tests/contract/vertex/test_rehearsal_batch.py
compares the two).

Sources: "Get batch predictions from a custom trained model", section "Input data requirements"
(cloud.google.com/vertex-ai/docs/predictions/get-batch-predictions), and the docstrings of aiplatform_v1
`BatchPredictionJob.InstanceConfig` and `BatchPredictionJob.OutputConfig.gcs_destination`:

- jsonl: each line's JSON value is an instance as it is (`[1, 2, 3, 4]` is sent as `[1, 2, 3, 4]`, an object as that
  object);
- csv: the first line is the header; a value in double quotes is a string, a value without quotes is read as a
  floating point number (`0.1,1.2,"cat1"` is sent as `[0.1, 1.2, "cat1"]`); a value holding a newline is not
  accepted; each row is an array of its values in the columns' order;
- tf-record, tf-record-gzip: each record is `{"b64": <base64 of the record>}`;
- file-list: each line is the Cloud Storage URI of a file, sent as `{"b64": <base64 of the file's content>}`;
- `InstanceConfig` (jsonl objects and csv rows only): `key_field` is left out of the instance and names the result
  (`key`); `included_fields` (in their order) or `excluded_fields`, not both; `instance_type` "object" needs every
  jsonl line to be an object, "array" turns an object into the values of `included_fields` (which it then needs);
  neither applies to tf-record or file-list, and csv rows are arrays (what "array" gives, so it is accepted there);
- a record that gives no instance fails alone: its errors line holds the record as given and an `error` holding only
  `code` and `message` (google.rpc.Status).

Where the documentation is silent, the double chooses, and says so in its messages: blank lines are no records; an
unquoted CSV value that is not a decimal number, a row whose field count differs from the header's, a JSON object
lacking the key or an included field, a JSON line that is not an object or array under "array", an unreadable
file-list file and a corrupt TFRecord record fail their record (a corrupt record length ends its file); settings the
documentation says do not apply (`instance_type` "object" on csv, any on tf-record or file-list, fields on
tf-record or file-list) fail the job; every value of a CSV row is converted, the columns left out included.
"""

from __future__ import annotations

import base64
import gzip
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from components.lib.batch.instances import Files, Item
from components.lib.prep.records import masked_crc

INSTANCES_FORMATS = ("jsonl", "csv", "tf-record", "tf-record-gzip", "file-list")
_FIELD_FORMATS = ("jsonl", "csv")

_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class VertexInstanceConfig:
    """A job's `instance_config`, as the double applies it."""

    instance_type: str = ""
    key_field: str = ""
    included_fields: tuple[str, ...] = ()
    excluded_fields: tuple[str, ...] = ()


def vertex_instance_config(instances_format: str, config: dict) -> VertexInstanceConfig:
    """The `instance_config` of a job (proto field names) for its `instances_format`; ValueError for what Vertex
    refuses or documents as not applying."""
    if instances_format not in INSTANCES_FORMATS:
        raise ValueError(f"instances_format {instances_format!r}: the rehearsal reads {', '.join(INSTANCES_FORMATS)}")
    parsed = VertexInstanceConfig(
        config.get("instance_type") or "",
        config.get("key_field") or "",
        tuple(config.get("included_fields") or ()),
        tuple(config.get("excluded_fields") or ()),
    )
    if parsed.instance_type not in ("", "object", "array"):
        raise ValueError(f"instance_config.instance_type {parsed.instance_type!r}: supported values are object, array")
    if parsed.included_fields and parsed.excluded_fields:
        raise ValueError("instance_config: when included_fields is populated, excluded_fields must be empty")
    if (
        parsed.instance_type
        and instances_format != "jsonl"
        and (instances_format, parsed.instance_type) != ("csv", "array")
    ):
        raise ValueError(f"instance_config.instance_type {parsed.instance_type!r} does not apply to {instances_format}")
    if instances_format not in _FIELD_FORMATS and (
        parsed.key_field or parsed.included_fields or parsed.excluded_fields
    ):
        raise ValueError(
            f"instance_config: key_field, included_fields and excluded_fields pick fields of jsonl objects and csv "
            f"rows; {instances_format} records are sent whole as {{'b64': ...}}"
        )
    return parsed


def vertex_instances(stream, instances_format: str, config: VertexInstanceConfig, files: Files) -> Iterator[Item]:
    """The instances of one input file (a binary stream), as Vertex converts them; ValueError for a file that cannot
    give any (a CSV header lacking a named column)."""
    if instances_format == "jsonl":
        return _jsonl(stream, config)
    if instances_format == "csv":
        return _csv(stream, config)
    if instances_format == "file-list":
        return _file_list(stream, files)
    return _tf_record(gzip.GzipFile(fileobj=stream) if instances_format == "tf-record-gzip" else stream)


def _b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode("ascii")}


def _jsonl(stream, config: VertexInstanceConfig) -> Iterator[Item]:
    for number, line in enumerate(stream, 1):
        text = line.strip()
        if not text:
            continue
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            yield Item(text.decode("utf-8", "replace"), error=f"line {number} is not JSON: {e}")
            continue
        yield _shape(value, config)


def _shape(value, config: VertexInstanceConfig) -> Item:
    """One JSON line's instance under the instance config."""
    picks = config.key_field or config.included_fields or config.excluded_fields
    if not isinstance(value, dict):
        if picks or config.instance_type == "object":
            return Item(value, error="instance_config needs a JSON object on each line; this line is not one")
        if config.instance_type == "array" and not isinstance(value, list):
            return Item(value, error="instance_type 'array': this line is neither an object nor an array")
        return Item(value, instance=value)
    fields = dict(value)
    key = None
    if config.key_field:
        if config.key_field not in fields:
            return Item(value, error=f"the object has no key_field {config.key_field!r}")
        key = fields.pop(config.key_field)
    if config.included_fields:
        missing = [f for f in config.included_fields if f not in fields]
        if missing:
            return Item(value, key, error=f"the object has no included_fields {missing}")
        fields = {f: fields[f] for f in config.included_fields}
    fields = {k: v for k, v in fields.items() if k not in config.excluded_fields}
    if config.instance_type == "array":
        if not config.included_fields:
            return Item(value, key, error="instance_type 'array' needs included_fields to order an object's values")
        return Item(value, key, list(fields.values()))
    return Item(value, key, fields)


def _csv_fields(text: str) -> tuple[list[tuple[str, bool]] | None, str | None]:
    """The (value, quoted) fields of a CSV record, or None while a quoted value is still open; or an error."""
    fields: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == '"':
            parts, j = [], i + 1
            while True:
                end = text.find('"', j)
                if end < 0:
                    return None, None
                parts.append(text[j:end])
                if text.startswith('""', end):
                    parts.append('"')
                    j = end + 2
                    continue
                i = end + 1
                break
            fields.append(("".join(parts), True))
            if i < n and text[i] != ",":
                return fields, f"text after a closing quote at column {i + 1}"
        else:
            end = text.find(",", i)
            end = n if end < 0 else end
            if '"' in text[i:end]:
                return fields, f"a double quote inside an unquoted value at column {i + 1}"
            fields.append((text[i:end], False))
            i = end
        if i >= n:
            return fields, None
        i += 1


def _csv_records(stream) -> Iterator[tuple[str, list[tuple[str, bool]], str | None]]:
    """(the record's text, its fields, an error) for each non-blank CSV record, a quoted value may span lines."""
    pending = ""
    for number, raw in enumerate(stream):
        try:
            line = raw.decode("utf-8-sig" if number == 0 else "utf-8")
        except UnicodeDecodeError:
            yield raw.decode("utf-8", "replace").rstrip("\r\n"), [], "the record is not valid UTF-8"
            pending = ""
            continue
        text = pending + line.rstrip("\r\n")
        if not text.strip():
            pending = ""
            continue
        fields, error = _csv_fields(text)
        if fields is None:
            pending = text + "\n"
            continue
        pending = ""
        if error is None and any(quoted and ("\n" in v or "\r" in v) for v, quoted in fields):
            error = "a value holds a newline, which Vertex does not accept in CSV"
        yield text, fields, error
    if pending:
        yield pending.rstrip("\n"), [], "a quoted value is not closed before the end of the file"


def _csv_value(text: str, quoted: bool):
    """A quoted value is a string; an unquoted one a float."""
    if quoted:
        return text
    if not _DECIMAL.fullmatch(text.strip()):
        raise ValueError(
            f"the unquoted value {text!r} is not a number (Vertex reads values without quotes as floating point "
            "numbers; enclose strings in double quotes)"
        )
    return float(text)


def _csv(stream, config: VertexInstanceConfig) -> Iterator[Item]:
    records = _csv_records(stream)
    first = next(records, None)
    if first is None:
        return
    text, fields, error = first
    if error:
        raise ValueError(f"the CSV header: {error}")
    header = [name if quoted else name.strip() for name, quoted in fields]
    named = [config.key_field] if config.key_field else []
    missing = [f for f in [*named, *config.included_fields] if f not in header]
    if missing:
        raise ValueError(f"the CSV header {header} has no column(s) {missing} named by instance_config")
    if config.included_fields:
        columns = [header.index(f) for f in config.included_fields]
    else:
        columns = [i for i, h in enumerate(header) if h != config.key_field and h not in config.excluded_fields]
    key = header.index(config.key_field) if config.key_field else None
    for text, fields, error in records:
        if error is None and len(fields) != len(header):
            error = f"the row has {len(fields)} values; the header has {len(header)}"
        if error is None:
            try:
                values = [_csv_value(v, quoted) for v, quoted in fields]
            except ValueError as e:
                error = str(e)
        if error is not None:
            yield Item(text, error=error)
            continue
        yield Item(values, None if key is None else values[key], [values[i] for i in columns])


def _tf_record(stream) -> Iterator[Item]:
    """Records framed as `uint64 length, uint32 masked CRC-32C of length, data, uint32 masked CRC-32C of data`."""
    index = 0
    while True:
        header = stream.read(12)
        if not header:
            return
        where = f"record {index}"
        if len(header) < 12:
            yield Item(where, error="the file ends inside a record's length")
            return
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc(header[:8]) != length_crc:
            yield Item(
                where, error="the record's length is corrupt (its checksum differs); the rest of the file is lost"
            )
            return
        data, footer = stream.read(length), stream.read(4)
        if len(data) < length or len(footer) < 4:
            yield Item(where, error="the file ends inside a record")
            return
        if struct.unpack("<I", footer)[0] != masked_crc(data):
            yield Item(where, error="the record's data is corrupt (its checksum differs)")
        else:
            value = _b64(data)
            yield Item(value, instance=value)
        index += 1


def _file_list(stream, files: Files) -> Iterator[Item]:
    from google.api_core.exceptions import GoogleAPICallError

    for raw in stream:
        uri = raw.decode("utf-8", "replace").strip()
        if not uri:
            continue
        if not uri.startswith("gs://"):
            yield Item(uri, error=f"{uri!r} is not a Cloud Storage URI (gs://...)")
            continue
        try:
            data = files.read(uri)
        except (OSError, GoogleAPICallError) as e:
            yield Item(uri, error=f"cannot read {uri}: {str(e)[:300]}")
            continue
        yield Item(uri, instance=_b64(data))
