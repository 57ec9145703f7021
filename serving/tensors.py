"""TensorProto (the gRPC API's tensors) to and from numpy arrays without TensorFlow's Python helpers on the common
path: a numeric tensor's `tensor_content` is its array's bytes, read with `np.frombuffer` and written with
`tobytes`. `tf.make_ndarray` / `tf.make_tensor_proto` handle the rest (strings, values in the typed `*_val` fields):
their Python work per call would weigh on every request of a small model."""

from __future__ import annotations

import numpy as np
from tensorflow.core.framework import tensor_pb2, types_pb2

_NUMPY = {
    types_pb2.DT_FLOAT: np.float32,
    types_pb2.DT_DOUBLE: np.float64,
    types_pb2.DT_HALF: np.float16,
    types_pb2.DT_INT8: np.int8,
    types_pb2.DT_INT16: np.int16,
    types_pb2.DT_INT32: np.int32,
    types_pb2.DT_INT64: np.int64,
    types_pb2.DT_UINT8: np.uint8,
    types_pb2.DT_UINT16: np.uint16,
    types_pb2.DT_UINT32: np.uint32,
    types_pb2.DT_UINT64: np.uint64,
    types_pb2.DT_BOOL: np.bool_,
}
_ENUM = {np.dtype(numpy): enum for enum, numpy in _NUMPY.items()}
_LITTLE = np.little_endian  # tensor_content is in the host's byte order, as TensorFlow writes it


def to_array(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """The array of a TensorProto."""
    numpy = _NUMPY.get(proto.dtype)
    if numpy is not None and proto.tensor_content and _LITTLE:
        shape = [d.size for d in proto.tensor_shape.dim]
        return np.frombuffer(proto.tensor_content, dtype=numpy).reshape(shape)
    import tensorflow as tf

    return tf.make_ndarray(proto)


def fill(proto: tensor_pb2.TensorProto, array: np.ndarray) -> None:
    """Write `array` into the (empty) TensorProto `proto`, e.g. a response's `outputs[name]`."""
    array = np.asarray(array)
    enum = _ENUM.get(array.dtype)
    if enum is None or not _LITTLE:
        import tensorflow as tf

        proto.CopyFrom(tf.make_tensor_proto(array))
        return
    proto.dtype = enum
    proto.tensor_shape.SetInParent()  # a scalar's shape is there, empty
    for size in array.shape:
        proto.tensor_shape.dim.add().size = size
    proto.tensor_content = np.ascontiguousarray(array).tobytes()
