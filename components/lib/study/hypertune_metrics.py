"""Reading the metric file that `cloudml-hypertune` writes for a trial.

The library rewrites `$CLOUD_ML_HP_METRIC_FILE` on every report, keeping the last 100 reports, one JSON object
per line with string values: `{"global_step": "3", "<metric tag>": "0.91", "timestamp": ..., "trial": "<id>"}`.
"""

import json
import os


def read_reports(path: str, metric_id: str) -> list[tuple[int, float]]:
    """(global_step, value) of every report of `metric_id` in the file, in file order; [] if there is none."""
    if not os.path.isfile(path):
        return []
    reports = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
                value = float(record[metric_id])
            except (ValueError, KeyError, TypeError):
                continue  # another tag, or a torn line
            reports.append((int(record.get("global_step", 0) or 0), value))
    return reports


def trial_metric(path: str, metric_id: str, measurement: str = "last", goal: str = "maximize") -> float | None:
    """The trial's value: the last report (as Vertex uses it), or the best one when `measurement="best"`."""
    values = [v for _, v in read_reports(path, metric_id)]
    if not values:
        return None
    if measurement == "last":
        return values[-1]
    return max(values) if goal == "maximize" else min(values)
