"""Data prep: a source → TFRecord shards for train/val/test, stats.json and quarantine.jsonl, through one Apache
Beam pipeline (components.lib.prep.pipeline) on every target.

A salted hash of each record's key decides its split and its shard, stable across reruns, shard and worker counts
and runners; every split gets at least `num_workers` shards, as FILE auto-sharding needs. Sources are read where they
live, a piece at a time (components.lib.prep.source_reads). Outside Dataflow the pipeline runs on Beam's direct runner
in this process (a large image folder's shards written by a pool of processes) or, when asked, on Beam's worker
processes; the output is byte for byte the same every way. Progress (`core.progress`, stage `prepare`): records
read, written and quarantined, at the end.
"""

import json
import math
import os
import uuid
from typing import Any

from kfp.dsl import Artifact, Dataset, Output

from components.lib.prep import dataflow
from components.lib.prep.profile import data_profile
from components.lib.prep.rules import shard_count
from components.lib.prep.source_reads import CsvPlan, list_folder, match_files, plan_csv, write_listing
from components.lib.prep.sources import IMAGE_EXTENSIONS, SMALL_IMAGE_BYTES, DataError, builtin, is_glob, source_kind
from core import progress
from core.cpus import available_cpus
from core.schema import IMAGE, SPLITS, TABULAR, shard_name
from core.storage import is_gcs, open_write, remove_tree

ITEMS_PER_WORKER = 8  # work items per worker process, for balance
# fewer images are written in this process: for them, the shard writers' start (their server imports numpy, Pillow
# and the prep modules) costs more than writing the shards in parallel saves
WRITERS_MIN_IMAGES = 3_000


def _validate_args(num_workers, val_fraction, test_fraction, max_corrupt_fraction, examples_per_shard, processes):
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
    if processes < 0:
        raise DataError(f"processes must be >= 0, got {processes}")


class Source:
    """What a data source gives the pipeline: its kind, labels when known before the read, the records to expect,
    the work items (`work_items`), and for CSV files their plan."""

    def __init__(self, data_source: str, label_column: str, parts: int):
        self.csv_plan: CsvPlan | None = None
        self.items: list = []
        self.ignored: list[str] = []
        self.folder = False
        self.feature_names: list[str] = []
        self.input_shape: list[int] = []
        kind = _kind(data_source)
        if kind == "builtin":
            src = builtin(data_source.split(":", 1)[1])
            self.kind, self.labels, self.input_shape = src.kind, src.labels, src.input_shape
            self.feature_names, self.size_reason = src.feature_names, src.size_reason
            records = [(key, label, (i,), load()) for i, (key, label, load) in enumerate(src.candidates)]
            self.expected = len(records)
            size = _chunk_size(len(records), parts)
            self.items = [records[i : i + size] for i in range(0, len(records), size)]
        elif kind == "csv":
            files = match_files(data_source) if is_glob(data_source) else [data_source]
            sizes = sum(_size(f) for f in files)
            self.csv_plan = plan_csv(files, label_column, max(1 << 20, min(8 << 20, math.ceil(sizes / parts))))
            self.kind, self.labels, self.size_reason = TABULAR, [], ""
            self.input_shape, self.feature_names = [len(self.csv_plan.feature_names)], self.csv_plan.feature_names
            self.expected = self.csv_plan.lines
            self.items = list(self.csv_plan.ranges)
        else:
            self.kind, self.folder, self.size_reason = IMAGE, True, ""
            root = data_source.rstrip("/")
            listing = list_folder(root)
            in_class = [rel for rel in listing if "/" in rel]
            self.ignored = sorted(rel for rel in listing if "/" not in rel)
            images = [rel for rel in in_class if os.path.splitext(rel)[1].lower() in IMAGE_EXTENSIONS]
            if not images:
                raise DataError(f"no PNG or JPEG images in class sub-folders of {data_source}")
            self.labels = sorted({rel.split("/", 1)[0] for rel in images})
            self.expected = len(in_class)
            self.root, self.files, self.per_item = root, in_class, _chunk_size(len(in_class), parts)

    def work_items(self, temp_dir: str) -> list:
        """The work items; an image folder's listing is written to `temp_dir` first (`write_listing`)."""
        if not self.folder:
            return self.items
        return write_listing(self.root, self.files, f"{temp_dir}/listing.jsonl", self.per_item)


def _kind(data_source: str) -> str:
    """`source_kind` (the fingerprint step's too); a gs:// source is a CSV by its name (an object or a glob), else a
    folder, whose listing names what else it might be."""
    if is_gcs(data_source):
        return "csv" if is_glob(data_source) or data_source.lower().endswith(".csv") else "folder"
    return source_kind(data_source, data_source)


def _size(uri: str) -> int:
    if not is_gcs(uri):
        return os.path.getsize(uri)
    from core.storage import gcs_client, split_gcs

    bucket, name = split_gcs(uri)
    blob = gcs_client().bucket(bucket).get_blob(name)
    if blob is None:
        raise FileNotFoundError(f"nothing found at {uri}")
    return blob.size


