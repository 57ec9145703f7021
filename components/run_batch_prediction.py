"""Self-hosted batch prediction with Vertex AI's input formats and output layout (DESIGN.md §3).

Inputs: local paths or gs:// URIs, globs, comma-separated; formats jsonl, csv, tf-record, tf-record-gzip, file-list
(tf-record records and file-list files reach the model as `{"b64": ...}`). Records become model instances as
Vertex's `InstanceConfig` says (`key_field`, `included_fields`, `excluded_fields`, `instance_type`; see
`instance_config`): CSV columns and JSON object fields are matched to the model's feature columns by name. Output:
`<prefix>/prediction-<model>-<timestamp>/prediction.results-0000K-of-0000N` and `prediction.errors_stats-...`, one
pair per input file. Every instance becomes exactly one results or errors line. Files are streamed and processed in
parallel, one batch per worker in memory. JSONL lines are parsed and converted in worker processes (see
`ParsePool`), so parsing runs beside the model instead of sharing its process's interpreter lock.
"""

import contextlib
import gc
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from kfp.dsl import Artifact, Output

from components.lib.batch.instance_formats import BIGQUERY, FILE_FORMATS, SELF_HOSTED_BIGQUERY
from components.lib.batch.instances import expand_inputs, input_size, instance_config
from components.lib.batch.outputs import vertex_output_directory
from components.lib.batch.parse_pool import ParsePool
from components.lib.batch.predictor import Job
from components.lib.batch.signatures import choose_signature, model_feature_names
from core import progress, storage
from serving import codec


