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


def _key(number: int) -> bytes:
    return _varint(number << 3 | 2)  # a length-delimited field (wire type 2)


def _field(number: int, *parts: bytes) -> list[bytes]:
    """A length-delimited field of the concatenated `parts`, as parts (joined once, at the end: an image's bytes
    are not copied at every level of nesting)."""
    return [_key(number), _varint(sum(map(len, parts))), *parts]


def _feature(kind: str, value) -> list[bytes]:
    """A `Feature`: bytes_list (1) of one value, float_list (2) or int64_list (3), lists packed."""
    if kind == "bytes":
        return _field(1, *_field(1, value))
    if kind == "float":
        values = np.asarray(value, dtype="<f4")
        return _field(2, *(_field(1, values.tobytes()) if len(values) else []))
    return _field(3, *_field(1, b"".join(_varint(int(v)) for v in value)))


def encode_example(key: str, label: int, value, kind: str) -> bytes:
    """One record of the prepared-data contract: `key`, `label` and `image` (the raw bytes of a uint8 H×W×C array)
    or `features` (a float vector)."""
    features = {"key": ("bytes", key.encode()), "label": ("int64", [int(label)])}
    if kind == IMAGE:
        features["image"] = ("bytes", np.ascontiguousarray(value, dtype=np.uint8).reshape(-1).data)  # no copy
    else:
        features["features"] = ("float", value)
    entries = [
        part
        for name in sorted(features)
        for part in _field(1, *_field(1, name.encode()), *_field(2, *_feature(*features[name])))
    ]
    return b"".join(_field(1, *entries))


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
