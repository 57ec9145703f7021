"""TFRecord files of Examples written without TensorFlow: the bytes TensorFlow itself writes, and read back."""

import io

import numpy as np
import pytest
import tensorflow as tf

from components.lib.prep.records import TFRecordWriter, encode_example, read_records


def serialize_example(key: str, label: int, value, kind: str) -> bytes:
    """The Example TensorFlow's own protos make of a record: the reference `encode_example` must equal."""
    feature = {
        "key": tf.train.Feature(bytes_list=tf.train.BytesList(value=[key.encode()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    if kind == "image":
        feature["image"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.tobytes()]))
    else:
        feature["features"] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in value]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.mark.parametrize(
    "key, label, value, kind",
    [
        (
            "flowers/roses/1.jpg",
            3,
            np.arange(40 * 40 * 3, dtype=np.uint32).astype(np.uint8).reshape(40, 40, 3),
            "image",
        ),
        ("digits/0001", 0, np.zeros((8, 8, 1), np.uint8), "image"),
        ("iris/0007", 2, np.array([5.1, 3.5, -1.4, 0.2], np.float32), "tabular"),
        ("wine.csv:1,2#1", 200, np.array([1e30, -0.0, 7.25], np.float32), "tabular"),
        ("empty", 1, np.array([], np.float32), "tabular"),
        ("k" * 20_000, -3, np.arange(300, dtype=np.float32), "tabular"),  # lengths past two-byte varints
        ("big", 1 << 40, np.full((120, 120, 3), 7, np.uint8), "image"),
    ],
)
def test_encode_example_is_tensorflows_deterministic_serialization(key, label, value, kind):
    ours = encode_example(key, label, value, kind)
    assert ours == tf.train.Example.FromString(serialize_example(key, label, value, kind)).SerializeToString(
        deterministic=True
    )
    parsed = tf.train.Example.FromString(ours).features.feature
    assert parsed["key"].bytes_list.value == [key.encode()] and parsed["label"].int64_list.value == [label]


def test_features_given_as_their_float32_bytes_encode_as_the_vector():
    value = np.array([1.5, -2.0, 3.25e-7], np.float32)
    assert encode_example("k", 2, value.astype("<f4").tobytes(), "tabular") == encode_example("k", 2, value, "tabular")


def test_writer_writes_tensorflows_framing(tmp_path):
    records = [encode_example(f"k{i}", i, np.full((4, 4, 1), i, np.uint8), "image") for i in range(5)] + [b""]
    with TFRecordWriter(str(tmp_path / "ours.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    assert (tmp_path / "ours.tfrecord").read_bytes() == (tmp_path / "tf.tfrecord").read_bytes()
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours.tfrecord"))] == records


def test_reader_reads_tensorflows_records_and_names_each_corruption(tmp_path):
    path = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in (b"first", b"", b"third"):
            writer.write(record)
    data = path.read_bytes()
    assert list(read_records(io.BytesIO(data))) == [b"first", b"", b"third"]
    flipped = bytearray(data)
    flipped[12] ^= 1  # the first record's data: that record fails, the next ones are read
    assert list(read_records(io.BytesIO(bytes(flipped)))) == ["corrupted TFRecord: bad data checksum", b"", b"third"]
    assert list(read_records(io.BytesIO(data[:-2]))) == [b"first", b"", "corrupted TFRecord: truncated record"]
    flipped = bytearray(data)
    flipped[0] ^= 1  # the first length: nothing after it can be framed
    assert list(read_records(io.BytesIO(bytes(flipped)))) == [
        "corrupted TFRecord: truncated or bad length checksum; the rest of the file is unreadable"
    ]
