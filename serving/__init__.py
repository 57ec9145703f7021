"""A TensorFlow-Serving-compatible model server (REST + gRPC), its client and the JSON/tensor codec."""
