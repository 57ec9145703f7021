"""Data prep's sources read where they live (local paths or gs:// objects), a piece at a time: nothing downloads a
whole source, and no piece holds more than one range of a CSV or one image.

- CSV files (one, or every file a glob matches): `plan_csv` reads each file once and cuts it into ranges of about
  `range_bytes` that end at line ends; `read_csv_range` parses one range. A row is a line (a quoted field may not
  span lines); its key is its file name and content, so identical rows share a split.
- Image folders (`<root>/<class>/...`): `list_folder` lists them, `write_listing` writes the listing to a file in
  work items of `ImageFiles` (ranges of it), `read_images` reads one item; each image is read in one go
  (`components.lib.prep.sources`).
"""

from __future__ import annotations

import csv
import fnmatch
import glob
import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from components.lib.prep.sources import (
    IMAGE_EXTENSIONS,
    BadRecord,
    DataError,
    file_kind,
    folder_files,
)
from core.storage import (
    RANGE_BYTES,
    gcs_client,
    gcs_objects,
    is_gcs,
    open_read,
    open_write,
    read_object,
    split_gcs,
)


def match_gcs(pattern: str, fields: str = "items(name),nextPageToken") -> list:
    """The objects a gs:// glob matches, sorted by name (`fields` trims the listing; keep nextPageToken)."""
    bucket, name = split_gcs(pattern)
    fixed = name[: min(name.index(c) for c in "*?[" if c in name)]
    blobs = gcs_client().list_blobs(bucket, prefix=fixed, fields=fields)
    return sorted((b for b in blobs if fnmatch.fnmatchcase(b.name, name)), key=lambda b: b.name)


def match_files(pattern: str) -> list[str]:
    """The files a glob matches (local or gs://), sorted; FileNotFoundError when none."""
    if is_gcs(pattern):
        bucket, _ = split_gcs(pattern)
        found = [f"gs://{bucket}/{b.name}" for b in match_gcs(pattern)]
    else:
        found = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not found:
        raise FileNotFoundError(f"nothing found at {pattern}")
    return found


def list_folder(root: str) -> list[str]:
    """Every file under the folder `root` (no trailing slash) as its path relative to it (its URI: `root/path`),
    sorted: a walk, or a GCS listing."""
    if not is_gcs(root):
        if not os.path.isdir(root):
            raise DataError(f"image folder not found: {root}")
        return folder_files(root)
    folder, blobs = gcs_objects(root, fields="items(name),nextPageToken")
    if folder is None:  # one object: a CSV would have been read as one
        file_kind(root, root)
        raise DataError(f"{root} is a file, not an image folder")
    return sorted(b.name[len(folder) :] for b in blobs)


@dataclass(frozen=True)
class ImageFiles:
    """A work item of the image folder `root`: the files at positions `first`, `first + 1`, ... of its listing,
    which are the lines in bytes [start, end) of the listing file `listing` (a path relative to `root` per line, as
    a JSON string). The listing rides in a file, not in the pipeline's description, which then stays the same size
    for ten images or ten million (Dataflow refuses a job graph over 10 MB: about 400,000 paths)."""

    root: str
    listing: str
    first: int
    start: int
    end: int


def write_listing(root: str, files: list[str], uri: str, per_item: int) -> list[ImageFiles]:
    """Write `files` (relative to `root`) to the listing file `uri`; the work items of `per_item` files each."""
    lines = [json.dumps(rel).encode() + b"\n" for rel in files]
    items, position = [], 0
    for first in range(0, len(lines), per_item):
        size = sum(map(len, lines[first : first + per_item]))
        items.append(ImageFiles(root, uri, first, position, position + size))
        position += size
    with open_write(uri) as f:
        f.write(b"".join(lines))
    return items


def read_images(item: ImageFiles) -> Iterator[tuple[str, str, tuple, str | BadRecord]]:
    """The records of an image work item: (key: the relative path, label: the class folder, position, URI), or the
    BadRecord of a file that is no PNG or JPEG."""
    with open_read(item.listing) as f:
        f.seek(item.start)
        data = f.read(item.end - item.start)
    for offset, line in enumerate(data.splitlines()):
        rel = json.loads(line)
        image = os.path.splitext(rel)[1].lower() in IMAGE_EXTENSIONS
        value = f"{item.root}/{rel}" if image else BadRecord("not a PNG or JPEG file")
        yield rel, rel.split("/", 1)[0], (item.first + offset,), value


@dataclass(frozen=True)
class CsvRange:
    file: int  # index in CsvPlan.files
    start: int  # byte offsets: [start, end), whole lines
    end: int
    first_line: int  # the line number (1: the header) of the range's first line


@dataclass(frozen=True)
class CsvPlan:
    files: list[str]
    header: list[str]
    label_index: int
    feature_names: list[str]
    ranges: list[CsvRange]
    lines: int  # data lines of every file (blank ones included): the rows to expect, at most


