import json

import pytest

from components.lib.prep.rules import route, shard_count
from components.lib.prep.sources import DataError, default_image_size
from components.prepare_data import prepare
from tests.helpers.data import write_images
from trainer import data


def read_split(out, split):
    stats = data.load_stats(str(out))
    keys, labels = [], []
    for _, y in data.make_dataset(str(out), split, stats, 64, training=False):
        labels.extend(y.numpy().tolist())
    for f in data.split_files(str(out), split):
        import tensorflow as tf

        for record in tf.data.TFRecordDataset(f):
            ex = tf.train.Example.FromString(record.numpy())
            keys.append(ex.features.feature["key"].bytes_list.value[0].decode())
    return keys, labels


def test_digits_stats_shards_and_split(digits_data):
    stats = json.loads((digits_data / "stats.json").read_text())
    assert stats["kind"] == "image" and stats["input_shape"] == [8, 8, 1]
    assert stats["labels"] == [str(i) for i in range(10)]
    assert stats["examples"] == 1797 and stats["quarantined"] == 0
    assert sum(s["examples"] for s in stats["splits"].values()) == 1797
    for split, info in stats["splits"].items():
        assert info["shards"] >= 2 and info["shards"] % 2 == 0
        assert len(data.split_files(str(digits_data), split)) == info["shards"]
        assert sum(info["per_class"].values()) == info["examples"]
    assert 0.07 < stats["splits"]["test"]["examples"] / 1797 < 0.13


def test_split_is_stable_across_reruns_and_shard_counts(tmp_path, digits_data):
    prepare("builtin:digits", str(tmp_path / "four"), num_workers=4)
    for split in ("train", "val", "test"):
        assert sorted(read_split(digits_data, split)[0]) == sorted(read_split(tmp_path / "four", split)[0])
    assert len(data.split_files(str(tmp_path / "four"), "train")) == 12  # 4 workers × 3 files of ≥ 100


@pytest.mark.parametrize(
    "key, salt, expected",
    [  # SHA-256 of the salted key: the split, shard and order a record has had in every release
        ("x/1.png", "", ("test", 3, (531201345405562526, "x/1.png", (0, 2)))),
        ("rows.csv:0.1,0.2,c1", "s1", ("train", 3, (5145664442018797047, "rows.csv:0.1,0.2,c1", (0, 2)))),
        ("digits/0007", "", ("train", 5, (7257096826073355668, "digits/0007", (0, 2)))),
    ],
)
def test_a_record_keeps_its_split_shard_and_order_across_releases(key, salt, expected):
    assert route(key, (0, 2), 0.1, 0.1, {"train": 8, "val": 8, "test": 8}, salt) == expected


@pytest.mark.parametrize("name", ["digits", "iris", "wine"])
def test_builtin_sets_are_what_scikit_learn_loads(name):
    import numpy as np
    from sklearn import datasets

    from components.lib.prep.sources import builtin

    source, bunch = builtin(name), getattr(datasets, f"load_{name}")()
    values = np.stack([load() for _, _, load in source.candidates])
    labels = [label for _, label, _ in source.candidates]
    if name == "digits":
        np.testing.assert_array_equal(values[..., 0], np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8))
        assert labels == [str(t) for t in bunch.target] and source.labels == [str(t) for t in range(10)]
    else:
        np.testing.assert_array_equal(values, bunch.data.astype(np.float32))
        assert labels == [bunch.target_names[t] for t in bunch.target] and source.labels == list(bunch.target_names)
        assert source.feature_names == list(bunch.feature_names) and source.input_shape == [bunch.data.shape[1]]


def test_shard_count_is_a_multiple_of_workers():
    assert shard_count(10, 3, 2000) == 3
    assert shard_count(1438, 2, 2000) == 8  # 4 files per worker for parallel reads
    assert shard_count(50_000, 2, 2000) == 26
    assert shard_count(0, 1, 100) == 1


def test_image_folder_rgb_and_grayscale_any_size(tmp_path):
    write_images(tmp_path / "rgb", per_class=15, size=(30, 20))
    write_images(tmp_path / "rgb", classes=("birds",), per_class=15, size=(17, 40), fmt="JPEG")
    stats = prepare(
        str(tmp_path / "rgb"), str(tmp_path / "out"), num_workers=1, image_size=12, val_fraction=0.2, test_fraction=0.2
    )
    assert stats["input_shape"] == [12, 12, 3] and stats["labels"] == ["birds", "cats", "dogs"]
    assert stats["examples"] == 45
    inputs, _ = next(iter(data.make_dataset(str(tmp_path / "out"), "train", stats, 4, training=True)))
    assert inputs.shape == (4, 12, 12, 3) and inputs.dtype.name == "uint8"

    write_images(tmp_path / "gray", per_class=10, mode="L")
    stats = prepare(
        str(tmp_path / "gray"),
        str(tmp_path / "out-gray"),
        num_workers=1,
        image_size=8,
        val_fraction=0.2,
        test_fraction=0.2,
    )
    assert stats["input_shape"] == [8, 8, 1]