@contextlib.contextmanager
def _collector_paused():
    """Pause the cyclic garbage collector for the run: parsing creates many short-lived acyclic objects (freed by
    reference counting), and every collection they trigger would rescan the loaded model's objects (pausing spares
    more than freezing them, `serving.repository.settle_heap`'s way)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_arguments(instances_format: str, batch_size: int, parallelism: int, **fields) -> None:
    if instances_format == BIGQUERY:
        raise ValueError(SELF_HOSTED_BIGQUERY.format(target="targets local and kubeflow"))
    if instances_format not in FILE_FORMATS:
        raise ValueError(f"unknown instances_format {instances_format!r}; allowed: {', '.join(FILE_FORMATS)}")
    instance_config(instances_format, **fields, feature_names=None)  # the options, before any file is read
    if batch_size < 1 or parallelism < 1:
        raise ValueError(f"batch_size and parallelism must be >= 1, got {batch_size} and {parallelism}")


def batch_predict(
    model_path: str,
    instances: str,
    instances_format: str,
    output_prefix: str,
    model_display_name: str,
    batch_size: int = 64,
    parallelism: int = 4,
    key_field: str = "",
    signature_name: str = "",
    included_fields=(),
    excluded_fields=(),
    instance_type: str = "",
    parse_processes: int | None = None,
) -> dict:
    """Predict every instance of `instances` with the SavedModel at `model_path` (local or gs://) into Vertex's
    layout under `output_prefix`; returns a summary (output_directory, counts, input files, throughput, the
    signature used). The field options make instances of records as `instance_config` says; the signature is
    `choose_signature`'s. `parse_processes`: processes that parse JSONL (None: half the CPUs this process may use,
    the model's TensorFlow threads the others; 0: none, parse in this one, TensorFlow's threads as they are)."""
    import tensorflow as tf

    start = time.perf_counter()
    fields = dict(
        key_field=key_field,
        included_fields=included_fields,
        excluded_fields=excluded_fields,
        instance_type=instance_type,
    )
    _check_arguments(instances_format, batch_size, parallelism, **fields)
    files = expand_inputs(instances)
    with storage.staged(model_path) as local_model, ParsePool.for_format(instances_format, parse_processes) as parse:
        parse.model_threads()
        config = instance_config(instances_format, **fields, feature_names=model_feature_names(local_model))
        loaded = tf.saved_model.load(local_model)
        inputs = {name: codec.signature_inputs(fn) for name, fn in loaded.signatures.items()}
        try:
            signature_name = choose_signature(
                {name: {k: i.dtype == object for k, i in spec.items()} for name, spec in inputs.items()},
                signature_name,
                instances_format,
            )
        except ValueError as e:
            raise ValueError(f"{e} (model {model_path})") from None
        if signature_name not in loaded.signatures:
            raise ValueError(
                f"the model at {model_path} has no signature {signature_name!r}; available: {sorted(loaded.signatures)}"
            )
        print(f"signature {signature_name}: inputs {sorted(inputs[signature_name])}", flush=True)
        signature = loaded.signatures[signature_name]
        job = Job(
            signature,
            codec.signature_inputs(signature),
            instances_format,
            config,
            batch_size,
            vertex_output_directory(output_prefix, model_display_name),
            len(files),
            parse_pool=parse.active,
        )
        sizes = [input_size(f) for f in files]
        input_bytes = sum(sizes) or 1
        counter = progress.Counter(
            "batch",
            "instances",
            lambda c: (
                f"{c['done']} instances, {c['errors']} errors, {c['files']}/{len(files)} files, "
                f"{c['bytes'] / input_bytes:.0%} of the input read"
            ),
            fraction=lambda c: c["bytes"] / input_bytes,
        )
        with _collector_paused(), ThreadPoolExecutor(min(parallelism, len(files))) as pool:
            counts = list(pool.map(job.run_file, range(len(files)), files, [counter] * len(files), sizes))
        counter.finish()
    seconds = time.perf_counter() - start
    succeeded, failed = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return {
        "output_directory": job.output_directory,
        "instances": succeeded + failed,
        "succeeded": succeeded,
        "failed": failed,
        "files": files,
        "seconds": round(seconds, 3),
        "instances_per_second": round((succeeded + failed) / seconds, 1),
        "signature_name": signature_name,
    }


def resolve_model(model_repository: str, model_name: str, model: str) -> str:
    """The SavedModel to use: the repository's champion (`model` empty), one of its versions (`model` all
    digits), or `model` itself (a path or URI)."""
    from components.lib.deploy import model_repository as repository

    if model and not model.isdigit():
        return model
    if not model_repository:
        raise ValueError("no model repository configured: set model_repository, or give a model path")
    if not model:
        version = repository.champion(model_repository, model_name)
        if version is None:
            raise FileNotFoundError(f"the model repository {model_repository} has no versions of {model_name!r}")
        return version.path
    available = repository.versions(model_repository, model_name)
    if int(model) not in available:
        raise FileNotFoundError(f"no version {model} of {model_name!r} in {model_repository}; versions: {available}")
    return repository.read_version(model_repository, model_name, int(model)).path


def run_batch_prediction(
    model_repository: str,
    model_name: str,
    model: str,
    instances: str,
    instances_format: str,
    batch_size: int,
    key_field: str,
    included_fields: list,
    excluded_fields: list,
    instance_type: str,
    max_error_fraction: float,
    signature_name: str,
    predictions: Output[Artifact],
) -> NamedTuple("Outputs", [("output_directory", str), ("succeeded", int), ("failed", int)]):
    """KFP step (self-hosted): batch prediction into Vertex's layout inside the `predictions` artifact folder; fails
    (with the counts) when more than `max_error_fraction` of the instances failed.

    Args:
        model_repository: The versioned model repository.
        model_name: The model's name in the repository.
        model: The version: a number or a SavedModel path (empty: the champion, the newest version).
        instances: The instances: comma-separated paths or globs.
        instances_format: Format of the instances: jsonl, csv, tf-record, tf-record-gzip or file-list.
        batch_size: Instances per prediction call.
        key_field: Field identifying an instance: never sent to the model; the output carries it as `key`.
        included_fields: Fields sent to the model, in this order (empty: the model's feature columns).
        excluded_fields: Fields not sent to the model.
        instance_type: JSONL objects sent as objects or as arrays (empty: as given).
        max_error_fraction: The step fails when a larger share of the instances failed.
        signature_name: The signature to call (empty: chosen from the model and the instances).
    """
    from core.fast_exit import skip_exit_collection

    skip_exit_collection()
    import os
    from collections import namedtuple

    from components.lib.batch.budget import check_error_budget
    from components.run_batch_prediction import batch_predict, resolve_model
    from core import names

    names.model_name(model_name)  # run parameters can be set without the CLI (the KFP UI, a recurring run)
    if model_repository:
        names.location(model_repository, "model_repository")
    names.locations(instances, "instances")
    model_path = resolve_model(model_repository, model_name, model)
    os.makedirs(predictions.path, exist_ok=True)
    summary = batch_predict(
        model_path,
        instances,
        instances_format,
        predictions.path,
        model_name,
        batch_size=batch_size,
        key_field=key_field,
        included_fields=included_fields,
        excluded_fields=excluded_fields,
        instance_type=instance_type,
        signature_name=signature_name,
    )
    output_uri = f"{predictions.uri.rstrip('/')}/{os.path.basename(summary['output_directory'])}"
    predictions.metadata.update(summary, output_directory=output_uri, model=model_path)
    print(f"{summary['succeeded']} predictions, {summary['failed']} errors in {output_uri}")
    print(check_error_budget(summary["succeeded"], summary["failed"], max_error_fraction, f" (in {output_uri})"))
    Outputs = namedtuple("Outputs", ["output_directory", "succeeded", "failed"])
    return Outputs(output_uri, summary["succeeded"], summary["failed"])