def _chunk_size(records: int, parts: int) -> int:
    """Records per work item: about `parts` items, of at most 256 records."""
    return max(1, min(256, math.ceil(records / parts)))


def pipeline_options(processes: int, parallel: bool):
    """Beam's Python direct runner (`FnApiRunner`), in this process or on `processes` worker processes. Named, not
    reached through "DirectRunner", which first tries the Prism runner: a Go binary it downloads (a different engine
    wherever the network allows; elsewhere a failed try that leaves a temporary folder each run)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    if not parallel:
        return PipelineOptions([], runner="FnApiRunner", direct_running_mode="in_memory", direct_num_workers=1)
    return PipelineOptions(
        [], runner="FnApiRunner", direct_running_mode="multi_processing", direct_num_workers=processes
    )


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
    parallel_min_records: int | None = None,
    writers_min_images: int = WRITERS_MIN_IMAGES,
    runner: str = "direct",
    dataflow_options: dict | None = None,
    dataflow_min_records: int = 0,
    dataflow_output_dir: str = "",
) -> dict:
    """Prepare `data_source` into `output_dir`; returns the stats (also written to `stats.json`, with
    `data_fingerprint`: the fingerprint step's digest, "" when none).

    The direct runner runs in this process; an image folder of at least `writers_min_images` images has its shards
    written (images decoded, examples encoded) by a pool of `processes` processes (0: every CPU this process may
    use). From `parallel_min_records` records (None: never) the pipeline runs on `processes` of Beam's worker
    processes instead, each of which imports Beam, stopped one after the other: slower than the pool for images,
    and CSV rows and built-in records cost less to prepare than to send to another process.
    `runner` "dataflow": a Dataflow job with `dataflow_options` (components.lib.prep.dataflow; checked whatever the
    size) writing to `dataflow_output_dir` (the gs:// URI of `output_dir`, this step's view of it; "": `output_dir`
    is that URI), or the direct runner here for fewer than `dataflow_min_records` records."""
    import contextlib
    import dataclasses

    import apache_beam as beam

    from components.lib.prep import pipeline as prep_pipeline, shards as prep_shards

    _validate_args(num_workers, val_fraction, test_fraction, max_corrupt_fraction, examples_per_shard, processes)
    processes = processes or available_cpus()
    data_source = data_source.removeprefix("file://")
    source = Source(data_source, label_column, processes * ITEMS_PER_WORKER)
    if not source.expected:
        raise DataError(f"no records found in {data_source}")
    if source.labels and len(source.labels) < 2:
        raise DataError(f"need at least two classes, found {len(source.labels)}: {source.labels}")
    fractions = {"train": 1 - val_fraction - test_fraction, "val": val_fraction, "test": test_fraction}
    shards = {s: shard_count(source.expected * fractions[s], num_workers, examples_per_shard) for s in SPLITS}
    if runner not in ("direct", "dataflow"):
        raise DataError(f"runner must be direct or dataflow, got {runner!r}")
    parallel = processes > 1 and parallel_min_records is not None and source.expected >= parallel_min_records
    options = pipeline_options(processes, parallel)
    launched = False  # a Dataflow job: cancelled when the step is terminated
    if runner == "dataflow":
        job_output = (dataflow_output_dir or output_dir).rstrip("/")
        sent = dataflow.options(dataflow_options or {}, job_output, dataflow.step_project())
        if source.expected < dataflow_min_records:
            print(
                f"{source.expected} records, fewer than dataflow_min_records ({dataflow_min_records}): prepared in "
                "this step on Beam's direct runner (a Dataflow job takes minutes to start)"
            )
        else:
            output_dir = job_output
            if os.environ.get(dataflow.RECORD_ENV):  # the rehearsal: what would be sent, then the direct runner
                dataflow.record(os.environ[dataflow.RECORD_ENV], sent)
                print(f"Dataflow job {dataflow.create_recorded(sent) or '(not created)'}: run here, directly")
            else:
                options, launched = sent, True
    output_dir = output_dir.rstrip("/")
    if not is_gcs(output_dir):
        os.makedirs(output_dir, exist_ok=True)
    temp_dir = f"{output_dir}/.prep-{uuid.uuid4().hex[:12]}"
    remote_folder = source.folder and is_gcs(data_source)
    layout = prep_shards.Layout(
        source.kind,
        shards,
        val_fraction,
        test_fraction,
        split_salt,
        output_dir,
        temp_dir,
        image_size,
        tuple(source.labels),
        prep_pipeline.REMOTE_READS if remote_folder else 0,
        SMALL_IMAGE_BYTES if remote_folder else 0,
    )
    writers = source.folder and source.expected >= writers_min_images and processes > 1 and not (parallel or launched)
    counter = progress.Counter(
        "prepare",
        "records",
        lambda c: f"{c['done']}/{counter.total} records read, {c['written']} written, {c['quarantined']} quarantined",
    )
    pool = prep_shards.shard_writers(processes) if writers else contextlib.nullcontext("")
    try:
        with pool as key:
            layout = dataclasses.replace(layout, writers=key)
            p = beam.Pipeline(options=options)
            prep_pipeline.build(p, layout, source.work_items(temp_dir), source.csv_plan, source.folder)
            if launched:
                with dataflow.cancelled_on_termination() as launch:
                    launch.launched(p.run())
                    launch.result.wait_until_finish()
            else:
                p.run().wait_until_finish()
        found = prep_pipeline.summaries(layout)
    finally:
        remove_tree(temp_dir)
    stats = _stats(data_source, data_fingerprint, source, layout, found)
    with open_write(f"{output_dir}/stats.json") as f:
        f.write(stats_json(stats))
    counter.total = stats["records"]
    counter.finish(done=stats["records"], written=stats["examples"], quarantined=stats["quarantined"])
    _check(stats, output_dir, max_corrupt_fraction)
    return stats


def stats_json(stats: dict) -> bytes:
    """stats.json's bytes."""
    return json.dumps(stats, indent=2).encode()


def _stats(data_source: str, data_fingerprint: str, source: Source, layout, found: dict) -> dict:
    """stats.json from the pipeline's summaries, added up in shard order; empty shards and quarantine written."""
    from components.lib.prep.shards import QUARANTINE

    labels = found.get("labels.json", list(source.labels))
    input_shape, size_reason = source.input_shape, source.size_reason
    if source.folder:
        shape = found["image_shape.json"]
        input_shape, size_reason = [shape["size"], shape["size"], shape["channels"]], shape["reason"]
    splits: dict[str, dict] = {}
    sums = squares = None
    fine: list[list[dict]] = []  # each training shard's fine feature histograms
    for split in SPLITS:
        count = layout.shards[split]
        per_class = dict.fromkeys(labels, 0)
        examples = size = 0
        for i in range(count):
            name = shard_name(split, i, count)
            summary = found.get(name)
            if summary is None:
                open_write(f"{layout.output_dir}/{name}").close()
                continue
            examples, size = examples + summary["examples"], size + summary["bytes"]
            for label, n in summary["per_class"].items():
                per_class[label] += n
            if summary["feature_sums"] is not None:
                sums = (
                    summary["feature_sums"] if sums is None else [a + b for a, b in zip(sums, summary["feature_sums"])]
                )
                sq = summary["feature_squares"]
                squares = sq if squares is None else [a + b for a, b in zip(squares, sq)]
                fine.append(summary["feature_histograms"])
        splits[split] = {"examples": examples, "per_class": per_class, "shards": count, "bytes": size}
    quarantined = found[QUARANTINE]
    good = sum(s["examples"] for s in splits.values())
    total = good + quarantined
    stats: dict[str, Any] = {
        "source": data_source,
        "data_fingerprint": data_fingerprint,
        "kind": source.kind,
        "input_shape": input_shape,
        "image_size": {"pixels": input_shape[0], "reason": size_reason} if size_reason else None,
        "labels": labels,
        "feature_names": source.feature_names,
        "records": total,
        "examples": good,
        "quarantined": quarantined,
        "corrupt_fraction": round(quarantined / total, 6) if total else 0.0,
        "ignored_files": source.ignored,
        "split": {"val_fraction": layout.val_fraction, "test_fraction": layout.test_fraction, "salt": layout.salt},
        "splits": splits,
    }
    train = splits["train"]["examples"]
    if source.kind == TABULAR and train and sums is not None and squares is not None:
        stats["feature_mean"] = [s / train for s in sums]
        stats["feature_variance"] = [max(q / train - (s / train) ** 2, 0.0) for s, q in zip(sums, squares)]
    stats["profile"] = data_profile(
        splits["train"]["per_class"],
        source.feature_names,
        stats.get("feature_mean"),
        stats.get("feature_variance"),
        fine,
        found.get("image_sizes.json"),
    )
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
    runner: str = "direct",
    dataflow_options: dict = {},  # noqa: B006 (KFP's parameter default; never mutated)
    dataflow_min_records: int = 0,
):
    """KFP step: prepare the data into the `dataset` artifact (shards, stats.json, quarantine.jsonl).
    `data_fingerprint` (the fingerprint step's digest) makes the cache key follow the data; recorded in stats.json.
    On Dataflow the job writes the artifact's gs:// URI.

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
        runner: direct (Beam's direct runner in the step) or dataflow.
        dataflow_options: The Dataflow job's settings (components.lib.prep.dataflow.flags), compiled by the vertex target.
        dataflow_min_records: On Dataflow, fewer records are prepared in the step (a job takes minutes to start).
    """
    import json

    from components.prepare_data import prepare, stats_json

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
        runner=runner,
        dataflow_options=dataflow_options,
        dataflow_min_records=dataflow_min_records,
        dataflow_output_dir=dataset.uri,
    )
    with open(stats.path, "wb") as f:
        f.write(stats_json(result))
    dataset.metadata.update({k: result[k] for k in ("kind", "input_shape", "examples", "quarantined")})
    dataset.metadata["labels"] = result["labels"]
    if data_fingerprint:
        dataset.metadata["data_fingerprint"] = data_fingerprint
    print(json.dumps({s: result["splits"][s]["examples"] for s in result["splits"]}))
