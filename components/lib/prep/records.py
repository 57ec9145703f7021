"""TFRecord files of `tf.train.Example`s without TensorFlow (data prep's output, read by `trainer.data`), and the
reader of the batch predictor's tf-record instances.

Data prep only writes records: importing TensorFlow for that would cost its step seconds of start-up. The two
formats are small and fixed:
- a TFRecord file is a sequence of `uint64 length, uint32 masked CRC-32C of length, data, uint32 masked CRC-32C of
  data` (little-endian), as `tf.io.TFRecordWriter` writes them;
- `encode_example` writes the `tf.train.Example` protobuf of this project's records (`key` bytes, `label` int64,
  `image` bytes or `features` floats) with its fields in sorted order, byte for byte what
  `tf.train.Example.SerializeToString(deterministic=True)` gives (tests/unit/components/test_records.py checks both against
  TensorFlow).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import google_crc32c
import numpy as np

from core.schema import IMAGE

_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated right by 15 bits, plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_varint(n) for n in range(1 << 14)]  # the lengths and labels of nearly every record


def _v(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < 1 << 14 else _varint(value)


_NAMES = {name: b"\x0a" + _varint(len(name)) + name.encode() for name in ("features", "image", "key", "label")}
_LIST_TAGS = {"bytes": b"\x0a", "float": b"\x12", "int64": b"\x1a"}  # Feature's oneof: bytes_list, float_list, ...


def _entry(name: str, kind: str, data) -> tuple[bytes, int]:
    """A `Features` map entry, key (field 1) the name and value (field 2) a Feature whose list holds `data` (one
    bytes value, or numbers packed; an empty float list has no field): the bytes before `data`, and the entry's
    size with it. The caller joins them once, so that an image's bytes are not copied at every level of nesting.
    The bytes before `data` depend only on its length: they are kept (a data set's records have a few lengths)."""
    n = len(data)
    head = _HEADS.get((name, kind, n))
    if head is None:
        if len(_HEADS) >= 4096:
            _HEADS.clear()
        inner = b"\x0a" + _v(n) if n or kind != "float" else b""
        feature = _LIST_TAGS[kind] + _v(len(inner) + n) + inner
        value_head = b"\x12" + _v(len(feature) + n)
        label = _NAMES[name]
        head = b"\x0a" + _v(len(label) + len(value_head) + len(feature) + n) + label + value_head + feature
        _HEADS[name, kind, n] = head
    return head, len(head) + n


_HEADS: dict[tuple[str, str, int], bytes] = {}


def encode_example(key: str, label: int, value, kind: str) -> bytes:
    """One record of the prepared-data contract: `key`, `label` and `image` (the raw bytes of a uint8 H×W×C array)
    or `features` (a float vector, or its little-endian float32 bytes)."""
    data: bytes | memoryview
    if kind == IMAGE:
        name, list_kind, data = "image", "bytes", np.ascontiguousarray(value, dtype=np.uint8).reshape(-1).data
    else:
        name, list_kind = "features", "float"
        data = value if isinstance(value, bytes) else np.asarray(value, dtype="<f4").tobytes()
    head, size = _entry(name, list_kind, data)
    key_bytes = key.encode()
    key_head, key_size = _entry("key", "bytes", key_bytes)
    label_entry, label_size = _label_entry(label)
    return b"".join((b"\x0a", _v(size + key_size + label_size), head, data, key_head, key_bytes, label_entry))


_LABELS: dict[int, tuple[bytes, int]] = {}


def _label_entry(label: int) -> tuple[bytes, int]:
    """The `label` entry (its varint inside): the same few for every record, kept."""
    entry = _LABELS.get(label)
    if entry is None:
        packed = _varint(int(label))
        head, _ = _entry("label", "int64", packed)
        entry = _LABELS[label] = (head + packed, len(head) + len(packed))
    return entry


def read_records(stream) -> Iterator[bytes | str]:
    """The records of a TFRecord stream; a corruption message instead of a record whose data checksum fails, and
    last when the framing is broken (the rest of the file cannot be read). Not `tf.data.TFRecordDataset`: it ends
    the whole file at the first corrupt record, where each record must become one result or one error line."""
    while True:
        head = stream.read(12)
        if not head:
            return
        if len(head) < 12 or struct.unpack("<I", head[8:])[0] != masked_crc(head[:8]):
            yield "corrupted TFRecord: truncated or bad length checksum; the rest of the file is unreadable"
            return
        length = struct.unpack("<Q", head[:8])[0]
        data, footer = stream.read(length), stream.read(4)
        if len(data) < length or len(footer) < 4:
            yield "corrupted TFRecord: truncated record"
            return
        yield data if struct.unpack("<I", footer)[0] == masked_crc(data) else "corrupted TFRecord: bad data checksum"


class TFRecordWriter:
    """Writes records in TFRecord framing (no compression) to a local file or a gs:// object; `bytes` counts what
    it wrote. A context manager."""

    def __init__(self, path: str):
        from core.storage import open_write

        self._file = open_write(path)
        self.bytes = 0

    def write(self, record: bytes) -> None:
        length = struct.pack("<Q", len(record))
        framed = length + struct.pack("<I", masked_crc(length)) + record + struct.pack("<I", masked_crc(record))
        self._file.write(framed)
        self.bytes += len(framed)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
