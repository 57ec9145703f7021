"""prepare-data's plain parts, without Beam: where records go (`Layout`), sorted runs of them (written, read back,
merged), and shards written from their runs, each record's `tf.train.Example` encoded and its image decoded on the
way. The transforms of `components.lib.prep.pipeline` call them; tests reach them directly.

Being free of Beam, they also run in a pool of processes (`shard_writers`): with the direct runner in this process,
an image folder's shard goes to one of them whole (its runs read, its images decoded, its examples encoded, the
shard and its summary written). The processes fork from a server that imports this module, not Beam, so they start
sooner and take less memory than Beam's own worker processes, each of which imports Beam first.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import io
import json
import multiprocessing
import os
import pickle
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from components.lib.prep import rules as prep_rules
from components.lib.prep.records import TFRecordWriter, encode_example
from components.lib.prep.sources import BadRecord, load_image
from core.schema import IMAGE, shard_name
from core.storage import list_files, open_write, read_object

QUARANTINE = "quarantine.jsonl"


@dataclass(frozen=True)
class Layout:
    """Where the records go, decided before the data is read."""

    kind: str
    shards: dict[str, int]
    val_fraction: float
    test_fraction: float
    salt: str
    output_dir: str
    temp_dir: str
    image_size: int = 0  # image folders: the size asked for (0: the images' own, see `ImageShape`)
    labels: tuple[str, ...] = ()  # known before the read (image folders, built-ins); else the records' own, sorted
    reads: int = 0  # images read at once by a worker: REMOTE_READS for a gs:// folder (0: one at a time)
    keep: int = 0  # image files of at most this many bytes go on with their bytes (`image_header`): a gs:// folder's
    writers: str = ""  # the pool of this process that writes the shards (`shard_writers`), if any

    def route(self, key: str, position: tuple) -> tuple[str, tuple]:
        """A record's shard file and its order there (`prep_rules.route`)."""
        split, shard, order = prep_rules.route(
            key, position, self.val_fraction, self.test_fraction, self.shards, self.salt
        )
        return self._names[split][shard], order

    def destinations(self) -> list[str]:
        return [name for names in self._names.values() for name in names]

    @functools.cached_property
    def _names(self) -> dict[str, list[str]]:
        return {s: [shard_name(s, i, n) for i in range(n)] for s, n in self.shards.items()}


@dataclass(frozen=True)
class ImageShape:
    """The prepared images' size and channels, from every image's header (`components.lib.prep.sources` rules)."""

    size: int
    channels: int
    reason: str


def example(kind: str, label_ids: dict[str, int], shape: ImageShape | None, record: tuple) -> tuple:
    """(record, its Example's bytes), or (record, the BadRecord of an image that does not decode). A record is
    (order, (key, label, payload)): the payload is an image's URI (with its bytes, for a small remote one), an
    image's pixels or the features' float32 bytes."""
    _, (key, label, payload) = record
    if isinstance(payload, str | tuple):
        assert shape is not None, "an image folder's shape is a side input of its merge"
        uri, data = (payload, None) if isinstance(payload, str) else payload
        try:
            value = load_image(uri, shape.size, shape.channels, data)
        except BadRecord as e:
            return record, e
    else:
        value = np.frombuffer(payload, np.uint8) if kind == IMAGE else payload
    return record, encode_example(key, label_ids[label], value, kind)


def examples(records, kind: str, label_ids: dict[str, int], shape: ImageShape | None, reads: int = 0) -> Iterator:
    """`example` of each record, in order, with `reads` images read at once (`in_order`)."""
    return in_order(functools.partial(example, kind, label_ids, shape), records, reads)


_pools: dict[str, ProcessPoolExecutor] = {}


