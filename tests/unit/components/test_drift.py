"""The data drift check: TFDV's measures (L-infinity distance, Jensen-Shannon divergence over histograms rebinned on
the union of their edges), the data profile data prep writes and the trainer keeps, and the check step's verdict."""

import json
import shutil

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from components.check_champion import compare_profiles
from components.lib.drift import DriftLimits, class_changes, compare, verdict
from components.lib.histograms import aligned, js_divergence, l_infinity, standard
from components.lib.prep.profile import feature_histogram
from components.lib.prep.shards import FINE_BINS, fine_histograms
from components.lib.prep.sources import DataError
from components.prepare_data import prepare
from tests.helpers.data import IRIS_FEATURES, iris_csv

STOP = DriftLimits(0.15, 0.2, "stop")


def test_the_l_infinity_distance_is_the_largest_difference_of_shares():
    # shares a 0.75 / 0.25, b 0.25 / 0.25, c 0 / 0.5: a and c differ by 0.5, a comes first
    assert l_infinity({"a": 30, "b": 10}, {"a": 10, "b": 10, "c": 20}) == ("a", 0.5)
    assert l_infinity({"x": 1, "y": 3}, {"x": 2, "y": 6}) == ("x", 0.0)


def test_histograms_with_other_edges_are_rebinned_on_the_union_of_their_edges():
    first, second = [[0, 2, 4], [2, 4, 4]], [[1, 3, 6], [3, 5, 2]]
    p, q = aligned(first, second)  # edges 0 1 2 3 4 5, each bucket's count spread evenly over its width
    assert p.tolist() == [2, 2, 2, 2, 0] and q.tolist() == [0, 3, 3, 1, 1]
    expected = jensenshannon([2, 2, 2, 2, 0], [0, 3, 3, 1, 1], base=2) ** 2
    assert js_divergence(first, second) == pytest.approx(expected, rel=1e-12)
    # by hand: p = (1/4, 1/4, 1/4, 1/4, 0), q = (0, 3/8, 3/8, 1/8, 1/8), m = (p + q) / 2;
    # KL(p‖m) = 1/4 + 1/2·log2(4/5) + 1/4·log2(4/3), KL(q‖m) = 3/4·log2(6/5) + 1/8·log2(2/3) + 1/8
    by_hand = (
        0.25 + 0.5 * np.log2(0.8) + 0.25 * np.log2(4 / 3) + 0.75 * np.log2(1.2) + 0.125 * np.log2(2 / 3) + 0.125
    ) / 2
    assert js_divergence(first, second) == pytest.approx(by_hand, rel=1e-12)
    assert js_divergence(first, [[0, 4, 99]]) == pytest.approx(0.0, abs=1e-15)  # the same density, coarser


def test_point_masses_are_buckets_of_their_own():
    assert js_divergence([[8, 8, 10]], [[8, 8, 3]]) == 0.0
    assert js_divergence([[8, 8, 1]], [[9, 9, 1]]) == 1.0
    mixed_a, mixed_b = [[0, 1, 2], [5, 5, 2]], [[0, 1, 1], [5, 5, 3]]
    assert aligned(mixed_a, mixed_b)[0].tolist() == [2, 2] and aligned(mixed_a, mixed_b)[1].tolist() == [1, 3]
    assert js_divergence(mixed_a, mixed_b) == pytest.approx(jensenshannon([2, 2], [1, 3], base=2) ** 2, rel=1e-12)
    with pytest.raises(ValueError, match="an empty histogram has no distribution"):
        js_divergence([[0, 1, 0]], [[0, 1, 1]])


def test_the_standard_histogram_of_shards_fine_histograms_is_numpys_within_a_fine_bucket_per_edge_and_shard():
    rng = np.random.default_rng(0)
    shards = [rng.normal(loc, 1.0, size=(700, 2)) for loc in (0.0, 0.5, 3.0)]
    fine = [fine_histograms(x) for x in shards]
    whole = np.concatenate(shards)
    for j in range(2):
        ours = feature_histogram([shard[j] for shard in fine])
        edges = np.linspace(whole[:, j].min(), whole[:, j].max(), 11)
        assert [b[0] for b in ours] + [ours[-1][1]] == pytest.approx(edges.tolist(), rel=1e-12)
        counts, _ = np.histogram(whole[:, j], edges)
        # a fine bucket that straddles an edge is split by width: each edge is off by at most one fine bucket a shard
        worst = sum(
            np.bincount(((x[:, j] - x[:, j].min()) * FINE_BINS / np.ptp(x[:, j])).astype(int)).max() for x in shards
        )
        assert sum(b[2] for b in ours) == pytest.approx(2100, abs=1e-6)
        assert np.abs(np.array([b[2] for b in ours]) - counts).max() <= 2 * worst
    constant = fine_histograms(np.full((5, 1), 2.5))
    assert standard(*zip(*[(2.5, 2.5, 5)])) == [[2.5, 2.5, 5.0]] and feature_histogram([constant[0]]) == [
        [2.5, 2.5, 5.0]
    ]


