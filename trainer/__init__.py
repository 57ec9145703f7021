"""Training application: `python -m trainer.task` (also the trainer container's entry point)."""

from core import lean_tensorflow

lean_tensorflow.install()  # before anything of this package imports TensorFlow
