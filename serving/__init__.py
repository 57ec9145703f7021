"""A TensorFlow-Serving-compatible model server (REST + gRPC), its client and the JSON/tensor codec."""

from core import lean_tensorflow

lean_tensorflow.install()  # before anything of this package imports TensorFlow
