"""The page's markdown pieces: how a number, a flag or a list of names is written, and tables.

Every figure on the page is written by one of these from a result file's value. Result is a result file (or a part of
one) as parsed JSON; Blocks are what a renderer gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

Result = dict[str, Any]
Blocks = list[str]  # markdown blocks (paragraphs, tables), joined by blank lines
NONE = "—"


def number(value: float, decimals: int = 0) -> str:
    """`value` at `decimals` decimals, with thousands separators."""
    return f"{value:,.{decimals}f}"


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits in fixed notation (0.0237, 0.904, 2.46, 13.9, 1,171)."""
    if value == 0:
        return number(0, digits - 1)
    return number(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def times(value: float) -> str:
    return f"{significant(value)}×"


def plain(value: float) -> str:
    """A value as the benchmark set it, in its shortest form: a goal's 90, 1.5, 20,000."""
    return f"{value:,g}"


def seconds(value: float, decimals: int = 1) -> str:
    return f"{number(value, decimals)} s"


def hyperparameter(value: float | int | str) -> str:
    """An int or a choice (`adam`) as it is, a float to 3 significant digits (0.0101, 0.2, 0)."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def met(flag: bool) -> str:
    return "met" if flag else "**not met**"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def listing(values: Iterable[str]) -> str:
    return ", ".join(values)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join(f"| {' | '.join(line)} |" for line in lines)


def unique(names: Iterable[str]) -> list[str]:
    """`names` without repeats, in the order they first come."""
    return list(dict.fromkeys(names))


def merged(sequences: Iterable[Sequence[str]]) -> list[str]:
    """The names of several sequences in one order: each name not seen yet goes after its predecessor in its own
    sequence (the steps of two runs of one pipeline, where one run has steps the other lacks)."""
    names: list[str] = []
    for sequence in sequences:
        at = 0
        for name in sequence:
            if name not in names:
                names.insert(at, name)
            at = names.index(name) + 1
    return names


def step_table(header: str, runs: Sequence[tuple[str, list[Result]]], extra: Iterable[Sequence[str]]) -> str:
    """Steps as rows, one column of seconds per run (a step a run lacks: —), then the `extra` rows."""
    by_run = [{step["name"]: step["seconds"] for step in steps} for _, steps in runs]
    names = merged([step["name"] for step in steps] for _, steps in runs)
    rows = [[name, *(seconds(s[name], 2) if name in s else NONE for s in by_run)] for name in names]
    return table([header, *(label for label, _ in runs)], [*rows, *extra])
