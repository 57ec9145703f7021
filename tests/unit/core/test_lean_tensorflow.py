"""core.lean_tensorflow: TensorFlow and tf-keras load without JAX, pandas and SciPy, which load as usual after; one
loaded before stays what TensorFlow uses; installed once."""

import subprocess
import sys

CODE = """
import sys
import pandas  # loaded before: TensorFlow's Keras takes DataFrames as usual
import trainer  # installs the lean import, as every package that imports TensorFlow does
import tensorflow as tf
tf.keras.layers.Dense
from tensorflow.lite.python import util
from tf_keras.src.engine import data_adapter
loaded = [name for name in ("jax", "scipy") if name in sys.modules]
import jax, scipy.sparse
from core import lean_tensorflow
lean_tensorflow.install()  # again: nothing more
finders = sum(isinstance(f, lean_tensorflow._LeanImport) for f in sys.meta_path)
print(loaded, util._jit is None, data_adapter.pd is pandas, jax.jit is not None, scipy.sparse.issparse(1), finders)
"""


def test_tensorflow_loads_without_jax_and_scipy_which_load_after_and_pandas_loaded_before_is_used():
    env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": ""}
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "[] True True True False 1"
