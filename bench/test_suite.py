"""How many tests `make test` runs and how long they take.

    python -m bench.test_suite [--quick] [-- pytest arguments]

Runs `python -m pytest -p no:cacheprovider --junitxml=...` from the repository root in a subprocess, in the
environment `make` sets (TF_USE_LEGACY_KERAS=1, TF_CPP_MIN_LOG_LEVEL=2): every test, the `e2e` ones included, as
`make test` runs them after its lint (the lint is not timed). It times the run from outside and counts the tests
from pytest's JUnit report: passed, failed, errors, skipped, and the ten slowest. `make bench` runs it after the
other benchmarks. `--quick` runs tests/contract/repository/test_bench_figures.py alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from bench import ROOT
from bench.results import Recorder, result_path


def junit_counts(path: Path) -> dict:
    """Counts and the ten slowest tests of a pytest JUnit XML report."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    cases = [
        (float(c.get("time", 0)), f"{c.get('classname', '')}::{c.get('name', '')}")
        for s in suites
        for c in s.iter("testcase")
    ]
    slowest = sorted(cases, reverse=True)[:10]
    return {
        "tests": counts["tests"],
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "failed": counts["failures"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "slowest": [{"test": name, "seconds": round(seconds, 1)} for seconds, name in slowest],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.test_suite", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tests/contract/repository/test_bench_figures.py alone: checks that it works")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/test_suite.json]")
    p.add_argument("pytest_args", nargs="*", help="pytest arguments (after --; default: the whole suite)")
    args = p.parse_args(argv)
    if args.quick and not args.pytest_args:
        args.pytest_args = ["tests/contract/repository/test_bench_figures.py"]
    recorder = Recorder("test_suite", args, quick=args.quick)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="bench-test-suite-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            *args.pytest_args,
        ]
        print("$", " ".join(command), flush=True)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, check=False)
        wall = time.perf_counter() - started
        counts = junit_counts(report) if report.exists() else {}
    minutes, seconds = divmod(round(wall), 60)
    result = {
        "pytest_args": args.pytest_args,
        "returncode": done.returncode,
        "wall_seconds": round(wall, 1),
        "wall": f"{minutes} min {seconds} s",
        **counts,
    }
    print(
        f"\n{counts.get('tests', '?')} tests ({counts.get('passed', '?')} passed, {counts.get('failed', '?')} failed, "
        f"{counts.get('errors', '?')} errors, {counts.get('skipped', '?')} skipped) in {result['wall']}; "
        f"pytest exit code {done.returncode}"
    )
    recorder.save(result, result_path("test_suite", args.quick, args.output))
    return 0 if counts else 1


if __name__ == "__main__":
    sys.exit(main())
