"""`run` (the local target) and `compile`."""

from __future__ import annotations

import click

from components.lib.batch.instance_formats import FORMATS
from pipelines import api
from pipelines.cli import _fail, _load, cli, config_options
from pipelines.config import PIPELINES


@cli.command()
@click.option("--data-source", help="builtin:digits (default), builtin:iris, an image folder or a CSV; local or gs://")
@click.option("--workers", type=int, help="training worker processes (default 2)")
@click.option("--epochs", type=int, help="training epochs")
@click.option("--batch-size", type=int, help="per-replica batch size")
@click.option("--learning-rate", type=float)
@click.option("--label-column", help="label column of a CSV source")
@click.option(
    "--image-size",
    type=int,
    help="prepared image size (0: the data's own: 8 for digits, an image folder's smallest image side up to 180)",
)
@click.option("--accuracy-threshold", type=float, help="test accuracy the gate requires")
@click.option("--tune/--no-tune", default=None, help="run the hyperparameter study before training [tune]")
@click.option("--model-repository", type=str, help="versioned model repository [runs/model_repository]")
@click.option("--model-name", help="model name in the repository")
@click.option("--deploy/--no-deploy", default=None, help="serve the published version (local server) [deploy]")
@click.option("--rest-port", type=int, help="local server's REST port [8501] (0: any free port)")
@click.option("--grpc-port", type=int, help="local server's gRPC port [8500] (0: any free port)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="run output directory [runs/<timestamp>]")
@config_options
@click.option("-v", "--verbose", is_flag=True, help="stream every step's full log")
@click.option("-q", "--quiet", is_flag=True, help="show only the summary (no steps, no progress)")
@click.option(
    "--pipeline", type=click.Choice(PIPELINES), default="training", show_default=True, help="which pipeline to run"
)
@click.option("--instances", help="batch_prediction: instances, comma-separated paths or globs (required)")
@click.option("--instances-format", type=click.Choice(FORMATS), help="batch_prediction: [jsonl]")
@click.option("--model", help="batch_prediction: repository version number or SavedModel path [the champion]")
@click.option("--key-field", help="batch_prediction: field identifying an instance (output `key`, not sent)")
@click.option(
    "--included-fields",
    metavar="F1,F2,...",
    help="batch_prediction: the fields sent to the model, in this order [the model's feature columns]",
)
@click.option(
    "--excluded-fields",
    metavar="F1,F2,...",
    help="batch_prediction: fields not sent to the model (instead of --included-fields)",
)
@click.option(
    "--instance-type",
    type=click.Choice(["object", "array"]),
    help="batch_prediction: send JSONL objects as objects or as arrays [as given]",
)
@click.option(
    "--max-error-fraction",
    type=float,
    help="batch_prediction: the run fails when a larger share of its instances failed [0.1]",
)
@click.option(
    "--signature-name",
    help="batch_prediction: the model signature to call [serving_default; serving_image_bytes for a "
    "file list of images]",
)
def run(out_dir, config_file, profile, sets, verbose, quiet, pipeline, instances, instances_format, model, **options):
    """Run the whole training pipeline (or, with --pipeline batch_prediction, batch predictions) locally
    (kfp.local, no cloud, no Docker) and print a summary. Each step shows a line as it starts and ends, its progress
    under the running one (on a terminal one line updated in place)."""
    if verbose and quiet:
        _fail("-v/--verbose and -q/--quiet: choose one")
    batch_options = {k: options.pop(k) for k in _BATCH_ONLY}
    if pipeline == "batch_prediction":
        given = [f"--{k.replace('_', '-')}" for k in _TRAINING_ONLY if options.get(k) is not None]
        if given:
            _fail(f"{', '.join(given)}: not an option of --pipeline batch_prediction")
        if not instances:
            _fail("--instances is required with --pipeline batch_prediction")
        given_options = {**options, **batch_options}
        overrides = {
            "instances": instances,
            "instances_format": instances_format,
            "model": model,
            **{k: given_options.get(k) for k in ("model_repository", "model_name", "batch_size", *_BATCH_ONLY)},
        }
        config = _load(config_file, profile, sets, batch_overrides=overrides)
    else:
        given = [
            name
            for name, value in (
                ("--instances", instances),
                ("--instances-format", instances_format),
                ("--model", model),
                *((f"--{k.replace('_', '-')}", v) for k, v in batch_options.items()),
            )
            if value is not None
        ]
        if given:
            _fail(f"{', '.join(given)}: only with --pipeline batch_prediction")
        config = _load(config_file, profile, sets, options)
    log = (lambda line: None) if quiet else click.echo
    _finish(api.run_locally(config, pipeline=pipeline, out=out_dir, progress=not quiet, verbose=verbose, log=log))


def _finish(summary: api.RunSummary) -> None:
    _print_summary(summary.details)
    if not summary.succeeded:
        _fail(summary.error or f"the pipeline failed; see the step logs in {summary.out / 'logs'}")


_BATCH_ONLY = (
    "key_field",
    "included_fields",
    "excluded_fields",
    "instance_type",
    "max_error_fraction",
    "signature_name",
)
_TRAINING_ONLY = (
    "data_source",
    "workers",
    "epochs",
    "learning_rate",
    "label_column",
    "image_size",
    "accuracy_threshold",
    "tune",
    "deploy",
    "rest_port",
    "grpc_port",
)


def _print_summary(s: dict) -> None:
    from core.units import assignments

    click.echo(f"\n{s['pipeline']}: {s['status']} in {s['seconds']:.1f}s")
    for step in s["steps"]:
        click.echo(f"  {step['name']:<22} {step['status']:<10} {step['seconds']:>7.1f}s")
    if s["dataset"]:
        d = s["dataset"]
        splits = ", ".join(f"{name} {info['examples']}" for name, info in d["splits"].items())
        click.echo(f"  data: {d['examples']} examples ({splits}), {d['quarantined']} quarantined")
        if d.get("image_size"):
            click.echo(f"  image size {d['image_size']['reason']}")
    m = s["metrics"]  # a step served from the cache wrote nothing in this run: its figures are unknown here
    accuracies = [f"{k.replace('_', ' ')} {m[k]:.4f}" for k in ("val_accuracy", "test_accuracy") if m[k] is not None]
    if accuracies:
        click.echo(f"  {', '.join(accuracies)}")
    if s["tuning"] and s["tuning"]["enabled"] and s["tuning"]["best"]:
        best = s["tuning"]["best"]
        click.echo(
            f"  tuning: {len(s['tuning']['trials'])} trials, best {s['tuning']['metric_id']} "
            f"{best['metric']:.4f} with {assignments(best['parameters'])}"
        )
    if s["training"] and s["training"]["hyperparameters"]:
        click.echo(f"  trained with {assignments(s['training']['hyperparameters'])}")
    if s["training"] and s["training"].get("worker_devices"):
        click.echo(f"  devices: {', '.join(f'{n} {d}' for n, d in s['training']['worker_devices'].items())}")
    if (drift := s.get("drift")) and drift["past"]:
        click.echo(f"  data drift past the limits ({drift['limits']['drift_action']}): {'; '.join(drift['past'])}")
    if s["gate"]:
        click.echo(f"  gate: {'BLESSED' if s['gate']['blessed'] else 'NOT BLESSED'}: {s['gate']['reason']}")
    if s["tflite"]:
        click.echo(f"  tflite: {'PUBLISHED' if s['tflite']['published'] else 'NOT PUBLISHED'}: {s['tflite']['reason']}")
    if s["registry"]:
        click.echo(
            f"  published {s['registry']['model_name']} version {s['registry']['version']}: {s['registry']['path']}"
        )
    if e := s["endpoint"]:
        click.echo(
            f"  serving version {e['served_version']}: REST {e['rest_url']}/v1/models/{e['model_name']}:predict"
            + (f", gRPC {e['grpc_target']}" if e["grpc_target"] else "")
        )
        if e["stop"]:
            click.echo(f"  the server keeps running after this run; stop it with: {e['stop']} (log: {e['log']})")
    if b := s["batch_prediction"]:
        click.echo(
            f"  batch prediction: {b['succeeded']} ok, {b['failed']} failed of {b['instances']} instances "
            f"→ {b['output_directory']}"
        )
    click.echo(f"  report: {s['report']}")


@cli.command("compile")
@click.option("--target", type=click.Choice(["vertex", "kubeflow"]), required=True)
@click.option("--output", type=click.Path(dir_okay=False), required=True, help="pipeline YAML to write")
@config_options
@click.option(
    "--pipeline", type=click.Choice(PIPELINES), default="training", show_default=True, help="which pipeline to compile"
)
def compile_(target, output, config_file, profile, sets, pipeline):
    """Compile the training (or batch prediction) pipeline for Vertex AI Pipelines or Kubeflow Pipelines (refused
    while the images, identity or inputs it bakes in still hold example values). The images stay as given; for
    Vertex, those given by tag are named in a warning (submit and schedule pin them by digest)."""
    compiled = api.compile(target, _load(config_file, profile, sets), output, pipeline)
    click.echo(f"compiled {target} {pipeline} pipeline to {output}")
    if compiled.warning:
        click.echo(compiled.warning, err=True)