def test_tabular_profiles_are_the_same_on_beams_worker_processes(tmp_path):
    path, _ = iris_csv(tmp_path / "iris.csv", [*IRIS_FEATURES, "label"])
    here = prepare(path, str(tmp_path / "here"), num_workers=2, examples_per_shard=30)
    workers = prepare(
        path, str(tmp_path / "workers"), num_workers=2, examples_per_shard=30, processes=2, parallel_min_records=0
    )
    assert here["profile"] == workers["profile"] and here["splits"]["train"]["shards"] == 4
    profile = here["profile"]
    assert profile["classes"] == here["splits"]["train"]["per_class"] and profile["image_sizes"] is None
    assert list(profile["features"]) == IRIS_FEATURES
    length = profile["features"]["petal length (cm)"]
    assert length["mean"] == here["feature_mean"][2] and length["histogram"][0][0] == pytest.approx(1.0)
    assert sum(b[2] for b in length["histogram"]) == pytest.approx(profile["examples"], abs=1e-6)


def _iris(tmp_path, name: str, change=None, drop: dict | None = None) -> dict:
    """iris as a CSV, `change`d (a function of the rows) or with `drop` {label: rows left out}, prepared; its stats."""
    from sklearn.datasets import load_iris

    bunch = load_iris()
    rows, left = [], dict(drop or {})
    for row, target in zip(bunch.data, bunch.target):
        label = bunch.target_names[target]
        if left.get(label):
            left[label] -= 1
            continue
        rows.append([*(change(row) if change else row), label])
    path = tmp_path / f"{name}.csv"
    path.write_text(",".join([*IRIS_FEATURES, "label"]) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return prepare(str(path), str(tmp_path / name), num_workers=1)


def test_a_resampled_split_passes_and_a_shifted_column_or_a_thinned_class_is_past_the_limits(tmp_path):
    same = _iris(tmp_path, "same")
    other_split = prepare(str(tmp_path / "same.csv"), str(tmp_path / "resampled"), num_workers=1, split_salt="b")
    passed = compare(same["profile"], other_split["profile"], STOP)
    assert passed["past"] == [] and verdict(passed, "v1") == "no drift past the limits against v1's training data"

    shifted = _iris(tmp_path, "shifted", change=lambda row: [row[0], row[1], row[2] + 3.0, row[3]])
    drift = compare(same["profile"], shifted["profile"], STOP)
    length = next(f for f in drift["features"] if f["name"] == "petal length (cm)")  # the rows' split changed too
    assert length["js_divergence"] > 0.5 and max(f["js_divergence"] for f in drift["features"] if f != length) < 0.2
    assert length["data"]["mean"] - length["champion"]["mean"] == pytest.approx(3.0, abs=0.3)
    assert drift["past"] == [
        f"feature 'petal length (cm)': Jensen-Shannon divergence {length['js_divergence']:.3f} (mean "
        f"{length['champion']['mean']:.4g} → {length['data']['mean']:.4g}) above drift_max_js_divergence 0.2"
    ]
    with pytest.raises(DataError) as stopped:
        verdict(drift, "champion v1")
    assert str(stopped.value) == (
        f"these data drifted from champion v1's training data: {drift['past'][0]}. Check the data; to train on them "
        "anyway set drift_action to warn (stop | warn) or raise the limit"
    )

    thinned = _iris(tmp_path, "thinned", drop={"setosa": 45})
    warned = compare(same["profile"], thinned["profile"], DriftLimits(0.15, 1.0, "warn"))
    shares = warned["classes"]
    assert shares["at"] == "setosa" and shares["l_infinity"] == pytest.approx(
        shares["champion"]["setosa"] - shares["data"]["setosa"], abs=2e-6
    )
    assert warned["past"] == [
        f"class distribution: L-infinity distance {shares['l_infinity']:.3f} (class 'setosa': "
        f"{shares['champion']['setosa']:.1%} of the champion's training examples, {shares['data']['setosa']:.1%} of "
        "these) above drift_max_class_distance 0.15"
    ]
    assert (
        verdict(warned, "v1")
        == f"warning: these data drifted from v1's training data: {warned['past'][0]} (drift_action warn)"
    )


def test_missing_and_new_classes_are_always_named():
    champion = {"classes": {"a": 5, "b": 5, "c": 0}, "features": {}, "image_sizes": None}
    data = {"classes": {"a": 5, "b": 0, "d": 5}, "features": {}, "image_sizes": None}
    drift = compare(champion, data, DriftLimits(1.0, 1.0, "stop"))
    assert (drift["missing"], drift["new"], drift["past"]) == (["b"], ["d"], [])
    assert class_changes(drift, "v2") == [
        "classes in v2's training data but not in these data: ['b']",
        "classes in these data but not in v2's training data: ['d']",
    ]


@pytest.mark.parametrize(
    "limits, message",
    [
        ((0.1, 0.2, "halt"), "drift_action must be one of stop, warn, got 'halt'"),
        ((1.5, 0.2, "warn"), "drift_max_class_distance must be in [0, 1] (the measure's range), got 1.5"),
        ((0.1, -1, "warn"), "drift_max_js_divergence must be in [0, 1] (the measure's range), got -1"),
    ],
)
def test_bad_limits_are_one_line(limits, message):
    with pytest.raises(DataError) as error:
        DriftLimits(*limits)
    assert str(error.value) == message


def test_the_trainer_keeps_the_profile_beside_the_model_and_the_check_reads_it(iris_model, tmp_path):
    data = json.loads((iris_model.parent / "data" / "stats.json").read_text())
    kept = json.loads((iris_model / "model" / "assets.extra" / "data_profile.json").read_text())
    assert kept == data["profile"]
    drift = compare_profiles(data, str(iris_model / "model"), "v1", STOP)
    assert drift["compared"] and drift["past"] == [] and drift["classes"]["l_infinity"] == 0.0
    assert compare_profiles(data, "", "", STOP)["reason"] == "no champion: no data drift check"
    older = tmp_path / "older"
    shutil.copytree(iris_model / "model", older)
    (older / "assets.extra" / "data_profile.json").unlink()
    assert compare_profiles(data, str(older), "v1", STOP)["reason"] == (
        "v1 carries no profile of its training data (assets.extra/data_profile.json: versions trained before the "
        "data drift check): no data drift check"
    )


def test_an_image_folders_profile_counts_every_images_shorter_side_before_resizing(tmp_path):
    from tests.helpers.data import write_images

    write_images(tmp_path / "small", per_class=12, size=(20, 16))
    write_images(tmp_path / "small", classes=("owls",), per_class=10, size=(30, 30), fmt="JPEG", seed=1)
    small = prepare(str(tmp_path / "small"), str(tmp_path / "small-data"), num_workers=1, image_size=12)
    sizes = small["profile"]["image_sizes"]  # 24 images 16 px high, 10 of 30 px: the first and the last bucket
    assert [b[2] for b in sizes] == [24, 0, 0, 0, 0, 0, 0, 0, 0, 10]
    assert (sizes[0][:2], sizes[-1][:2]) == ([16, pytest.approx(17.4)], [pytest.approx(28.6), 30])
    assert small["profile"]["features"] == {}

    write_images(tmp_path / "large", classes=("cats", "dogs", "owls"), per_class=12, size=(64, 48))
    large = prepare(str(tmp_path / "large"), str(tmp_path / "large-data"), num_workers=1, image_size=12)
    assert large["profile"]["image_sizes"] == [[48, 48, 36]]
    drift = compare(small["profile"], large["profile"], STOP)
    assert drift["image_sizes"] == {"js_divergence": 1.0, "champion": [16, 30], "data": [48, 48]}
    assert drift["past"][-1] == (
        "image sizes: Jensen-Shannon divergence 1.000 (shorter sides 16-30 px → 48-48 px) above "
        "drift_max_js_divergence 0.2"
    )


def test_a_champion_on_cloud_storage_carries_its_profile(iris_model, gcs_emulator):
    from pipelines.rehearsal.gcs import upload

    upload(iris_model / "model", "gs://test-bucket/models/iris/3")
    data = json.loads((iris_model.parent / "data" / "stats.json").read_text())
    drift = compare_profiles(data, "gs://test-bucket/models/iris/3/", "v3", STOP)
    assert drift["compared"] and drift["classes"]["l_infinity"] == 0.0
    assert [f["js_divergence"] for f in drift["features"]] == [0.0, 0.0, 0.0, 0.0]
