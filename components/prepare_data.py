"""Data prep: a source → TFRecord shards for train/val/test, stats.json and quarantine.jsonl.

The split is decided by a hash of each record's key (salted), so it is stable across reruns, shard counts and
worker counts. Every split gets at least `num_workers` non-empty shards, as FILE auto-sharding needs.

Images are decoded and resized on every core the step may use (a process pool; `processes`), and the records are
written by this process in one fixed order, so the output is byte for byte the same as a single-process run's.
Records are written without TensorFlow (`components.lib.records`): the step does not pay its start-up. Progress lines
(`trainer.progress`, stage `prepare`): records read and written, and quarantined, of the total, every 2 s and at the
end.
"""

import hashlib
import json
import math
import multiprocessing
import os
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from kfp.dsl import Artifact, Dataset, Output

from components.lib.cpus import available_cpus
from components.lib.records import TFRecordWriter, encode_example
from components.lib.sources import BadRecord, DataError, open_source
from components.lib.storage import staged
from trainer import progress
from trainer.schema import SPLITS, TABULAR, shard_name

PARALLEL_MIN_RECORDS = 64  # fewer images are decoded in this process (a pool's start-up would cost more)


def key_point(key: str, salt: str = "") -> float:
    """A deterministic pseudo-random point in [0, 1) for a record key (SHA-256)."""
    return int.from_bytes(hashlib.sha256(f"{salt}:{key}".encode()).digest()[:8], "big") / 2**64


def assign_split(key: str, val_fraction: float, test_fraction: float, salt: str = "") -> str:
    """Deterministic split from the key's hash point: test, then val, then train."""
    point = key_point(key, salt)
    if point < test_fraction:
        return "test"
    if point < test_fraction + val_fraction:
        return "val"
    return "train"


