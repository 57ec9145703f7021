"""A finder that wraps the execution of named modules when they are first imported (this process's own patches, made
at import time instead of after)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

ExecModule = Callable[[ModuleType], None]


class WrapExecution(importlib.abc.MetaPathFinder):
    """Finds `name` in `wraps` with the other finders, then executes it through `wraps[name](exec_module)`."""

    def __init__(self, wraps: dict[str, Callable[[ExecModule], ExecModule]]):
        self.wraps = wraps

    def find_spec(self, name, path, target=None):
        if name not in self.wraps:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader.exec_module = self.wraps[name](spec.loader.exec_module)
        return spec