def _parse_header(line: bytes, uri: str) -> list[str]:
    try:
        text = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise DataError(f"the header of {uri} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    row = next(csv.reader([text]), [])
    if not any(cell.strip() for cell in row):
        raise DataError(f"{uri} is empty (a header row is required)")
    return [h.strip() for h in row]


def plan_csv(files: list[str], label_column: str, range_bytes: int = RANGE_BYTES) -> CsvPlan:
    """Read each CSV file once: its header (the same in every file), and ranges of whole lines of about
    `range_bytes`."""
    header: list[str] = []
    ranges: list[CsvRange] = []
    lines = 0
    for index, uri in enumerate(files):
        with open_read(uri) as f:
            first = f.readline()
            this = _parse_header(first, uri)
            if index and this != header:
                raise DataError(f"{uri} has the columns {this}, {files[0]} has {header}: every file needs the same")
            header = this
            position, line = len(first), 2
            while True:
                chunk = f.read(range_bytes)
                if not chunk:
                    break
                if not chunk.endswith(b"\n"):
                    chunk += f.readline()
                ranges.append(CsvRange(index, position, position + len(chunk), line))
                count = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
                position, line, lines = position + len(chunk), line + count, lines + count
    if label_column not in header:
        raise DataError(f"label column {label_column!r} not in {files[0]}; columns are: {', '.join(header)}")
    label_index = header.index(label_column)
    feature_names = [h for i, h in enumerate(header) if i != label_index]
    if not feature_names:
        raise DataError(f"{files[0]} has no feature columns besides {label_column!r}")
    return CsvPlan(files, header, label_index, feature_names, ranges, lines)


def read_csv_range(plan: CsvPlan, r: CsvRange) -> Iterator[tuple[str, str, tuple, bytes | BadRecord]]:
    """The rows of one range (read in one request): (key, label, position, features as little-endian float32
    bytes), or the BadRecord of a bad row in its place. A row is a line, cut at "\\n" only (as `plan_csv` counts
    them): a line that is not UTF-8, that the csv module cannot parse, or whose quoted field runs on past its end is
    a bad row, named by its line numbers."""
    uri = plan.files[r.file]
    data = read_object(uri, r.end - r.start, r.start)
    name, width, label_index = os.path.basename(uri), len(plan.header), plan.label_index
    pack = struct.Struct(f"<{width - 1}f").pack
    try:
        text, utf8 = data.decode("utf-8"), True
    except UnicodeDecodeError:  # the lines that are UTF-8 go on; the others are bad rows
        text, utf8 = data.decode("utf-8", "surrogateescape"), False
    lines = text.split("\n")
    rows = csv.reader(lines)
    line_no = r.first_line  # the line the next row starts on
    while True:
        try:
            row = next(rows)
            error = None
        except StopIteration:
            return
        except csv.Error as e:
            row, error = [lines[rows.line_num - 1]], f"line {line_no}: {e}"
        first, line_no = line_no, r.first_line + rows.line_num
        if not (row and row[0].strip()) and not any(cell.strip() for cell in row):
            continue  # blank line
        key, position = f"{name}:{','.join(row)}", (r.file, first)
        if not utf8 and not _is_utf8(key):
            key = key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            error = error or f"line {first}: not UTF-8 text"
        if line_no - first > 1:
            error = f"lines {first}-{line_no - 1}: a quoted field runs on past the end of line {first}"
        if error is not None:
            yield key, "", position, BadRecord(error)
            continue
        if len(row) != width:
            yield key, "", position, BadRecord(f"line {first}: {len(row)} fields, header has {width}")
            continue
        label = row.pop(label_index).strip()
        if not label:
            yield key, label, position, BadRecord(f"line {first}: empty label")
            continue
        try:
            values = list(map(float, row))
            if all(map(math.isfinite, values)):
                yield key, label, position, pack(*values)  # raises OverflowError past float32's range
                continue
        except (ValueError, OverflowError):
            pass
        yield key, label, position, bad_features(row, plan.feature_names, first)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a byte that was no UTF-8, kept as a lone surrogate
        return False
    return True


def bad_features(values: list[str], feature_names: list[str], line_no: int) -> BadRecord:
    """The BadRecord of a row's feature cells, naming the first that is no finite float32."""
    for name, cell in zip(feature_names, values):
        try:
            with np.errstate(over="ignore"):
                number = np.float32(float(cell))
        except ValueError:
            return BadRecord(f"line {line_no}: column {name!r}: {cell!r} is not a number")
        if not np.isfinite(number):
            return BadRecord(f"line {line_no}: column {name!r}: {cell!r} is not finite")
    raise AssertionError(f"line {line_no}: every feature is a finite number")
