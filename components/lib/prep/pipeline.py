"""prepare-data's Apache Beam pipeline: the same transforms on every runner (the direct runner in this process or on
several, Dataflow on Vertex AI).

    work items ─ read and route ─┬─ records ─ sorted runs ─ group by shard ─ merge (decode images) ─ TFRecord shards
    (CSV ranges, image files,    ├─ labels (a combiner) ─────────────────┘ side inputs: label ids, image shape
     built-in records)           ├─ image headers (a combiner) ──────────────────────────────────────┘
                                 │                 └─ images per shorter side (noted for the data profile)
                                 └─ quarantined ─ sorted runs ─┐
                                            bad images' runs ──┴─ merged after the run ─ quarantine.jsonl

Memory does not grow with the data: each record goes by its key's hash to a shard fixed before the read
(components.lib.prep.rules), a worker writes what it holds as sorted runs every `RUN_RECORDS` records, and each shard
is written by merging its runs. A shard's order is a total order of its records, so the output does not depend on how
the runner cut the work. Elements are batches (a work item's records for one shard): Beam's cost per element is not
paid per record. Each merge writes a summary (counts per class, bytes, and for training shards the sums of the
features and of their squares and their fine histograms), which `components.prepare_data` adds up in shard order into
stats.json.
"""

from __future__ import annotations

import functools
import json
import typing
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from components.lib.prep.shards import (
    QUARANTINE,
    ImageShape,
    Layout,
    Run,
    in_order,
    quarantined,
    write_destination,
    write_quarantine,
    write_runs,
    writer_pool,
)
from components.lib.prep.source_reads import (
    CsvPlan,
    CsvRange,
    ImageFiles,
    read_csv_range,
    read_images,
)
from components.lib.prep.sources import BadRecord, image_header
from core.storage import open_write, read_bytes

BATCH_RECORDS = 20_000  # records of a work item held before they go on, in batches
RUN_RECORDS = 50_000  # records a worker holds before writing them out as sorted runs
RUN_BYTES = 16 << 20  # and their payloads' bytes
REMOTE_READS = 16  # images of a gs:// folder read at once by a worker (each read waits on the network)


# ---------------------------------------------------------------------------------------------------------------------
# Work items: what a worker reads in one go


def read_item(item, csv_plan: CsvPlan | None) -> Iterator[tuple[str, str, tuple, object]]:
    """(key, label, position, what to prepare) for each record of a work item: a CSV range (features, or the
    BadRecord of a bad row), image files (URIs, or the BadRecord of a file that is no image), or built-in records
    (their arrays)."""
    if isinstance(item, CsvRange):
        assert csv_plan is not None
        yield from read_csv_range(csv_plan, item)
    elif isinstance(item, ImageFiles):
        yield from read_images(item)
    else:
        yield from item


class Prepare(beam.DoFn):
    """A work item's records → (destination, [(order, (key, label, payload)), ...]), a batch for each destination it
    reaches, and a ("quarantine.jsonl", [(order, JSON line), ...]) output; for image files, a "headers" output of
    their headers' `ShapeOf` summary. The payload is the example's bytes, or an image's URI (with its bytes when the
    file is small and remote, `Layout.keep`: read once): images are decoded where their shard is written, once their
    size is known (the runs stay small). Batches, not records, are the pipeline's elements: Beam's cost per element
    is paid a few times per `BATCH_RECORDS` records, not once per record."""

    def __init__(self, layout: Layout, csv_plan: CsvPlan | None):
        self.layout, self.csv_plan = layout, csv_plan

    def process(self, item):
        records = read_item(item, self.csv_plan)
        headers: list = []
        if isinstance(item, ImageFiles):  # at most 256 files: their headers read at once from gs://
            records = list(records)
            uris = [value for *_, value in records if isinstance(value, str)]
            read = functools.partial(image_header, keep=self.layout.keep)
            heads = dict(zip(uris, in_order(read, uris, self.layout.reads)))
            headers = [header for header, _ in heads.values()]
            records = [(*r[:3], _with_bytes(r[3], heads)) for r in records]
        batches: dict[str, list] = {}
        held = 0
        bad: list = []
        route = self.layout.route
        for key, label, position, value in records:
            where, order = route(key, position)
            if isinstance(value, BadRecord):
                bad.append(quarantined(key, label, order, value))
                continue
            payload = value if isinstance(value, str | bytes | tuple) else np.ascontiguousarray(value).tobytes()
            batch = batches.get(where)
            if batch is None:
                batch = batches[where] = []
            batch.append((order, (key, label, payload)))
            held += 1
            if held == BATCH_RECORDS:
                yield from batches.items()
                batches, held = {}, 0
        yield from batches.items()
        if bad:
            yield beam.pvalue.TaggedOutput("quarantined", (QUARANTINE, bad))
        if headers:
            yield beam.pvalue.TaggedOutput("headers", header_summary(headers))


