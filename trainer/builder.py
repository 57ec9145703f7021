"""The model builder a run trains, named `package.module:function` (config `trainer.model`, trainer flag
`--model`): its look-up and the contract the model it returns meets (importable without TensorFlow).

A builder takes the prepared data set's statistics (`stats.json`) and, as keywords, the hyperparameters its
signature declares (trainer.hyperparameters), and returns an uncompiled tf-keras model with one input (the data's
pixel arrays or feature vectors, float32) and one output (class probabilities [N, classes]): the exported signatures
(`trainer.model.serving_signatures`) wrap exactly that.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

DEFAULT_BUILDER = "trainer.model:build_model"
_SPEC = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<function>[A-Za-z_]\w*)$")


class BuilderError(ValueError):
    """The builder cannot be found or loaded, or its model breaks the contract (user-facing message)."""


def parse(spec: str) -> tuple[str, str]:
    """`package.module:function` → (`package.module`, `function`)."""
    match = _SPEC.match(spec)
    if not match:
        raise BuilderError(
            f"{spec!r} is not a builder like package.module:function (a module on the Python path, "
            f"a colon, a function of that module), e.g. {DEFAULT_BUILDER}"
        )
    return match["module"], match["function"]


def _top_level_names(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                names |= _top_level_names(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                names |= _top_level_names(handler.body)
    return names


def find(spec: str) -> str:
    """Check that the builder exists without running its module (which imports TensorFlow: seconds, and nothing
    the compiler needs): the module is on the Python path and defines the function at its top level. Returns the
    module's file."""
    module, function = parse(spec)
    try:
        found = importlib.util.find_spec(module)
    except ImportError as e:  # a parent package is missing
        raise BuilderError(
            f"builder {spec}: cannot import module {module!r} ({e}); put it on the Python path (the "
            "repository's root, or an installed package)"
        ) from None
    if found is None:
        raise BuilderError(
            f"builder {spec}: no module named {module!r} on the Python path (the repository's root, "
            "or an installed package)"
        )
    origin = found.origin or ""
    if origin.endswith(".py"):
        try:
            tree = ast.parse(Path(origin).read_text(), origin)
        except SyntaxError as e:
            raise BuilderError(f"builder {spec}: {origin} line {e.lineno}: {e.msg}") from None
        names = _top_level_names(tree.body)
        if function not in names and "*" not in names:
            raise BuilderError(f"builder {spec}: module {module} ({origin}) has no function {function!r}")
    return origin


def load(spec: str) -> Callable:
    """Import the builder's module and return the function."""
    module, function = parse(spec)
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        where = "" if e.name == module else f" (it imports {e.name!r}, which is not installed)"
        raise BuilderError(f"builder {spec}: cannot import module {module!r}{where}") from e
    builder = getattr(loaded, function, None)
    if builder is None:
        raise BuilderError(f"builder {spec}: module {module} has no function {function!r}")
    if not callable(builder):
        raise BuilderError(f"builder {spec}: {module}.{function} is not callable")
    return builder


def _shape(tensor) -> tuple:
    return tuple(tensor.shape.as_list())


def check(model, stats: dict, spec: str) -> None:
    """Raise BuilderError naming what a built model lacks for training and the exported signatures: a tf-keras
    model, one input taking the prepared data's shape, one output of one probability per class."""
    import tf_keras as keras

    if not isinstance(model, keras.Model):
        raise BuilderError(
            f"builder {spec} returned a {type(model).__module__}.{type(model).__name__}, not a "
            "tf-keras Model (build it with `import tf_keras as keras`: Keras 3 models cannot train "
            "under MultiWorkerMirroredStrategy)"
        )
    if len(model.inputs) != 1:
        raise BuilderError(
            f"builder {spec} returned a model with {len(model.inputs)} inputs; the serving signature "
            "takes one (the pixel array or feature vector)"
        )
    if len(model.outputs) != 1:
        raise BuilderError(
            f"builder {spec} returned a model with {len(model.outputs)} outputs; the serving "
            "signature needs one (the class probabilities)"
        )
    dtype = getattr(model.inputs[0].dtype, "name", model.inputs[0].dtype)
    if dtype != "float32":
        raise BuilderError(
            f"builder {spec} returned a model whose input is {dtype}; the serving signature sends float32"
        )
    data = tuple(stats["input_shape"])
    taken = _shape(model.inputs[0])[1:]
    if len(taken) != len(data) or any(t is not None and t != d for t, d in zip(taken, data)):
        raise BuilderError(
            f"builder {spec} returned a model whose input takes {list(taken)} per example; the data "
            f"gives {list(data)} (None: any size)"
        )
    dtype = getattr(model.outputs[0].dtype, "name", model.outputs[0].dtype)
    if dtype != "float32":
        raise BuilderError(
            f"builder {spec} returned a model whose output is {dtype}; the probabilities must be float32: give the "
            'output layer dtype="float32" (mixed precision computes the other layers in 16 bits)'
        )
    classes = len(stats["labels"])
    given = _shape(model.outputs[0])[1:]
    if given != (classes,):
        raise BuilderError(
            f"builder {spec} returned a model whose output is {list(given)} per example; the serving "
            f"signature's probabilities need [{classes}] (one per class, softmax)"
        )