@contextlib.contextmanager
def shard_writers(processes: int) -> Iterator[str]:
    """A pool of `processes` processes for the shards merged in this process (Beam's direct runner here) while the
    block runs (`write_destination`, sent by `Merge`); its key, for `Layout.writers`."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    key = uuid.uuid4().hex
    # the fork server keeps the environment of its start (the first pool's): each worker takes the current one
    _pools[key] = pool = ProcessPoolExecutor(processes, context, initializer=_environ, initargs=(dict(os.environ),))
    for _ in range(processes):  # started now, while this process builds the pipeline and reads the headers
        pool.submit(os.getpid)
    try:
        yield key
    finally:
        _pools.pop(key).shutdown(cancel_futures=True)


def _environ(environ: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environ)


def writer_pool(key: str) -> ProcessPoolExecutor | None:
    """The pool `shard_writers` made with this key, when this process holds it."""
    return _pools.get(key)


def in_order(fn, args, window: int) -> Iterator:
    """`fn` of each of `args`, in order, with up to `window` calls at once on threads (0: one at a time, here): for
    reads that wait on the network."""
    if not window:
        yield from map(fn, args)
        return
    pool = _readers(window)
    pending: deque[Future] = deque()
    for arg in args:
        pending.append(pool.submit(fn, arg))
        if len(pending) >= 2 * window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


_threads: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _readers(threads: int) -> ThreadPoolExecutor:
    """This process's reader threads (kept: each keeps its GCS client and connections)."""
    key = (os.getpid(), threads)
    if key not in _threads:
        _threads[key] = ThreadPoolExecutor(threads, thread_name_prefix="prep-reads")
    return _threads[key]


def quarantined(key: str, label: str, order: tuple, error: BadRecord) -> tuple:
    """A bad record's run entry: its order and its quarantine.jsonl line."""
    return order, (json.dumps({"key": key, "label": label, "reason": str(error)}) + "\n").encode()


Run = tuple[str, int, int]  # a sorted run: its file, and its bytes [start, end) (end -1: to the end of the file)
CHUNK_RECORDS = 1024  # run entries pickled together


def write_runs(folder: str, held: dict[str, list]) -> list[tuple[str, Run]]:
    """Each destination's entries (order, ...) sorted into a run, every run in one new file in `folder` (one file
    per flush, not one per destination and flush: thousands of shards would make a file each); (destination, its
    run) for each."""
    path = f"{folder}/{uuid.uuid4().hex}.run"
    written, position = [], 0
    with open_write(path) as f:
        for destination in sorted(held):
            entries = sorted(held[destination], key=_order)
            start = position
            for i in range(0, len(entries), CHUNK_RECORDS):
                data = pickle.dumps(entries[i : i + CHUNK_RECORDS], protocol=pickle.HIGHEST_PROTOCOL)
                f.write(data)
                position += len(data)
            written.append((destination, (path, start, position)))
    return written


def _order(entry: tuple):
    return entry[0]


def read_run(run: Run) -> Iterator[tuple]:
    """A run's entries, in order (its bytes read in one request; one chunk of entries unpickled at a time)."""
    path, start, end = run
    data = read_object(path, end - start if end >= 0 else -1, start)
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        yield from pickle.load(stream)


def merged(runs) -> Iterator[tuple]:
    """The entries of sorted runs, in order."""
    return heapq.merge(*(read_run(run) for run in sorted(runs)), key=_order)


def write_destination(layout: Layout, destination: str, runs: list[Run], labels: list[str], shape) -> None:
    """A shard written from its runs (`write_shard`): its bad images' quarantine run, and its summary JSON in the
    temporary folder."""
    bad: list = []
    summary = write_shard(layout, destination, merged(runs), {name: i for i, name in enumerate(labels)}, shape, bad)
    if bad:
        write_runs(f"{layout.temp_dir}/quarantine", {QUARANTINE: bad})
    with open_write(f"{layout.temp_dir}/summaries/{destination}.json") as f:
        f.write(json.dumps(summary).encode())


