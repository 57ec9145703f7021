"""TensorProto <-> numpy on the gRPC path: the same tensors TensorFlow's helpers read and write."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from serving import tensors

ARRAYS = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
    np.array([[1, -2], [3, 4]], dtype=np.int64),
    np.array([0, 255, 7], dtype=np.uint8),
    np.array([True, False]),
    np.zeros((0, 5), np.float32),
    np.float32(2.5),
    np.array([b"png bytes", b""], dtype=object),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{np.asarray(a).dtype}{np.shape(a)}")
def test_what_tensorflow_writes_reads_back_and_what_we_write_tensorflow_reads(array):
    np.testing.assert_array_equal(tensors.to_array(tf.make_tensor_proto(array)), array)
    proto = tensor_pb2.TensorProto()
    tensors.fill(proto, array)
    read = tf.make_ndarray(proto)
    np.testing.assert_array_equal(read, array)
    assert read.shape == np.shape(array) and (read.dtype == np.asarray(array).dtype or read.dtype == object)


def test_a_batch_is_written_byte_for_byte_as_tensorflow_writes_it():
    batch = np.random.default_rng(0).random((32, 28, 28, 1), dtype=np.float32)
    proto = tensor_pb2.TensorProto()
    tensors.fill(proto, batch)
    assert proto == tf.make_tensor_proto(batch)


def test_values_in_the_typed_fields_are_read_too():
    """Clients may send small tensors in float_val / int64_val instead of tensor_content."""
    proto = tensor_pb2.TensorProto(dtype=tf.float32.as_datatype_enum, float_val=[1.5, 2.5])
    proto.tensor_shape.dim.add().size = 2
    np.testing.assert_array_equal(tensors.to_array(proto), np.array([1.5, 2.5], np.float32))
