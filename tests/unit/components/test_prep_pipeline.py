"""prepare-data's runs: batches of entries held, sorted and written one file per flush, merged back in order."""

import os
import random

import numpy as np

from components.lib.prep.pipeline import WriteRuns
from components.lib.prep.shards import CHUNK_RECORDS, FeatureSums, merged, read_run


def _entries(destination: str, count: int, rng: random.Random) -> list[tuple]:
    return [
        ((rng.getrandbits(64), f"{destination}/{i}", (i,)), (f"{destination}/{i}", "x", b"pay")) for i in range(count)
    ]


def test_the_runs_of_a_flush_share_one_file_and_merge_back_in_order(tmp_path):
    rng = random.Random(0)
    entries = {"a": _entries("a", 1200, rng), "b": _entries("b", 10, rng), "c": _entries("c", 700, rng)}
    runs = WriteRuns(str(tmp_path), run_records=1500)
    runs.start_bundle()
    for destination, batch in entries.items():  # c's first half makes 1,810 held: a flush; its second half: another
        runs.process((destination, batch[:600]))
        runs.process((destination, batch[600:]))
    written = [value.value for value in runs.finish_bundle()]

    assert len(os.listdir(tmp_path)) == 2  # one file per flush, whatever the destinations
    assert [d for d, _ in written] == ["a", "b", "c", "c"]
    first = {path for _, (path, _, _) in written[:3]}
    assert len(first) == 1 and written[3][1][0] not in first
    assert written[0][1][2] > 0 and written[1][1][1] == written[0][1][2]  # b's run starts where a's ends
    assert 1200 > CHUNK_RECORDS  # a's run holds two pickled chunks
    for destination, batch in entries.items():
        mine = [run for d, run in written if d == destination]
        assert list(merged(mine)) == sorted(batch, key=lambda entry: entry[0])
    whole_file = [entry for path in sorted(first) for entry in read_run((path, 0, -1))]
    assert len(whole_file) == 1200 + 10 + 600


def test_feature_sums_are_numpys_float64_sums_across_blocks():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(FeatureSums.BLOCK + 5, 3)).astype(np.float32)
    sums = FeatureSums()
    assert sums.totals() is None
    for row in vectors:
        sums.add(row.astype("<f4").tobytes())
    total, squares = sums.totals()
    as64 = vectors.astype(np.float64)
    np.testing.assert_allclose(total, as64.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(squares, (as64 * as64).sum(axis=0), rtol=1e-12)
