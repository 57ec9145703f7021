"""Pipeline steps: each module holds a plain function that does the work and a thin KFP component around it."""

from core import lean_tensorflow

lean_tensorflow.install()  # before anything of this package imports TensorFlow
