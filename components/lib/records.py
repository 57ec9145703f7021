"""TFRecord files of `tf.train.Example`s without TensorFlow (data prep's output, read by `trainer.data`), and the
reader of the batch predictor's tf-record instances.

Data prep only writes records: importing TensorFlow for that would cost its step seconds of start-up. The two
formats are small and fixed:
- a TFRecord file is a sequence of `uint64 length, uint32 masked CRC-32C of length, data, uint32 masked CRC-32C of
  data` (little-endian), as `tf.io.TFRecordWriter` writes them;
- `encode_example` writes the `tf.train.Example` protobuf of this project's records (`key` bytes, `label` int64,
  `image` bytes or `features` floats) with its fields in sorted order, byte for byte what
  `tf.train.Example.SerializeToString(deterministic=True)` gives (tests/test_records.py checks both against
  TensorFlow).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import google_crc32c
import numpy as np

from trainer.schema import IMAGE

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


_NAMES = {name: b"\x0a" + _varint(len(name)) + name.encode() for name in ("features", "image", "key", "label")}


def _wrapped(tag: bytes, parts: list, size: int) -> tuple[list, int]:
    """A length-delimited field (`tag`: its key byte) around `parts` of `size` bytes, as (parts, size): joined once,
    at the end, so that an image's bytes are not copied at every level of nesting."""
    head = tag + _varint(size)
    return [head, *parts], size + len(head)


def _feature(kind: str, value) -> tuple[list, int]:
    """A `Feature`: bytes_list (field 1) of one value, float_list (2) or int64_list (3), lists packed."""
    if kind == "bytes":
        return _wrapped(b"\x0a", *_wrapped(b"\x0a", [value], len(value)))
    if kind == "float":
        raw = np.asarray(value, dtype="<f4").tobytes()
        return _wrapped(b"\x12", *(_wrapped(b"\x0a", [raw], len(raw)) if raw else ([], 0)))
    packed = b"".join(_varint(int(v)) for v in value)
    return _wrapped(b"\x1a", *_wrapped(b"\x0a", [packed], len(packed)))


def encode_example(key: str, label: int, value, kind: str) -> bytes:
    """One record of the prepared-data contract: `key`, `label` and `image` (the raw bytes of a uint8 H×W×C array)
    or `features` (a float vector)."""
    features = {"key": ("bytes", key.encode()), "label": ("int64", [int(label)])}
    if kind == IMAGE:
        features["image"] = ("bytes", np.ascontiguousarray(value, dtype=np.uint8).reshape(-1).data)  # no copy
    else:
        features["features"] = ("float", value)
    parts: list = []
    size = 0
    for name in sorted(features):  # a map entry each: key (field 1) the name, value (field 2) the Feature
        label_part = _NAMES[name]
        value_parts, value_size = _wrapped(b"\x12", *_feature(*features[name]))
        entry, entry_size = _wrapped(b"\x0a", [label_part, *value_parts], len(label_part) + value_size)
        parts += entry
        size += entry_size
    return b"".join(_wrapped(b"\x0a", parts, size)[0])


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
        from components.lib.storage import open_write

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