def test_corrupt_images_are_quarantined_and_counted(tmp_path):
    write_images(tmp_path / "src", per_class=20)
    (tmp_path / "src" / "cats" / "broken.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "src" / "dogs" / "notes.txt").write_text("hello")
    (tmp_path / "src" / "LICENSE.txt").write_text("outside any class")
    stats = prepare(
        str(tmp_path / "src"),
        str(tmp_path / "out"),
        num_workers=1,
        image_size=8,
        max_corrupt_fraction=0.1,
        val_fraction=0.2,
        test_fraction=0.2,
    )
    assert stats["quarantined"] == 2 and stats["examples"] == 40 and stats["records"] == 42
    assert stats["ignored_files"] == ["LICENSE.txt"]
    quarantine = [json.loads(line) for line in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert reasons["cats/broken.png"].startswith("unreadable image")
    assert reasons["dogs/notes.txt"] == "not a PNG or JPEG file"


def test_corrupt_fraction_limit(tmp_path):
    write_images(tmp_path / "src", per_class=5)
    for i in range(3):
        (tmp_path / "src" / "cats" / f"bad{i}.jpg").write_bytes(b"junk")
    with pytest.raises(DataError, match=r"3 of 13 records .* above max_corrupt_fraction=5.0%; see .*quarantine"):
        prepare(str(tmp_path / "src"), str(tmp_path / "out"), num_workers=1, image_size=8)
    assert len((tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p.mkdir(), "no PNG or JPEG images"),
        (lambda p: write_images(p, classes=("only",)), "need at least two classes"),
        (lambda p: None, "image folder not found|data source not found"),
    ],
)
def test_bad_image_folders(tmp_path, setup, message):
    setup(tmp_path / "src")
    with pytest.raises(DataError, match=message):
        prepare(str(tmp_path / "src"), str(tmp_path / "out"), num_workers=1)


def test_csv_source_and_malformed_rows(tmp_path):
    rows = ["a,b,species"] + [f"{i % 7},{(i * 3) % 5},{'x' if i % 2 else 'y'}" for i in range(60)]
    rows += ["1,oops,x", "1,2", "3,4,", "nan,1,x", "1e39,1,y"]  # 1e39: a float64, past float32's range
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    stats = prepare(
        str(tmp_path / "d.csv"),
        str(tmp_path / "out"),
        num_workers=1,
        label_column="species",
        max_corrupt_fraction=0.1,
        val_fraction=0.2,
        test_fraction=0.2,
    )
    assert stats["kind"] == "tabular" and stats["input_shape"] == [2] and stats["feature_names"] == ["a", "b"]
    assert stats["labels"] == ["x", "y"] and stats["quarantined"] == 5
    reasons = [json.loads(line)["reason"] for line in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    assert any("column 'b': 'oops' is not a number" in r for r in reasons)
    assert any("2 fields, header has 3" in r for r in reasons)
    assert any("empty label" in r for r in reasons)
    assert any("column 'a': 'nan' is not finite" in r for r in reasons)
    assert any("column 'a': '1e39' is not finite" in r for r in reasons)
    assert len(stats["feature_mean"]) == 2


def test_csv_rows_are_lines_cut_at_newlines_and_bad_lines_are_quarantined_by_number(tmp_path):
    good = [b"%d,%d,%s" % (i % 7, i % 5, b"x" if i % 2 else b"y") for i in range(40)]
    bad = [
        b"1,2\x0c3,x",  # a form feed in a cell: one row, its cell no number (splitlines() made two rows)
        b"4\xe2\x80\xa85,6,y",  # U+2028 in a cell, the same
        b"1\r2,3,x",  # a carriage return inside a field: the csv module refuses it
        b'"7,8,x',  # a quote that runs on ...
        b'9",1,y',  # ... past its line: both lines go, as one bad row
        b"5,6,caf\xe9",  # Latin-1, not UTF-8
    ]
    lines = [b"a,b,species", *good[:20], *bad, *good[20:]]
    (tmp_path / "d.csv").write_bytes(b"\n".join(lines) + b"\n")
    stats = prepare(
        str(tmp_path / "d.csv"), str(tmp_path / "out"), num_workers=1, label_column="species", max_corrupt_fraction=0.2
    )
    assert stats["examples"] == 40 and stats["quarantined"] == 5 and stats["labels"] == ["x", "y"]
    found = [json.loads(line) for line in (tmp_path / "out" / "quarantine.jsonl").read_text().splitlines()]
    reasons = sorted(q["reason"] for q in found)
    assert reasons == [
        "line 22: column 'b': '2\\x0c3' is not a number",
        "line 23: column 'a': '4\\u20285' is not a number",
        "line 24: new-line character seen in unquoted field - do you need to open the file in universal-newline mode?",
        "line 27: not UTF-8 text",
        "lines 25-26: a quoted field runs on past the end of line 25",
    ]
    assert {"d.csv:5,6,caf\\xe9", "d.csv:7,8,x9,1,y"} <= {q["key"] for q in found}
    (tmp_path / "latin.csv").write_bytes(b"a,b,esp\xe8ce\n1,2,x\n")
    with pytest.raises(DataError, match=r"the header of .*latin.csv is not UTF-8 text"):
        prepare(str(tmp_path / "latin.csv"), str(tmp_path / "out2"), num_workers=1, label_column="species")


def test_csv_unknown_label_column(tmp_path):
    (tmp_path / "d.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(DataError, match=r"label column 'label' not in .*columns are: a, b, c"):
        prepare(str(tmp_path / "d.csv"), str(tmp_path / "out"), num_workers=1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_workers": 0}, "num_workers must be >= 1"),
        ({"val_fraction": 0.6, "test_fraction": 0.5}, "leave room for training data"),
        ({"max_corrupt_fraction": 2}, "max_corrupt_fraction must be in"),
    ],
)
def test_bad_parameters(tmp_path, kwargs, message):
    with pytest.raises(DataError, match=message):
        prepare("builtin:digits", str(tmp_path / "out"), **kwargs)


def test_unknown_builtin_and_too_many_workers(tmp_path):
    with pytest.raises(DataError, match="unknown built-in dataset 'mnist'"):
        prepare("builtin:mnist", str(tmp_path / "a"))
    with pytest.raises(DataError, match="fewer than its .* shards"):
        prepare("builtin:iris", str(tmp_path / "b"), num_workers=32)


def test_gcs_image_folder_and_csv(tmp_path, gcs_emulator):
    write_images(tmp_path / "src", per_class=10)
    for path in sorted((tmp_path / "src").rglob("*.png")):
        gcs_emulator.blob(f"flowers/{path.relative_to(tmp_path / 'src')}").upload_from_filename(str(path))
    gcs_emulator.blob("flowers/cats/corrupt.png").upload_from_string(b"nope")
    settings = dict(num_workers=1, image_size=8, val_fraction=0.2, test_fraction=0.2, max_corrupt_fraction=0.1)
    stats = prepare("gs://test-bucket/flowers", str(tmp_path / "out"), **settings)
    assert stats["examples"] == 20 and stats["quarantined"] == 1 and stats["labels"] == ["cats", "dogs"]
    assert stats["source"] == "gs://test-bucket/flowers"
    # read REMOTE_READS at a time from gs://, one by one from a local folder: the same shards
    (tmp_path / "src" / "cats" / "corrupt.png").write_bytes(b"nope")
    local = prepare(str(tmp_path / "src"), str(tmp_path / "local"), **settings)
    assert local["splits"] == stats["splits"]
    shards = sorted(p.name for p in (tmp_path / "out").glob("*.tfrecord"))
    assert shards and all((tmp_path / "out" / n).read_bytes() == (tmp_path / "local" / n).read_bytes() for n in shards)

    gcs_emulator.blob("tables/d.csv").upload_from_string(
        "f1,f2,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40))
    )
    stats = prepare(
        "gs://test-bucket/tables/d.csv", str(tmp_path / "csv"), num_workers=1, val_fraction=0.2, test_fraction=0.2
    )
    assert stats["kind"] == "tabular" and stats["examples"] == 40
    with pytest.raises(FileNotFoundError, match="nothing found at gs://test-bucket/missing"):
        prepare("gs://test-bucket/missing", str(tmp_path / "m"), num_workers=1)


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_parallel_prep_writes_what_one_process_writes(tmp_path, monkeypatch):
    from components.lib.prep import shards as prep_shards

    pools: list[int] = []
    real = prep_shards.shard_writers
    monkeypatch.setattr(prep_shards, "shard_writers", lambda n: (pools.append(n), real(n))[1])
    write_images(tmp_path / "src", classes=("cats", "dogs", "owls"), per_class=40, size=(24, 20))
    write_images(tmp_path / "src", classes=("owls",), per_class=10, size=(30, 30), fmt="JPEG", seed=1)
    (tmp_path / "src" / "cats" / "broken.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "src" / "dogs" / "notes.txt").write_text("hello")
    one = prepare(str(tmp_path / "src"), str(tmp_path / "one"), num_workers=2, processes=1)
    pool = prepare(str(tmp_path / "src"), str(tmp_path / "pool"), num_workers=2, processes=2, writers_min_images=0)
    two = prepare(str(tmp_path / "src"), str(tmp_path / "two"), num_workers=2, processes=2, parallel_min_records=0)
    small = prepare(str(tmp_path / "src"), str(tmp_path / "small"), num_workers=2, processes=2)  # < 3,000 images
    assert pools == [2]  # the pool's run only
    assert one == pool == two == small and one["examples"] == 130 and one["quarantined"] == 2
    assert (
        _files(tmp_path / "one") == _files(tmp_path / "pool") == _files(tmp_path / "two") == _files(tmp_path / "small")
    )
    assert len(_files(tmp_path / "one")) > 6  # shards of every split, stats.json, quarantine.jsonl


def test_the_shard_writers_start_without_beam_and_report_their_errors(tmp_path, monkeypatch):
    from components.lib.prep import shards as prep_shards

    with prep_shards.shard_writers(1):  # the fork server starts before the variable is set
        pass
    monkeypatch.setenv("TFPIPE_TEST_WRITERS", "set later")
    with prep_shards.shard_writers(2) as key:
        pool = prep_shards.writer_pool(key)
        assert pool is not None
        assert pool.submit(eval, "'apache_beam' in __import__('sys').modules").result() is False
        assert pool.submit(eval, "'components.lib.prep.shards' in __import__('sys').modules").result() is True
        assert pool.submit(eval, "__import__('os').environ.get('TFPIPE_TEST_WRITERS')").result() == "set later"
        with pytest.raises(FileNotFoundError, match="no-such.run"):
            pool.submit(prep_shards.read_object, str(tmp_path / "no-such.run")).result()
    assert prep_shards.writer_pool(key) is None


def test_prep_runs_on_the_python_direct_runner_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    """Beam's "DirectRunner" first tries the Prism runner (a binary it downloads, another engine where the network
    allows it): each try leaves a beam-temp folder behind, one more every scheduled run."""
    import tempfile

    from components.prepare_data import pipeline_options

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for parallel in (False, True):
        assert pipeline_options(2, parallel).get_all_options()["runner"] == "FnApiRunner"
    write_images(tmp_path / "src", classes=("cats", "dogs"), per_class=20, size=(16, 16))
    prepare("builtin:iris", str(tmp_path / "iris"), num_workers=1)
    prepare(str(tmp_path / "src"), str(tmp_path / "two"), num_workers=1, processes=2, parallel_min_records=0)
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_small_image_of_a_gcs_folder_is_read_once_and_written_as_when_read_twice(tmp_path, monkeypatch, gcs_emulator):
    from components.lib.prep import sources

    write_images(tmp_path / "src", per_class=20, size=(24, 20))
    write_images(tmp_path / "src", classes=("owls",), per_class=20, size=(30, 30), fmt="JPEG", seed=1)
    (tmp_path / "src" / "cats" / "broken.png").write_bytes(b"\x89PNG not really")
    for path in sorted((tmp_path / "src").rglob("*.*")):
        gcs_emulator.blob(f"small/{path.relative_to(tmp_path / 'src')}").upload_from_filename(str(path))
    reads: list[str] = []
    read_object = sources.read_object
    monkeypatch.setattr(sources, "read_object", lambda uri, *a: reads.append(uri) or read_object(uri, *a))
    once = prepare("gs://test-bucket/small", str(tmp_path / "once"), num_workers=1, processes=1)
    assert len(reads) == len(set(reads)) == 61  # each image file, the broken one too
    reads.clear()
    monkeypatch.setattr("components.prepare_data.SMALL_IMAGE_BYTES", 0)  # read for its header, then to be decoded
    twice = prepare("gs://test-bucket/small", str(tmp_path / "twice"), num_workers=1, processes=1)
    assert len(reads) == 2 * 61
    assert once == twice and once["quarantined"] == 1
    assert _files(tmp_path / "once") == _files(tmp_path / "twice")
    reads.clear()
    prepare(str(tmp_path / "src"), str(tmp_path / "local"), num_workers=1, processes=1)
    assert len(reads) == 2 * 61  # a local folder: read again, which costs less than carrying the bytes
    shards = {name: data for name, data in _files(tmp_path / "once").items() if name.endswith(".tfrecord")}
    assert shards and all((tmp_path / "local" / name).read_bytes() == data for name, data in shards.items())


def test_image_folders_default_to_their_own_size_never_upsampled(tmp_path):
    write_images(tmp_path / "small", per_class=10, size=(40, 40))
    stats = prepare(
        str(tmp_path / "small"), str(tmp_path / "out-small"), num_workers=1, val_fraction=0.2, test_fraction=0.2
    )
    assert stats["input_shape"] == [40, 40, 3]
    assert stats["image_size"] == {
        "pixels": 40,
        "reason": "40 px: the images' own size (shorter sides 40 px; the "
        "smallest sets the size, so no image is upsampled; the cap is 180 px)",
    }
    explicit = prepare(
        str(tmp_path / "small"),
        str(tmp_path / "out-40"),
        num_workers=1,
        val_fraction=0.2,
        test_fraction=0.2,
        image_size=40,
    )
    assert explicit["image_size"]["reason"] == "40 px: set by image_size"
    assert {n: b for n, b in _files(tmp_path / "out-small").items() if n.endswith(".tfrecord")} == {
        n: b for n, b in _files(tmp_path / "out-40").items() if n.endswith(".tfrecord")
    }

    write_images(tmp_path / "mixed", per_class=10, size=(64, 30))
    write_images(tmp_path / "mixed", classes=("owls",), per_class=10, size=(50, 60))
    assert prepare(str(tmp_path / "mixed"), str(tmp_path / "out-mixed"), num_workers=1)["input_shape"] == [30, 30, 3]
    write_images(tmp_path / "large", per_class=10, size=(260, 200))
    stats = prepare(str(tmp_path / "large"), str(tmp_path / "out-large"), num_workers=1)
    assert stats["input_shape"] == [180, 180, 3]
    assert stats["image_size"]["reason"] == "180 px: the cap for image folders (the images' shorter sides are 200 px)"
    assert json.loads((tmp_path / "out-large" / "stats.json").read_text())["image_size"]["pixels"] == 180


def test_default_image_size_rule():
    assert default_image_size([40, 40, 40]) == (
        40,
        "40 px: the images' own size (shorter sides 40 px; the smallest "
        "sets the size, so no image is upsampled; the cap is 180 px)",
    )
    assert default_image_size([32, 500])[0] == 32
    assert default_image_size([240, 333, 500])[0] == 180
    assert default_image_size([])[0] == 180


def test_mixed_size_images_default_to_the_smallest_side_and_an_explicit_size_prepares_other_data(tmp_path):
    """Shapes of mixed sizes (shorter sides 32, 48 and 200 px, the last above the 180 px cap): by default the model
    input is the smallest side, 32 px (no image upsampled); at an explicit 64 px the training split differs and is
    over 3× larger, and the test split holds the same images (split by file name). That the default trains as well
    is bench.image_size's goal."""
    from bench.image_size import shards_digest, write_mixed_shapes

    write_mixed_shapes(tmp_path / "shapes", per_class=20, sides=[32, 48, 200])
    shards, tests = {}, {}
    for name, size, shape in (("default", 0, [32, 32, 3]), ("explicit", 64, [64, 64, 3])):
        stats = prepare(
            str(tmp_path / "shapes"),
            str(tmp_path / name),
            num_workers=1,
            image_size=size,
            val_fraction=0.2,
            test_fraction=0.2,
        )
        assert stats["input_shape"] == shape
        shards[name], tests[name] = shards_digest(tmp_path / name), stats["splits"]["test"]["examples"]
    assert shards["default"][1] != shards["explicit"][1] and shards["explicit"][0] > 3 * shards["default"][0], shards
    assert tests["default"] == tests["explicit"] > 0


def test_remote_reads_run_a_window_at_a_time_and_keep_their_order():
    import threading
    import time

    from components.lib.prep.shards import in_order

    active, most, lock = 0, 0, threading.Lock()

    def read(i):
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.01)
        with lock:
            active -= 1
        return i * i

    assert list(in_order(read, range(100), 4)) == [i * i for i in range(100)]
    assert 1 < most <= 4
    most = 0
    assert list(in_order(read, range(5), 0)) == [0, 1, 4, 9, 16] and most == 1
