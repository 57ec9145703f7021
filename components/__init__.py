"""Pipeline steps: each module holds a plain function that does the work and a thin KFP component around it."""

from core import lazy_modules, lean_tensorflow

lean_tensorflow.install()  # before anything of this package imports TensorFlow
lazy_modules.install()  # the Vertex steps load the one aiplatform_v1 service they call
