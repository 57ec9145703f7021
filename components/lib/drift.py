"""The data drift check: a new data set's profile (stats.json's `profile`, `components.lib.prep.profile`) against
the one the champion was trained on (`core.schema.PROFILE_FILE`), with TFDV's measures: the L-infinity distance
between the class distributions, the Jensen-Shannon divergence of each numeric feature's histogram and of the image
sizes' (`components.lib.histograms`). Past a limit the run stops or warns (`DriftLimits.action`); classes that
one side has and the other has not are always named.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.lib.histograms import js_divergence, l_infinity
from components.lib.prep.sources import DataError

ACTIONS = ("stop", "warn")


@dataclass(frozen=True)
class DriftLimits:
    """The largest class distance and feature divergence accepted, and what a data set past them does."""

    max_class_distance: float
    max_js_divergence: float
    action: str

    def __post_init__(self):
        if self.action not in ACTIONS:
            raise DataError(f"drift_action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        for name, limit in self.parameters().items():
            if name != "drift_action" and not 0 <= limit <= 1:
                raise DataError(f"{name} must be in [0, 1] (the measure's range), got {limit}")

    def parameters(self) -> dict:
        """The limits by their pipeline parameters' names."""
        return {
            "drift_max_class_distance": self.max_class_distance,
            "drift_max_js_divergence": self.max_js_divergence,
            "drift_action": self.action,
        }


def not_compared(reason: str) -> dict:
    """The drift artifact of a run with nothing to compare with."""
    return {"compared": False, "reason": reason, "past": [], "missing": [], "new": []}


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: round(v / total, 6) for k, v in counts.items()}


def _range(histogram: list) -> list[float]:
    return [histogram[0][0], histogram[-1][1]]


def compare(champion: dict, data: dict, limits: DriftLimits) -> dict:
    """The drift artifact: each measure with the champion's and these data's values, `past` (one line per measure
    past its limit), `missing` and `new` (classes with training examples on one side only)."""
    theirs, ours = champion["classes"], data["classes"]
    at, distance = l_infinity(theirs, ours)
    a, b = _shares(theirs), _shares(ours)
    past = []
    if distance > limits.max_class_distance:
        past.append(
            f"class distribution: L-infinity distance {distance:.3f} (class {at!r}: {a.get(at, 0):.1%} of the "
            f"champion's training examples, {b.get(at, 0):.1%} of these) above drift_max_class_distance "
            f"{limits.max_class_distance}"
        )
    features = []
    for name, mine in data["features"].items():
        other = champion["features"].get(name)
        if other is None:
            continue
        divergence = js_divergence(other["histogram"], mine["histogram"])
        features.append(
            {
                "name": name,
                "js_divergence": round(divergence, 6),
                "champion": {k: other[k] for k in ("mean", "variance")} | {"range": _range(other["histogram"])},
                "data": {k: mine[k] for k in ("mean", "variance")} | {"range": _range(mine["histogram"])},
            }
        )
        if divergence > limits.max_js_divergence:
            past.append(
                f"feature {name!r}: Jensen-Shannon divergence {divergence:.3f} (mean {other['mean']:.4g} → "
                f"{mine['mean']:.4g}) above drift_max_js_divergence {limits.max_js_divergence}"
            )
    sizes = None
    if champion.get("image_sizes") and data.get("image_sizes"):
        divergence = js_divergence(champion["image_sizes"], data["image_sizes"])
        before, now = _range(champion["image_sizes"]), _range(data["image_sizes"])
        sizes = {"js_divergence": round(divergence, 6), "champion": before, "data": now}
        if divergence > limits.max_js_divergence:
            past.append(
                f"image sizes: Jensen-Shannon divergence {divergence:.3f} (shorter sides {before[0]:g}-{before[1]:g} "
                f"px → {now[0]:g}-{now[1]:g} px) above drift_max_js_divergence {limits.max_js_divergence}"
            )
    return {
        "compared": True,
        "limits": limits.parameters(),
        "classes": {"l_infinity": round(distance, 6), "at": at, "champion": a, "data": b},
        "features": features,
        "image_sizes": sizes,
        "past": past,
        "missing": sorted(k for k, n in theirs.items() if n and not ours.get(k)),
        "new": sorted(k for k, n in ours.items() if n and not theirs.get(k)),
    }


def class_changes(drift: dict, champion_name: str) -> list[str]:
    """The lines naming the classes one side has and the other has not (printed whatever the limits)."""
    name = champion_name or "the champion"
    lines = []
    if drift["missing"]:
        lines.append(f"classes in {name}'s training data but not in these data: {drift['missing']}")
    if drift["new"]:
        lines.append(f"classes in these data but not in {name}'s training data: {drift['new']}")
    return lines


def verdict(drift: dict, champion_name: str) -> str:
    """What the comparison found, one line; DataError, one line, when it is past a limit and the action is stop."""
    name = champion_name or "the champion"
    if not drift["compared"]:
        return drift["reason"]
    if not drift["past"]:
        return f"no drift past the limits against {name}'s training data"
    problems = "; ".join(drift["past"])
    if drift["limits"]["drift_action"] == "stop":
        raise DataError(
            f"these data drifted from {name}'s training data: {problems}. Check the data; to train on them anyway "
            "set drift_action to warn (stop | warn) or raise the limit"
        )
    return f"warning: these data drifted from {name}'s training data: {problems} (drift_action warn)"
