"""Hyperparameters and their declaration (importable without TensorFlow).

A model builder declares its hyperparameters in its signature: `def build(stats, *, n_hidden: int = 2,
activation: Literal["relu", "selu"] = "relu")`, one keyword-only parameter each, annotated `int`, `float`, `str`,
`bool` or `Literal[...]` (of one of those types) with a literal default. The trainer's own hyperparameters are
declared the same way, by `training` below. Declarations are read from the source (`ast`), never by importing the
builder's module (it imports TensorFlow): the config loader checks `trainer.hyperparameters` and the study's
parameters against them, and the trainer types its flags by them before anything is built.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from trainer import builder

Value = int | float | str | bool
BuilderError = builder.BuilderError
TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
# The trainer's own hyperparameters: `training`'s signature, read like a builder's.
TRAINING = "trainer.hyperparameters:training"


class Training(NamedTuple):
    """The trainer's own hyperparameters, typed."""

    learning_rate: float
    batch_size: int
    seed: int
    optimizer: str


def training(
    *,
    learning_rate: float = 1e-3,
    batch_size: int = 32,
    seed: int = 42,
    optimizer: Literal["adam", "adamw", "nadam", "sgd", "rmsprop", "adagrad"] = "adam",
) -> Training:
    """The trainer's own hyperparameters (this signature is their declaration): the optimizer (a tf-keras one, by
    its name) and its learning rate, the batch size per replica, the seed of weights and shuffling."""
    return Training(learning_rate, batch_size, seed, optimizer)


@dataclass(frozen=True)
class Hyperparameter:
    """One declared hyperparameter: its name, type (int, float, str, bool), default and, for a `Literal`, the
    values it may take."""

    name: str
    type: type
    default: Value | None
    choices: tuple[Value, ...] = ()

    def __str__(self) -> str:
        kind = "one of " + ", ".join(map(str, self.choices)) if self.choices else self.type.__name__
        return f"{self.name} ({kind})"

    def takes(self) -> str:
        """What it takes, in words: `an int`, `one of relu, selu`."""
        return f"one of {', '.join(map(str, self.choices))}" if self.choices else _article(self.type)

    def parse(self, value: object) -> Value:
        """`value` (a config's value, a flag's text, a trial's value) as this hyperparameter's type; ValueError
        saying what it takes otherwise. Integral floats are ints (JSON and Vertex AI pass `2.0` for 2)."""
        typed = _typed(self.type, value)
        if typed is None or (self.choices and typed not in self.choices):
            raise ValueError(f"{self.name} takes {self.takes()}, got {value!r}")
        return typed

    def check_parameter(self, parameter) -> None:
        """ValueError unless the study `parameter` (components.lib.study.spec) only proposes values this
        hyperparameter takes: a range only for a number without choices (a double range only for a float), listed
        values that each parse."""
        if parameter.type not in ("double", "integer"):
            for value in parameter.values:
                self.parse(value)
        elif self.choices or self.type in (str, bool):
            raise ValueError(
                f"{self.name} takes {self.takes()}, not a {parameter.type} range: list them as type: categorical values"
            )
        elif self.type is int and parameter.type == "double":
            raise ValueError(
                f"{self.name} takes an int, not a double range: give it type: integer or type: discrete whole numbers"
            )


def _article(kind: type) -> str:
    return {int: "an int", float: "a float", str: "a string", bool: "a bool (true or false)"}[kind]


def _typed(kind: type, value: object) -> Value | None:
    """`value` as `kind`, or None when it is not one."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        return {"true": True, "false": False}.get(value.lower()) if isinstance(value, str) else None
    if kind is str:
        return value if isinstance(value, str) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    if kind is float:
        return float(value)
    return int(value) if float(value).is_integer() else None


def _annotation(node: ast.expr | None) -> tuple[type, tuple[Value, ...]] | None:
    """(type, choices) of an annotation `int`, `float`, `str`, `bool` or `[typing.]Literal[...]` of one type."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        node = ast.parse(node.value, mode="eval").body
    if isinstance(node, ast.Name) and node.id in TYPES:
        return TYPES[node.id], ()
    if isinstance(node, ast.Subscript):
        target = node.value
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if name == "Literal" and all(isinstance(i, ast.Constant) for i in items):
            choices = tuple(i.value for i in items if isinstance(i, ast.Constant))
            kinds = {type(c) for c in choices}
            if len(kinds) == 1 and kinds <= set(TYPES.values()):
                return kinds.pop(), typing.cast(tuple[Value, ...], choices)
    return None