def _with_bytes(value, heads: dict):
    """An image file's payload: its URI, or (URI, its bytes) when its header's read got the whole of a small file."""
    if not isinstance(value, str) or heads[value][1] is None:
        return value
    return value, heads[value][1]


def _value_bytes(value) -> int:
    """The bytes a run entry's value holds: a quarantine line's, or its payload's (an example's, a URI's, or a small
    image's URI and bytes: its bytes')."""
    if not isinstance(value, tuple):
        return len(value)
    payload = value[-1]
    return len(payload[1]) if isinstance(payload, tuple) else len(payload)


class WriteRuns(beam.DoFn):
    """Batches of entries (destination, [(order, ...), ...]) → sorted runs, written to one file in `folder` each time
    the entries held reach `RUN_RECORDS` or their payloads `RUN_BYTES`, and at the end of a bundle; emits
    (destination, run)."""

    def __init__(self, folder: str, run_records: int = RUN_RECORDS, run_bytes: int = RUN_BYTES):
        self.folder, self.run_records, self.run_bytes = folder, run_records, run_bytes

    def start_bundle(self):
        self.held: dict[str, list] = {}
        self.count = self.size = 0
        self.written: list[tuple[str, Run]] = []

    def process(self, element):
        destination, entries = element
        held = self.held.get(destination)
        if held is None:
            held = self.held[destination] = []
        held += entries
        self.count += len(entries)
        self.size += sum(_value_bytes(value) for _, value in entries)
        if self.count >= self.run_records or self.size >= self.run_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.held:
            self.written += write_runs(self.folder, self.held)
        self.held, self.count, self.size = {}, 0, 0

    def finish_bundle(self):
        self._flush()
        for pair in self.written:
            yield WindowedValue(pair, 0, [GlobalWindow()])


