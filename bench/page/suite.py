"""The renderers of the benchmarks of the project as a whole: rehearse (a rehearsal against a run), test_suite."""

from __future__ import annotations

import shlex

from bench.page.format import (
    NONE,
    Blocks,
    Result,
    hyperparameter,
    met,
    number,
    plain,
    seconds,
    step_table,
    table,
    times,
    unique,
)


def rehearse(result: Result) -> Blocks:
    pairs = {
        key.replace("_", " "): pair for key, pair in result.items() if isinstance(pair, dict) and "rehearse" in pair
    }
    walls = [
        [
            name,
            seconds(pair["run"]["wall_seconds"], 2),
            seconds(pair["rehearse"]["wall_seconds"], 2),
            f"**{times(pair['ratio_rehearse_to_run'])}**",
            met(result["goal_met"]) if name == "default" else NONE,
        ]
        for name, pair in pairs.items()
    ]
    hyperparameters = [
        (name, side, pair[side]["hyperparameters"] or {})
        for name, pair in pairs.items()
        for side in ("run", "rehearse")
    ]
    keys = unique(key for _, _, values in hyperparameters for key in values)
    return [
        table(
            ["pair", "`run` wall", "`rehearse` wall", "rehearse / run", f"goal ≤ {plain(result['goal_ratio'])}×"],
            walls,
        ),
        *(
            step_table(
                f"`{side}` step",
                [(name, pair[side]["steps"]) for name, pair in pairs.items()],
                [["**wall**", *(f"**{seconds(pair[side]['wall_seconds'], 2)}**" for pair in pairs.values())]],
            )
            for side in ("run", "rehearse")
        ),
        "The hyperparameters each side trained with:",
        table(
            ["pair", "side", *(key.replace("_", " ") for key in keys)],
            [
                [name, f"`{side}`", *(hyperparameter(values[key]) if key in values else NONE for key in keys)]
                for name, side, values in hyperparameters
            ],
        ),
    ]


def tier_arguments(command: list[str]) -> str:
    """A tier's own pytest arguments, as the Makefile gives them (the benchmark's report options left out)."""
    own = [
        arg for arg in command[2:] if arg not in ("-q", "-p", "no:cacheprovider") and not arg.startswith("--junitxml=")
    ]
    return shlex.join(own)


def test_suite(result: Result) -> Blocks:
    goals = result["goals"]
    rows = [
        [
            f"`{tier}`",
            f"`{tier_arguments(run['command'])}`",
            number(run["tests"]),
            number(run["passed"]),
            number(run["failed"] + run["errors"]),
            seconds(run["wall_seconds"]),
        ]
        for tier, run in result["tiers"].items()
    ]
    blocks = [
        table(["tier", "pytest", "tests", "passed", "failed", "wall"], rows),
        f"Both tiers: **{number(result['tests'])} tests in {seconds(result['wall_seconds'])}** (goal "
        f"{seconds(goals['total_seconds'], 0)}: {met(goals['total_met'])}); the fast tier's goal "
        f"{seconds(goals['fast_seconds'], 0)}: {met(goals['fast_met'])}.",
    ]
    if result["coverage"]:
        covered = result["coverage"]
        blocks.append(
            f"Line coverage of both tiers (coverage.py, subprocesses included): **{covered['percent_covered']:.2f} %** "
            f"({number(covered['covered_lines'])} of {number(covered['statements'])} statements)."
        )
    slowest = sorted(
        ((test["seconds"], tier, test["test"]) for tier, run in result["tiers"].items() for test in run["slowest"]),
        reverse=True,
    )[:10]
    blocks += [
        "The slowest tests:",
        table(
            ["test", "tier", "seconds"],
            [[f"`{test.removeprefix('tests.')}`", tier, number(secs, 1)] for secs, tier, test in slowest],
        ),
    ]
    return blocks