def read(spec: str, positional: int = 1) -> dict[str, Hyperparameter]:
    """The hyperparameters the function `spec` (`package.module:function`) declares, in order, after its
    `positional` parameters (a builder's: the data's statistics); BuilderError naming what its signature breaks of
    the rule above."""
    origin = builder.find(spec)
    module, function = builder.parse(spec)
    if not origin.endswith(".py"):
        raise BuilderError(f"builder {spec}: its hyperparameters are read from its source, and {module} has none")
    tree = ast.parse(Path(origin).read_text(), origin)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    if not found:
        raise BuilderError(
            f"builder {spec}: {origin} defines {function} otherwise than with a top-level def; the hyperparameters "
            "are read from the def's signature"
        )
    args = found[-1].args
    if len([*args.posonlyargs, *args.args]) != positional or args.vararg or args.kwarg:
        raise BuilderError(
            f"builder {spec}: takes ({', '.join(a.arg for a in ast.walk(args) if isinstance(a, ast.arg))}); a "
            f"builder takes the data's statistics, then its hyperparameters after a `*`, e.g. "
            f"def {function}(stats, *, dropout: float = 0.2)"
        )
    declared = {}
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        annotation = _annotation(arg.annotation)
        if annotation is None:
            raise BuilderError(
                f"builder {spec}: hyperparameter {arg.arg} needs an annotation int, float, str, bool or "
                "Literal[...] of one of them"
            )
        try:
            value = ast.literal_eval(default) if default is not None else None
        except ValueError:
            value = None
        undefaulted = Hyperparameter(arg.arg, annotation[0], None, annotation[1])
        try:
            declared[arg.arg] = Hyperparameter(arg.arg, annotation[0], undefaulted.parse(value), annotation[1])
        except ValueError as e:
            raise BuilderError(f"builder {spec}: hyperparameter {arg.arg} needs a literal default: {e}") from None
    return declared


@dataclass(frozen=True)
class Declaration:
    """What a training of the builder `model` takes: the builder's hyperparameters and the trainer's own."""

    model: str
    builder: Mapping[str, Hyperparameter]
    training: Mapping[str, Hyperparameter]

    def __getitem__(self, name: str) -> Hyperparameter:
        found = self.builder.get(name) or self.training.get(name)
        if found is None:
            raise KeyError(
                f"no hyperparameter {name!r}: the model {self.model} declares "
                f"{', '.join(map(str, self.builder.values())) or 'none'}; the trainer's own are "
                f"{', '.join(map(str, self.training.values()))}"
            )
        return found

    def parse(self, values: Mapping[str, object]) -> dict[str, Value]:
        """`values` typed by their declaration; KeyError or ValueError naming an unknown or mistyped one."""
        return {name: self[name].parse(value) for name, value in values.items()}


def declare(spec: str, reserved: tuple[str, ...] = ()) -> Declaration:
    """The declaration of a training of the builder `spec`; BuilderError when the builder declares a name of the
    trainer's own hyperparameters or of its `reserved` flags (`epochs`, `model`, ...)."""
    own = read(TRAINING, positional=0)
    declared = read(spec) if spec != TRAINING else {}
    taken = [name for name in declared if name in own or name in reserved]
    if taken:
        raise BuilderError(
            f"builder {spec}: hyperparameter {taken[0]} is the trainer's own ({', '.join([*own, *reserved])} are); "
            "give it another name"
        )
    return Declaration(spec, declared, own)