def shard_count(expected: float, num_workers: int, examples_per_shard: int) -> int:
    """A multiple of the worker count, at most `examples_per_shard` examples each, and up to 4 files per worker
    (for parallel reads) while each file still gets at least 100 examples."""
    per_worker = max(
        math.ceil(expected / (num_workers * examples_per_shard)), min(4, int(expected // (num_workers * 100))), 1
    )
    return num_workers * per_worker


def _load(load):
    """Run one record's loader: the example, or the BadRecord's reason."""
    try:
        return True, load()
    except BadRecord as e:
        return False, str(e)


def _encoded(task: tuple):
    """In a pool process: load and encode one record, `(load, key, label index, kind)` → (True, the record's bytes)
    or (False, the BadRecord's reason)."""
    load, key, label, kind = task
    ok, value = _load(load)
    return (True, encode_example(key, label, value, kind)) if ok else (False, value)


class _Pool:
    """An ordered `map` on `processes` processes, the pool forked on first use (nothing to import again) and only
    when there is more than one process; else the built-in `map`. Ordered, so results do not depend on it. A process
    that dies (killed for memory) fails the step (BrokenProcessPool) instead of hanging it."""

    def __init__(self, processes: int):
        self.processes = processes if "fork" in multiprocessing.get_all_start_methods() else 1
        self._pool = None

    def map(self, func, items):
        items = list(items)
        if self.processes <= 1 or len(items) < PARALLEL_MIN_RECORDS:
            return map(func, items)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("fork"))
        return self._pool.map(func, items, chunksize=max(1, min(64, len(items) // (8 * self.processes))))

    def __enter__(self) -> "_Pool":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _validate_args(num_workers, val_fraction, test_fraction, max_corrupt_fraction, examples_per_shard):
    if num_workers < 1:
        raise DataError(f"num_workers must be >= 1, got {num_workers}")
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise DataError(
            f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must be in (0, 1) "
            "and leave room for training data"
        )
    if not 0 <= max_corrupt_fraction <= 1:
        raise DataError(f"max_corrupt_fraction must be in [0, 1], got {max_corrupt_fraction}")
    if examples_per_shard < 1:
        raise DataError(f"examples_per_shard must be >= 1, got {examples_per_shard}")


def prepare(
    data_source: str,
    output_dir: str,
    num_workers: int = 2,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    image_size: int = 0,
    label_column: str = "label",
    max_corrupt_fraction: float = 0.05,
    split_salt: str = "",
    examples_per_shard: int = 2000,
    data_fingerprint: str = "",
    processes: int = 0,
) -> dict:
    """Prepare `data_source` into `output_dir`; returns the stats (also written to `stats.json`, with
    `data_fingerprint`: the digest of the data from the fingerprint step, "" when none). `processes`: how many
    processes decode images (0: every CPU this process may use, see `available_cpus`)."""
    _validate_args(num_workers, val_fraction, test_fraction, max_corrupt_fraction, examples_per_shard)
    if processes < 0:
        raise DataError(f"processes must be >= 0, got {processes}")
    processes = processes or available_cpus()
    os.makedirs(output_dir, exist_ok=True)
    with staged(data_source.removeprefix("file://")) as local, _Pool(processes) as pool:
        source = open_source(data_source, local, image_size, label_column, headers=pool.map)
        if not source.candidates:
            raise DataError(f"no records found in {data_source}")
        if len(source.labels) < 2:
            raise DataError(f"need at least two classes, found {len(source.labels)}: {source.labels}")
        label_index = {name: i for i, name in enumerate(source.labels)}
        fractions = {"train": 1 - val_fraction - test_fraction, "val": val_fraction, "test": test_fraction}
        shards = {
            s: shard_count(len(source.candidates) * fractions[s], num_workers, examples_per_shard) for s in SPLITS
        }
        writers = {
            s: [TFRecordWriter(os.path.join(output_dir, shard_name(s, i, n))) for i in range(n)]
            for s, n in shards.items()
        }
        per_class: dict[str, Counter] = {s: Counter() for s in SPLITS}
        sums: defaultdict[str | tuple[str, int], float] = defaultdict(float)
        quarantine: list[dict] = []
        # records are written in hash order, so shards hold no class runs and a modest shuffle buffer mixes well
        ordered = sorted(source.candidates, key=lambda c: key_point(c[0], "order" + split_salt))
        if source.parallel:  # decoded and encoded in the pool: records come back in order
            loaded = pool.map(_encoded, [(load, key, label_index[label], source.kind) for key, label, load in ordered])
        else:
            loaded = map(_load, [load for _, _, load in ordered])
        total = len(ordered)
        counter = progress.Counter(
            "prepare",
            "records",
            lambda c: f"{c['done']}/{total} records read, {c['written']} written, {c['quarantined']} quarantined",
            total=total,
        )
        try:
            for done, ((key, label, _), (ok, value)) in enumerate(zip(ordered, loaded)):
                counter.update(done=done, written=done - len(quarantine), quarantined=len(quarantine))
                if not ok:
                    quarantine.append({"key": key, "label": label, "reason": value})
                    continue
                split = assign_split(key, val_fraction, test_fraction, split_salt)
                n = sum(per_class[split].values())
                writers[split][n % shards[split]].write(
                    value if source.parallel else encode_example(key, label_index[label], value, source.kind)
                )
                per_class[split][label] += 1
                if source.kind == TABULAR and split == "train":
                    sums["n"] += 1
                    for j, v in enumerate(value):
                        sums[("s", j)] += float(v)
                        sums[("q", j)] += float(v) * float(v)
            counter.finish(done=total, written=total - len(quarantine), quarantined=len(quarantine))
        finally:
            for split_writers in writers.values():
                for w in split_writers:
                    w.close()

    with open(os.path.join(output_dir, "quarantine.jsonl"), "w") as f:
        f.writelines(json.dumps(q) + "\n" for q in quarantine)
    good = total - len(quarantine)
    stats: dict[str, Any] = {
        "source": data_source,
        "data_fingerprint": data_fingerprint,
        "kind": source.kind,
        "input_shape": source.input_shape,
        "image_size": {"pixels": source.input_shape[0], "reason": source.size_reason} if source.size_reason else None,
        "labels": source.labels,
        "feature_names": source.feature_names,
        "records": total,
        "examples": good,
        "quarantined": len(quarantine),
        "corrupt_fraction": round(len(quarantine) / total, 6),
        "ignored_files": source.ignored,
        "split": {"val_fraction": val_fraction, "test_fraction": test_fraction, "salt": split_salt},
        "splits": {
            s: {
                "examples": sum(per_class[s].values()),
                "per_class": {label: per_class[s][label] for label in source.labels},
                "shards": shards[s],
                "bytes": sum(
                    os.path.getsize(os.path.join(output_dir, shard_name(s, i, shards[s]))) for i in range(shards[s])
                ),
            }
            for s in SPLITS
        },
    }
    if source.kind == TABULAR and sums["n"]:
        count = sums["n"]
        stats["feature_mean"] = [sums[("s", j)] / count for j in range(source.input_shape[0])]
        stats["feature_variance"] = [
            max(sums[("q", j)] / count - (sums[("s", j)] / count) ** 2, 0.0) for j in range(source.input_shape[0])
        ]
    with open(os.path.join(output_dir, "stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    _check(stats, output_dir, max_corrupt_fraction)
    return stats


def _check(stats: dict, output_dir: str, max_corrupt_fraction: float) -> None:
    quarantine = os.path.join(output_dir, "quarantine.jsonl")
    if stats["examples"] == 0:
        raise DataError(f"all {stats['records']} records are unreadable; see {quarantine}")
    if stats["corrupt_fraction"] > max_corrupt_fraction:
        raise DataError(
            f"{stats['quarantined']} of {stats['records']} records ({stats['corrupt_fraction']:.1%}) are unreadable "
            f"or malformed, above max_corrupt_fraction={max_corrupt_fraction:.1%}; see {quarantine}"
        )
    present = [c for c in stats["labels"] if sum(stats["splits"][s]["per_class"][c] for s in SPLITS)]
    if len(present) < 2:
        raise DataError(f"need at least two classes with readable examples, found {present}")
    for split in SPLITS:
        info = stats["splits"][split]
        if info["examples"] < info["shards"]:
            raise DataError(
                f"the {split} split has {info['examples']} examples, fewer than its {info['shards']} shards "
                f"(one per worker at least): use more data, fewer workers or a larger {split} fraction"
            )


def prepare_data(
    data_source: str,
    num_workers: int,
    val_fraction: float,
    test_fraction: float,
    image_size: int,
    label_column: str,
    max_corrupt_fraction: float,
    split_salt: str,
    dataset: Output[Dataset],
    stats: Output[Artifact],
    data_fingerprint: str = "",
):
    """KFP step: prepare the data into the `dataset` artifact (shards, stats.json, quarantine.jsonl).
    `data_fingerprint` (the fingerprint step's digest) makes the cache key follow the data; recorded in stats.json.

    Args:
        data_source: The data: builtin:digits, builtin:iris, an image folder or a CSV file; a local path or gs:// URI.
        num_workers: Training workers: every split gets at least this many non-empty shards.
        val_fraction: Share of the examples in the validation split.
        test_fraction: Share of the examples in the test split.
        image_size: Side in pixels of the prepared images (0: the data's own).
        label_column: Label column of a CSV source.
        max_corrupt_fraction: The step fails above this share of unreadable records.
        split_salt: Salt of the deterministic split.
        data_fingerprint: The fingerprint step's digest of the source (keys the cache on the data).
    """
    import json
    import shutil

    from components.prepare_data import prepare

    result = prepare(
        data_source,
        dataset.path,
        num_workers,
        val_fraction,
        test_fraction,
        image_size,
        label_column,
        max_corrupt_fraction,
        split_salt,
        data_fingerprint=data_fingerprint,
    )
    shutil.copy(f"{dataset.path}/stats.json", stats.path)
    dataset.metadata.update({k: result[k] for k in ("kind", "input_shape", "examples", "quarantined")})
    dataset.metadata["labels"] = result["labels"]
    if data_fingerprint:
        dataset.metadata["data_fingerprint"] = data_fingerprint
    print(json.dumps({s: result["splits"][s]["examples"] for s in result["splits"]}))
