"""The data profile in stats.json (`profile`): what the drift check compares a new data set with, and what the
trainer keeps beside every SavedModel it writes (`core.schema.PROFILE_FILE`), so that each published version carries
the profile of the data it was trained on.

    examples     the training split's examples
    classes      {label: training examples}
    features     tabular: {column: {mean, variance, histogram}} over the training split
    image_sizes  image folders: the histogram of the images' shorter sides in pixels before resizing, over every
                 readable image of the source (None for other sources)

Histograms are TFDV's standard histograms (`components.lib.histograms.standard`: 10 equal-width buckets between the
minimum and the maximum). A feature's is made of the training shards' fine histograms (`shards.fine_histograms`:
1024 buckets over each shard's own range, each shard's written where the shard is), spread over the data set's 10
buckets as if uniform within a fine bucket: exact up to one fine bucket's count per bucket edge and shard, and, a
shard's histogram depending only on its records, the same on every runner. The image sizes are exact (each image's
side counted in the header combiner).
"""

from __future__ import annotations

import numpy as np

from components.lib.histograms import standard
from components.lib.prep.shards import fine_buckets


def feature_histogram(fine: list[dict]) -> list[list[float]]:
    """One feature's standard histogram from its fine histogram in each training shard."""
    lows, highs, counts = zip(*(fine_buckets(h) for h in fine))
    return standard(np.concatenate(lows), np.concatenate(highs), np.concatenate(counts))


def data_profile(
    classes: dict[str, int],
    feature_names: list[str],
    means: list[float] | None,
    variances: list[float] | None,
    fine: list[list[dict]],
    sides: list[list[int]] | None,
) -> dict:
    """The profile (see the module) from the training split's counts per class, its features' means and variances
    and each training shard's fine histograms (`fine`, a list per shard), and an image folder's images per side."""
    features = {}
    if means is not None and variances is not None and fine:
        for j, name in enumerate(feature_names):
            histogram = feature_histogram([shard[j] for shard in fine])
            features[name] = {"mean": means[j], "variance": variances[j], "histogram": histogram}
    image_sizes = None
    if sides:
        values, counts = zip(*sides)
        image_sizes = standard(values, values, counts)
    return {"examples": sum(classes.values()), "classes": classes, "features": features, "image_sizes": image_sizes}
