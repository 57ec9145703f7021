"""Histograms as TFDV keeps them, `[[low, high, count], ...]` with ascending buckets (a bucket with low == high
is a point mass), and TFDV's two drift measures: the L-infinity distance between class distributions and the
Jensen-Shannon divergence between numeric histograms (tensorflow/data-validation, anomalies/metrics.cc). Counts
may be fractions: a bucket split over finer boundaries keeps its share of each, its values taken as uniform within it.
"""

from __future__ import annotations

import numpy as np

STANDARD_BUCKETS = 10  # TFDV's standard histogram: equal-width buckets between the feature's minimum and maximum


def spread(lows, highs, counts, edges) -> np.ndarray:
    """The counts of buckets [lows, highs] over the ascending `edges`: each bucket's count shared among the
    intervals it overlaps, by overlap length; a point bucket's whole count to the interval holding it (the last
    interval includes its upper edge)."""
    lows, highs, counts = (np.asarray(a, np.float64) for a in (lows, highs, counts))
    edges = np.asarray(edges, np.float64)
    out = np.zeros(len(edges) - 1)
    point = lows == highs
    if point.any():
        where = np.clip(np.searchsorted(edges, lows[point], side="right") - 1, 0, len(out) - 1)
        np.add.at(out, where, counts[point])
    wide = ~point
    if wide.any():
        low, high = lows[wide, None], highs[wide, None]
        overlap = np.clip(np.minimum(high, edges[None, 1:]) - np.maximum(low, edges[None, :-1]), 0, None)
        out += counts[wide] @ (overlap / (high - low))
    return out


def standard(lows, highs, counts) -> list[list[float]]:
    """The standard histogram (`STANDARD_BUCKETS` equal-width buckets over [min, max]) of finer buckets; one point
    bucket when min == max."""
    low, high = float(np.min(lows)), float(np.max(highs))
    total = float(np.sum(counts))
    if low == high:
        return [[low, high, total]]
    edges = np.linspace(low, high, STANDARD_BUCKETS + 1)
    shares = spread(lows, highs, counts, edges)
    return [[float(a), float(b), round(float(c), 6)] for a, b, c in zip(edges[:-1], edges[1:], shares)]


def l_infinity(counts_a: dict[str, float], counts_b: dict[str, float]) -> tuple[str, float]:
    """The largest difference between the two distributions' shares (each normalized by its own total; a value
    absent from one has share 0 there) and the value it is at (the first in sorted order on a tie)."""
    total_a, total_b = sum(counts_a.values()), sum(counts_b.values())
    best, distance = "", -1.0
    for key in sorted(set(counts_a) | set(counts_b)):
        d = abs(counts_a.get(key, 0) / total_a - counts_b.get(key, 0) / total_b)
        if d > distance:
            best, distance = key, d
    return best, distance


def aligned(a: list, b: list) -> tuple[np.ndarray, np.ndarray]:
    """Two histograms' counts over the same buckets, as TFDV aligns them: the buckets of width rebinned over the
    union of both histograms' boundaries, then one bucket per point mass value of either."""
    wide_a = [h for h in a if h[0] != h[1]]
    wide_b = [h for h in b if h[0] != h[1]]
    edges = sorted({v for h in wide_a + wide_b for v in h[:2]})

    def rebinned(wide: list) -> np.ndarray:
        if not wide:
            return np.zeros(max(len(edges) - 1, 0))
        lows, highs, counts = zip(*wide)
        return spread(lows, highs, counts, edges)

    points = sorted({h[0] for h in a + b if h[0] == h[1]})

    def masses(hist: list) -> np.ndarray:
        at: dict[float, float] = {}
        for low, high, count in hist:
            if low == high:
                at[low] = at.get(low, 0.0) + count
        return np.array([at.get(p, 0.0) for p in points])

    return np.concatenate([rebinned(wide_a), masses(a)]), np.concatenate([rebinned(wide_b), masses(b)])


def js_divergence(a: list, b: list) -> float:
    """The Jensen-Shannon divergence (base 2: 0 the same distribution, 1 disjoint) of two histograms, aligned
    (`aligned`) and normalized; ValueError for an empty one."""
    p, q = aligned(a, b)
    if p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("an empty histogram has no distribution")
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        nonzero = x > 0
        return float(np.sum(x[nonzero] * np.log2(x[nonzero] / m[nonzero])))

    return min((kl(p) + kl(q)) / 2, 1.0)
