"""The benchmark page, docs/benchmarks.md, generated from the result files and the benchmarks' docstrings.

    python -m bench.page            # write docs/benchmarks.md
    python -m bench.page --check    # exit 1 if docs/benchmarks.md is not what it would write

One section per benchmark with a result file, in the order of SECTIONS: its heading, its method note (the module's
docstring, read from bench/NAME.py, or bench/NAME/__init__.py for a package, with `ast`: importing a benchmark would
import TensorFlow), then for each of its result files (by name) the figures as tables and a line of provenance: the
commit, the machine and the date. Each benchmark's result file has a layout of its own, so each has a renderer that
picks the figures a reader needs; every number on the page is formatted here from the file's values, and a goal is
said met or not only where the file says so. A result file of a benchmark with no renderer, or of a quick run, is an
error.

The modules: format (numbers, flags, tables), the renderers by concern (training, prediction, data_prep, suite), and
sections (the registry, the method note and provenance, render).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from bench import ROOT
from bench.page.sections import render

__all__ = ["PAGE", "main", "render"]

PAGE = ROOT / "docs" / "benchmarks.md"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.page", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the page is not what it would write")
    args = p.parse_args(argv)
    text = render()
    name = os.path.relpath(PAGE, ROOT)
    if args.check:
        if not PAGE.is_file() or PAGE.read_bytes() != text.encode():
            print(f"{name} is stale: run python -m bench.page", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {name}")
    return 0
