"""The `@dsl.pipeline` decorator the training and batch prediction DAGs are built with."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kfp import dsl


def pipeline(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`dsl.pipeline(**options)`, applied (which builds the DAG) in a thread of its own; its exceptions are raised
    here. KFP's task setters (CPU, memory, environment, image) call `inspect.stack()`, which scans every module of
    `sys.modules` for each frame of a file no module owns, such as the `<frozen runpy>` frames of `python -m`
    (CPython gh-92041): a new thread's stack holds no such frame."""

    def apply(func: Callable[..., Any]) -> Any:
        with ThreadPoolExecutor(1, thread_name_prefix="dag") as pool:
            return pool.submit(dsl.pipeline(**options), func).result()

    return apply
