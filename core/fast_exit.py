"""A quicker end for processes that loaded TensorFlow or JAX: the steps, the trainer's workers.

At exit the interpreter garbage-collects the whole heap several times while it tears the modules down, which is slow
with TensorFlow's objects on it, and every step of a run waits for it before the next can start.
`skip_exit_collection` freezes the heap as the exit begins (`gc.freeze`: the interpreter's collections then skip
every object alive at that point). Objects are still freed by reference count; only garbage in reference cycles is
left to the operating system, which is why every writer here closes or flushes its files before its process returns.
"""

import atexit
import gc


def skip_exit_collection() -> None:
    """At this process's exit, freeze the heap before the interpreter's teardown collects it."""
    atexit.register(gc.freeze)
