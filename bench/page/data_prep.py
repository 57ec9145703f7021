"""The renderers of the data prep benchmarks: prep_scale, remote_reads."""

from __future__ import annotations

from bench.page.format import NONE, Blocks, Result, listing, met, number, plain, seconds, table, times, yes


def prep_scale(result: Result) -> Blocks:
    baseline, goal = result["baseline"], result["goal"]
    met_by = goal["met"]

    def cells(run: Result | None) -> list[str]:
        if run is None:
            return [NONE] * 3
        return [
            seconds(run["seconds"], 3),
            number(run["records_per_second"], 1),
            f"{number(run['peak_memory_gb'], 3)} GB",
        ]

    rows = [
        [
            "CSV" if kind == "csv" else "images",
            number(run["records"]),
            number(run["source_bytes"]),
            *cells(run),
            *cells(baseline[kind].get(size) if baseline else None),
        ]
        for kind in ("csv", "images")
        for size, run in sorted(result[kind]["runs"].items(), key=lambda item: int(item[0]))
    ]
    header = [
        "source",
        "records",
        "source bytes",
        "seconds",
        "records/s",
        "peak memory",
        "baseline seconds",
        "baseline records/s",
        "baseline peak memory",
    ]
    goals = [
        [
            "CSV peak memory, the most rows / the fewest",
            times(goal["csv_peak_memory_ratio"]),
            f"≤ {plain(goal['csv_peak_memory_ratio_max'])}×",
            met(met_by["memory_ratio"]),
        ],
        [
            "CSV peak memory at the most rows",
            f"{number(goal['csv_peak_memory_gb'], 3)} GB",
            f"< {plain(goal['csv_peak_memory_gb_max'])} GB",
            met(met_by["memory_under_0_5_gb"]),
        ],
        [
            "CSV rows/s at the most rows",
            number(goal["csv_rows_per_second"], 1),
            f"≥ {plain(goal['csv_rows_per_second_min'])}",
            met(met_by["rows_per_second"]),
        ],
        [
            "images/s at the most images",
            number(goal["images_per_second"], 1),
            f"≥ {plain(goal['images_per_second_min'])}",
            met(met_by["images_per_second"]),
        ],
    ]
    goals += [
        [f"{what} at the largest size, vs the baseline's", times(goal[key]), "≥ the baseline's", met(met_by[key])]
        for key, what in (("csv_rate_vs_baseline", "CSV rows/s"), ("images_rate_vs_baseline", "images/s"))
        if key in goal
    ]
    return [
        f"CSV: {number(result['csv']['features'])} float features, {number(result['csv']['classes'])} classes. "
        f"Images: {number(result['images']['side'])} px, {result['images']['format']}, "
        f"{number(result['images']['classes'])} classes. Baseline: "
        + (f"commit `{baseline['commit']}`, {baseline['implementation']}." if baseline else "not run."),
        table(header, rows),
        table(["goal", "measured", "threshold", "verdict"], goals),
    ]


def remote_reads(result: Result) -> Blocks:
    def row(label: str, rounds: list[float]) -> list[str]:
        return [label, listing(number(s, 2) for s in rounds), seconds(min(rounds), 2)]

    return [
        f"{number(result['images'])} images, every request to the emulator delayed {plain(result['latency_ms'])} ms.",
        table(
            ["images read at once", "seconds, each round", "best"],
            [
                row(number(result["window"]), result["seconds_window"]),
                row("one", result["seconds_one_at_a_time"]),
            ],
        ),
        f"One at a time / {number(result['window'])} at once: **{times(result['speedup'])}**; the same shards, byte for "
        f"byte: {yes(result['same_shards'])}.",
    ]