class Merge(beam.DoFn):
    """(destination, runs) → the shard written in order from its runs, images decoded on the way
    (`prep_shards.write_destination`): here, or on this process's pool of shard writers (`Layout.writers`), which writes
    every shard of the bundle at once (they are waited for at its end)."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def start_bundle(self):
        self.pending: list[Future] = []

    def process(self, element, labels, shape=None):
        destination, runs = element
        pool = writer_pool(self.layout.writers)
        if pool is None:
            write_destination(self.layout, destination, runs, labels, shape)
        else:
            self.pending.append(pool.submit(write_destination, self.layout, destination, list(runs), labels, shape))

    def finish_bundle(self):
        for done in self.pending:
            done.result()


# ---------------------------------------------------------------------------------------------------------------------
# Image shape: a combiner over the images' headers


def header_summary(headers: list[tuple[str, int] | None]) -> tuple:
    """Image headers (mode, shorter side; None: unreadable) → (the modes seen, {shorter side: images})."""
    read = [h for h in headers if h is not None]
    return frozenset(mode for mode, _ in read), dict(Counter(side for _, side in read))


class ShapeOf(beam.CombineFn):
    """`header_summary`s → the summary of all their headers."""

    def create_accumulator(self):
        return frozenset(), {}

    def add_input(self, acc, summary):
        return self.merge_accumulators([acc, summary])

    def merge_accumulators(self, accs):
        modes: frozenset = frozenset()
        sides: Counter = Counter()
        for m, s in accs:
            modes |= m
            sides.update(s)
        return modes, dict(sides)

    def extract_output(self, acc):
        return acc


def image_shape(headers: tuple, image_size: int) -> ImageShape:
    """The ImageShape of the combined headers (explicit size, or the images' own up to the cap)."""
    from components.lib.prep.sources import GRAYSCALE_MODES, default_image_size

    modes, sides = headers
    channels = 1 if modes and modes <= GRAYSCALE_MODES else 3
    if image_size:
        return ImageShape(image_size, channels, f"{image_size} px: set by image_size")
    size, reason = default_image_size([min(sides), max(sides)] if sides else [])
    return ImageShape(size, channels, reason)


def image_sizes(headers: tuple) -> list[list[int]]:
    """The combined headers' images per shorter side, [[side, images], ...] in ascending sides."""
    return [[side, n] for side, n in sorted(headers[1].items())]


# ---------------------------------------------------------------------------------------------------------------------
# The pipeline


def build(p: beam.Pipeline, layout: Layout, items: list, csv_plan: CsvPlan | None, folder: bool) -> None:
    """Add the transforms to `p`: `items` are CSV ranges, image files (an image `folder`: their headers set the
    images' shape) or lists of (key, label, position, value) records."""
    work = p | "Work" >> beam.Create(items).with_output_types(typing.Any)  # not inferred from every record
    prepared = work | "Prepare" >> beam.ParDo(Prepare(layout, csv_plan)).with_outputs(
        "quarantined", "headers", main="records"
    )
    shape = None
    if folder:
        headers = prepared.headers | "Shape" >> beam.CombineGlobally(ShapeOf())
        _ = (
            headers
            | "Sides" >> beam.Map(image_sizes)
            | "Note sides" >> beam.Map(_note, f"{layout.temp_dir}/summaries/image_sizes.json")
        )
        shape = beam.pvalue.AsSingleton(
            headers
            | "Size" >> beam.Map(image_shape, layout.image_size)
            | "Note size" >> beam.Map(_note, f"{layout.temp_dir}/summaries/image_shape.json")
        )
    if layout.labels:
        labels = p | "Labels" >> beam.Create([list(layout.labels)])
    else:
        labels = (
            prepared.records
            | "Labels" >> beam.FlatMap(lambda batch: {label for _, (_, label, _) in batch[1]})
            | "Distinct" >> beam.Distinct()
            | "All" >> beam.combiners.ToList()
            | "Sorted" >> beam.Map(sorted)
        )
    quarantine_runs = WriteRuns(f"{layout.temp_dir}/quarantine")  # merged into quarantine.jsonl by `summaries`
    _ = prepared.quarantined | "Quarantine runs" >> beam.ParDo(quarantine_runs)
    _ = (
        prepared.records
        | "Runs" >> beam.ParDo(WriteRuns(f"{layout.temp_dir}/runs"))
        | "By destination" >> beam.GroupByKey()
        | "Merge" >> beam.ParDo(Merge(layout), labels=beam.pvalue.AsSingleton(labels), shape=shape)
    )
    _ = labels | "Note labels" >> beam.Map(_note, f"{layout.temp_dir}/summaries/labels.json")


def _note(value, path: str):
    """Write `value` (JSON) to `path` for the driver; pass it on."""
    payload = value.__dict__ if isinstance(value, ImageShape) else value
    with open_write(path) as f:
        f.write(json.dumps(payload).encode())
    return value


def summaries(layout: Layout) -> dict:
    """After the pipeline: quarantine.jsonl written, and what the pipeline noted, {name: summary} (shards, labels,
    image shape and sizes; quarantine.jsonl: its line count)."""
    found: dict = {QUARANTINE: write_quarantine(layout)}
    for name in [*layout.destinations(), "labels.json", "image_shape.json", "image_sizes.json"]:
        data = read_bytes(f"{layout.temp_dir}/summaries/{name}" + ("" if name.endswith(".json") else ".json"))
        if data is not None:
            found[name] = json.loads(data)
    return found
