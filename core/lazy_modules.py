"""PEP 810's `__lazy_modules__` before Python 3.15, for the packages named here: a package `__init__` that lists
modules in `__lazy_modules__` gets, for each `from M import N` statement whose module M is listed, `N` bound on
first use (the module attribute's first read) instead of at import. Everything else in the `__init__` runs as
written. Google's generated clients declare it: `google.cloud.aiplatform_v1` lists its 160 service and type
modules, so a step that uses one service client loads that service instead of all of them.

`install` before anything imports the packages; a package imported already is left as it is."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

from core.import_hooks import ExecModule, WrapExecution

PACKAGES = ("google.cloud.aiplatform_v1",)


def declared(tree: ast.Module) -> frozenset[str]:
    """The module names of the `__lazy_modules__ = {...}` literal at the top level of `tree` (empty: none)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__lazy_modules__" for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def _absolute(node: ast.ImportFrom, package: str) -> str:
    name = "." * node.level + (node.module or "")
    return importlib.util.resolve_name(name, package) if node.level else name


def _deferring(exec_module: ExecModule) -> ExecModule:
    def run(module):
        spec = module.__spec__
        source = spec.loader.get_source(spec.name)
        tree = ast.parse(source, spec.origin) if source else ast.Module(body=[], type_ignores=[])
        lazy = declared(tree)
        if not lazy or sys.version_info >= (3, 15):
            return exec_module(module)
        deferred: dict[str, tuple[str, str]] = {}
        kept = []
        for node in tree.body:
            imported = _absolute(node, spec.name) if isinstance(node, ast.ImportFrom) else ""
            if imported in lazy and all(alias.name != "*" for alias in node.names):
                deferred.update({alias.asname or alias.name: (imported, alias.name) for alias in node.names})
            else:
                kept.append(node)
        tree.body = kept
        exec(compile(tree, spec.origin, "exec"), module.__dict__)

        def __getattr__(name: str) -> object:
            if name not in deferred:
                raise AttributeError(f"module {spec.name!r} has no attribute {name!r}")
            imported, attribute = deferred[name]
            value = getattr(importlib.import_module(imported), attribute)
            setattr(module, name, value)
            return value

        module.__getattr__ = __getattr__
        module.__dir__ = lambda: sorted(set(module.__dict__) | set(deferred))

    return run


class _LazyModules(WrapExecution):
    def __init__(self):
        super().__init__(dict.fromkeys(PACKAGES, _deferring))


def install() -> None:
    """Honour `__lazy_modules__` in PACKAGES imported from now on in this process (once)."""
    if not any(isinstance(f, _LazyModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _LazyModules())