def write_shard(
    layout: Layout, destination: str, records, label_ids: dict[str, int], shape: ImageShape | None, bad: list
) -> dict:
    """Encode and write one shard's records (in order), decoding images given by URI (`shape`: an image folder's);
    its summary. Images that do not decode are appended to `bad` as quarantine run entries."""
    per_class: Counter = Counter()
    sums = FeatureSums() if layout.kind != IMAGE and destination.startswith("train-") else None
    found = examples(records, layout.kind, label_ids, shape, layout.reads)
    with TFRecordWriter(f"{layout.output_dir}/{destination}") as writer:
        for (order, (key, label, payload)), encoded in found:
            if isinstance(encoded, BadRecord):
                bad.append(quarantined(key, label, order, encoded))
                continue
            writer.write(encoded)
            if sums is not None:
                sums.add(payload)
            per_class[label] += 1
    totals = sums.totals() if sums is not None else None
    return {
        "examples": sum(per_class.values()),
        "per_class": dict(per_class),
        "bytes": writer.bytes,
        "feature_sums": None if totals is None else totals[0],
        "feature_squares": None if totals is None else totals[1],
        "feature_histograms": None if sums is None else sums.histograms(),
    }


class FeatureSums:
    """The sums of feature vectors (float32 bytes) and of their squares, in float64, added a block of
    `BLOCK` vectors at a time in the order given: the same order, the same sums. With them, each feature's fine
    histogram over the shard's own range (`fine_histograms`): the shard's vectors are held until its end."""

    BLOCK = 4096

    def __init__(self):
        self.block: list[bytes] = []
        self.sums = self.squares = None
        self.folded: list[np.ndarray] = []

    def add(self, payload: bytes) -> None:
        self.block.append(payload)
        if len(self.block) == self.BLOCK:
            self._fold()

    def _fold(self) -> None:
        width = len(self.block[0]) // 4
        x = np.frombuffer(b"".join(self.block), "<f4").reshape(-1, width).astype(np.float64)
        sums, squares = x.sum(axis=0), (x * x).sum(axis=0)
        self.sums = sums if self.sums is None else self.sums + sums
        self.squares = squares if self.squares is None else self.squares + squares
        self.folded.append(x)
        self.block = []

    def totals(self) -> tuple[list[float], list[float]] | None:
        if self.block:
            self._fold()
        if self.sums is None or self.squares is None:
            return None
        return self.sums.tolist(), self.squares.tolist()

    def histograms(self) -> list[dict] | None:
        """`fine_histograms` of the vectors added (None without any)."""
        if self.block:
            self._fold()
        return fine_histograms(np.concatenate(self.folded)) if self.folded else None


FINE_BINS = 1024  # a training shard's buckets per feature, over the shard's own [min, max]


def fine_histograms(x: np.ndarray) -> list[dict]:
    """Each column's histogram over `FINE_BINS` equal-width buckets between its minimum and maximum (one bucket
    when they are equal): {"low", "high", "bins": the non-empty buckets' indices, "counts"}. The shards' fine
    histograms make the data set's standard histograms (`components.lib.histograms.standard`): a shard's histogram
    depends only on its records, so every runner gives the same."""
    low, high = x.min(axis=0), x.max(axis=0)
    width = np.where(high > low, high - low, 1.0)
    index = np.minimum(((x - low) / width * FINE_BINS).astype(np.int64), FINE_BINS - 1)
    out = []
    for j in range(x.shape[1]):
        counts = np.bincount(index[:, j], minlength=FINE_BINS)
        bins = np.flatnonzero(counts)
        out.append(
            {"low": float(low[j]), "high": float(high[j]), "bins": bins.tolist(), "counts": counts[bins].tolist()}
        )
    return out


def fine_buckets(hist: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fine histogram's non-empty buckets as (lows, highs, counts); a point bucket when its low is its high."""
    bins = np.asarray(hist["bins"], np.float64)
    width = (hist["high"] - hist["low"]) / FINE_BINS
    lows = hist["low"] + bins * width
    highs = np.where(bins == FINE_BINS - 1, hist["high"], hist["low"] + (bins + 1) * width)
    return lows, highs, np.asarray(hist["counts"], np.float64)


def write_quarantine(layout: Layout) -> int:
    """quarantine.jsonl from every quarantine run (the readers' and the image decoders'), in order; its lines."""
    count = 0
    with open_write(f"{layout.output_dir}/{QUARANTINE}") as f:
        for _, line in merged((path, 0, -1) for path in list_files(f"{layout.temp_dir}/quarantine")):
            f.write(line)
            count += 1
    return count
