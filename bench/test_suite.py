"""Test-suite benchmark: how many tests each tier of `make test` runs, how long each takes, and the line coverage.

    python -m bench.test_suite [--coverage] [--quick] [-- pytest arguments]

Runs each tier's pytest command from the repository root in a subprocess, as the Makefile runs it (`make test-fast`:
the tests without the `e2e` marker, on every CPU with pytest-xdist; then the `e2e` tier, on every CPU too, a
module's tests in one worker; the environment `make` sets), times it from outside and counts its tests from a JUnit
report: tests, passed, failed, errors, skipped, and the ten slowest. Lint is not timed. The goals: the fast tier
within 4 minutes, both tiers within 15.

`--coverage` runs both tiers once more under coverage.py (the `[tool.coverage]` settings of pyproject.toml: every
package of the project, subprocesses included: the steps, the trainer's workers, the server) and records the line
coverage of the combined data; that run's times are not the suite's. `--quick` runs
tests/contract/repository/test_bench_figures.py as the fast tier and no e2e tier (checks that it works). Results:
bench/results/test_suite.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from bench import ROOT
from bench.results import Recorder, result_path

# The tiers as the Makefile runs them (tests/contract/repository/test_containers.py checks that they agree)
TIERS = {
    "fast": ["-n", "auto", "-m", "not e2e"],
    "e2e": ["-n", "auto", "--dist", "loadfile", "-m", "e2e"],
}
GOALS = {"fast": 4 * 60, "total": 15 * 60}


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


def run_tier(arguments: list[str], env: dict, tmp: Path, name: str, prefix: list[str]) -> dict:
    """One tier's pytest run: its command, exit status, wall time and counts."""
    report = tmp / f"{name}.xml"
    command = [*prefix, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *arguments]
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    wall = time.perf_counter() - started
    counts = junit_counts(report) if report.exists() else {}
    return {"command": command[1:], "returncode": done.returncode, "wall_seconds": round(wall, 1), **counts}


def coverage(tiers: dict[str, list[str]], env: dict, tmp: Path) -> dict:
    """Both tiers under coverage.py, then the combined line coverage of the project's packages."""
    data = tmp / "coverage" / ".coverage"
    data.parent.mkdir()
    env = {**env, "COVERAGE_FILE": str(data)}
    runs = {
        name: run_tier(arguments, env, tmp, f"coverage-{name}", [sys.executable, "-m", "coverage", "run"])
        for name, arguments in tiers.items()
    }
    for step in (["combine", "--quiet"], ["json", "--quiet", "-o", str(tmp / "coverage.json")]):
        subprocess.run([sys.executable, "-m", "coverage", *step], cwd=ROOT, env=env, check=True)
    totals = json.loads((tmp / "coverage.json").read_text())["totals"]
    return {
        "percent_covered": round(totals["percent_covered"], 2),
        "covered_lines": totals["covered_lines"],
        "statements": totals["num_statements"],
        "runs": {name: {k: run[k] for k in ("returncode", "tests", "passed", "failed")} for name, run in runs.items()},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.test_suite", description=__doc__.splitlines()[0])
    p.add_argument("--coverage", action="store_true", help="also run both tiers under coverage.py")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tests/contract/repository/test_bench_figures.py alone: checks that it works",
    )
    p.add_argument("--output", type=Path, help="JSON results [bench/results/test_suite.json]")
    p.add_argument("pytest_args", nargs="*", help="pytest arguments added to each tier's (after --)")
    args = p.parse_args(argv)
    tiers = {name: [*arguments, *args.pytest_args] for name, arguments in TIERS.items()}
    if args.quick:
        tiers = {"fast": [*TIERS["fast"], "tests/contract/repository/test_bench_figures.py"]}
    recorder = Recorder("test_suite", args, quick=args.quick)
    env = dict(
        os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE=""
    )
    with tempfile.TemporaryDirectory(prefix="bench-test-suite-") as name:
        tmp = Path(name)
        runs = {tier: run_tier(arguments, env, tmp, tier, [sys.executable]) for tier, arguments in tiers.items()}
        covered = coverage(tiers, env, tmp) if args.coverage else None
    total = round(sum(run["wall_seconds"] for run in runs.values()), 1)
    result = {
        "tiers": runs,
        "wall_seconds": total,
        "tests": sum(run.get("tests", 0) for run in runs.values()),
        "goals": {
            "fast_seconds": GOALS["fast"],
            "fast_met": runs["fast"]["wall_seconds"] <= GOALS["fast"],
            "total_seconds": GOALS["total"],
            "total_met": total <= GOALS["total"],
        },
        "coverage": covered,
    }
    for tier, run in runs.items():
        print(
            f"{tier}: {run.get('tests', '?')} tests ({run.get('passed', '?')} passed, {run.get('failed', '?')} "
            f"failed, {run.get('errors', '?')} errors, {run.get('skipped', '?')} skipped) in "
            f"{run['wall_seconds']} s; pytest exit code {run['returncode']}"
        )
    if covered:
        print(f"line coverage: {covered['percent_covered']}% of {covered['statements']} statements")
    recorder.save(result, result_path("test_suite", args.quick, args.output))
    return 0 if all(run.get("tests") for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
