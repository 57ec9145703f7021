"""TensorFlow and tf-keras imported without three libraries they load at import for features this project does not
use: JAX (TFLite's conversion of JAX functions), pandas (Keras's DataFrame inputs) and SciPy (legacy Keras's sparse
inputs). Both handle their absence (`except ImportError`), and without them every trainer, trial, step and server
process starts faster (about a quarter of TensorFlow's import). Each library is hidden only while TensorFlow or
tf-keras executes its import, and only if this process has not loaded it already: imported later, it loads as
usual. `install` before anything imports TensorFlow; a process that imported it already is left as it is."""

from __future__ import annotations

import sys

from core.import_hooks import ExecModule, WrapExecution

HIDDEN = ("jax", "pandas", "scipy")
PACKAGES = ("tensorflow", "tf_keras")


def _lean(exec_module: ExecModule) -> ExecModule:
    def lean(module):
        hidden = [library for library in HIDDEN if library not in sys.modules]
        for library in hidden:
            sys.modules[library] = None  # an import of it raises ImportError
        try:
            exec_module(module)
        finally:
            for library in hidden:
                if sys.modules.get(library, 0) is None:
                    del sys.modules[library]

    return lean


class _LeanImport(WrapExecution):
    def __init__(self):
        super().__init__(dict.fromkeys(PACKAGES, _lean))


def install() -> None:
    """Import TensorFlow and tf-keras lean in this process from now on (once; nothing if TensorFlow is loaded)."""
    if "tensorflow" in sys.modules or any(isinstance(f, _LeanImport) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _LeanImport())
