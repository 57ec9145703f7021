"""`python -m pipelines`: run the training pipeline locally, compile it for Vertex AI or Kubeflow."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click

from pipelines.config import ConfigError, load_config


_PIPELINES = ["training", "batch_prediction"]
_INSTANCES_FORMATS = ["jsonl", "csv", "tf-record", "tf-record-gzip", "file-list"]


def _fail(message: str) -> None:
    raise click.ClickException(message)


def _source_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _local_path(value: str) -> str:
    """Absolute path for local sources and repositories (steps run as subprocesses); URIs pass unchanged."""
    if not value or value.startswith(("gs://", "builtin:")):
        return value
    return str(Path(value.removeprefix("file://")).expanduser().resolve())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """TensorFlow training pipeline for Vertex AI Pipelines, Kubeflow and your own machine."""


@cli.command()
@click.option("--data-source", help="builtin:digits (default), builtin:iris, an image folder or a CSV; local or gs://")
@click.option("--workers", type=int, help="training worker processes (default 2)")
@click.option("--epochs", type=int, help="training epochs")
@click.option("--batch-size", type=int, help="per-replica batch size")
@click.option("--learning-rate", type=float)
@click.option("--label-column", help="label column of a CSV source")
@click.option("--image-size", type=int, help="prepared image size (0: 8 for digits, 180 for folders)")
@click.option("--accuracy-threshold", type=float, help="test accuracy the gate requires")
@click.option("--tune/--no-tune", default=None, help="run the hyperparameter study before training [tune]")
@click.option("--model-repository", type=str, help="versioned model repository [runs/model_repository]")
@click.option("--model-name", help="model name in the repository")
@click.option("--deploy/--no-deploy", default=None, help="serve the published version (local server) [deploy]")
@click.option("--rest-port", type=int, help="local server's REST port [8501] (0: any free port)")
@click.option("--grpc-port", type=int, help="local server's gRPC port [8500] (0: any free port)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="run output directory [runs/<timestamp>]")
@click.option("--config", "config_file", type=click.Path(), help="YAML config (parameters/platform sections)")
@click.option("-v", "--verbose", is_flag=True, help="stream every step's full log")
@click.option("--pipeline", type=click.Choice(_PIPELINES), default="training", show_default=True,
              help="which pipeline to run")
@click.option("--instances", help="batch_prediction: instances, comma-separated paths or globs (required)")
@click.option("--instances-format", type=click.Choice(_INSTANCES_FORMATS), help="batch_prediction: [jsonl]")
@click.option("--model", help="batch_prediction: repository version number or SavedModel path [the champion]")
def run(out_dir, config_file, verbose, pipeline, instances, instances_format, model, **options):
    """Run the whole training pipeline (or, with --pipeline batch_prediction, batch predictions) locally
    (kfp.local, no cloud, no Docker) and print a summary."""
    if pipeline == "batch_prediction":
        return _run_batch(out_dir, config_file, verbose, instances, instances_format, model, options)
    given = [name for name, value in (("--instances", instances), ("--instances-format", instances_format),
                                      ("--model", model)) if value]
    if given:
        _fail(f"{', '.join(given)}: only with --pipeline batch_prediction")
    try:
        config = load_config(config_file, options)
    except ConfigError as e:
        _fail(str(e))
    params = config.parameters.model_dump()
    params["data_source"] = _local_path(params["data_source"])
    if not params["data_source"].startswith(("gs://", "builtin:")) and not os.path.exists(params["data_source"]):
        _fail(f"data source not found: {params['data_source']}")
    params["model_repository"] = _local_path(params["model_repository"] or "runs/model_repository")
    params["source_commit"] = params["source_commit"] or _source_commit()
    out = Path(out_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipelines import report
    from pipelines.local_run import run_local
    from pipelines.training import PIPELINE_NAME, build_pipeline

    click.echo(f"Running {PIPELINE_NAME} locally on {params['data_source']} with {params['workers']} worker(s); "
               f"output in {out}")
    started = time.time()
    steps, run_root = run_local(build_pipeline("local", config.platform, config.study), params, out, verbose)
    _finish(report.collect(run_root, steps, PIPELINE_NAME, params, time.time() - started), out)


def _finish(summary: dict, out: Path) -> None:
    from pipelines import report

    report.write(summary, out)
    _print_summary(summary)
    if summary["status"] != "SUCCEEDED":
        _fail(summary["error"] or f"the pipeline failed; see the step logs in {out / 'logs'}")


def _local_instances(instances: str) -> str:
    """Comma-separated instances with local paths made absolute; each must exist (a glob: match something)."""
    import glob

    items = []
    for item in (i.strip() for i in instances.split(",")):
        if not item:
            continue
        if not item.startswith("gs://"):
            item = _local_path(item)
            if any(c in item for c in "*?[") and not glob.glob(item):
                _fail(f"no instances match {item}")
            if not any(c in item for c in "*?[") and not os.path.exists(item):
                _fail(f"instances not found: {item}")
        items.append(item)
    if not items:
        _fail("--instances names no files")
    return ",".join(items)


_TRAINING_ONLY = ("data_source", "workers", "epochs", "learning_rate", "label_column", "image_size",
                  "accuracy_threshold", "tune", "deploy", "rest_port", "grpc_port")


def _run_batch(out_dir, config_file, verbose, instances, instances_format, model, options) -> None:
    """`run --pipeline batch_prediction`: predictions for local instances from a model repository version."""
    given = [f"--{k.replace('_', '-')}" for k in _TRAINING_ONLY if options.get(k) is not None]
    if given:
        _fail(f"{', '.join(given)}: not an option of --pipeline batch_prediction")
    if not instances:
        _fail("--instances is required with --pipeline batch_prediction")
    overrides = {"instances": instances, "instances_format": instances_format, "model": model,
                 **{k: options.get(k) for k in ("model_repository", "model_name", "batch_size")}}
    try:
        config = load_config(config_file, batch_overrides=overrides)
    except ConfigError as e:
        _fail(str(e))
    params = config.batch.pipeline_arguments()
    params["instances"] = _local_instances(params["instances"])
    params["model_repository"] = _local_path(params["model_repository"] or "runs/model_repository")
    if params["model"] and not params["model"].isdigit() and not params["model"].startswith("gs://"):
        if os.path.exists(params["model"]) or os.sep in params["model"]:
            params["model"] = _local_path(params["model"])
            if not os.path.exists(params["model"]):
                _fail(f"model not found: {params['model']}")
    out = Path(out_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipelines import report
    from pipelines.batch_prediction import PIPELINE_NAME, build_batch_pipeline
    from pipelines.local_run import run_local

    click.echo(f"Running {PIPELINE_NAME} locally on {params['instances']} ({params['instances_format']}) with "
               f"{params['model_name']} {params['model'] or 'champion'} from {params['model_repository']}; "
               f"output in {out}")
    started = time.time()
    steps, run_root = run_local(build_batch_pipeline("local", config.platform), params, out, verbose)
    _finish(report.collect(run_root, steps, PIPELINE_NAME, params, time.time() - started), out)


def _print_summary(s: dict) -> None:
    click.echo(f"\n{s['pipeline']}: {s['status']} in {s['seconds']:.1f}s")
    for step in s["steps"]:
        click.echo(f"  {step['name']:<22} {step['status']:<10} {step['seconds']:>7.1f}s")
    if s["dataset"]:
        d = s["dataset"]
        splits = ", ".join(f"{name} {info['examples']}" for name, info in d["splits"].items())
        click.echo(f"  data: {d['examples']} examples ({splits}), {d['quarantined']} quarantined")
    m = s["metrics"]
    if m["test_accuracy"] is not None:
        click.echo(f"  val accuracy {m['val_accuracy']:.4f}, test accuracy {m['test_accuracy']:.4f}")
    if s["tuning"] and s["tuning"]["enabled"] and s["tuning"]["best"]:
        best = s["tuning"]["best"]
        click.echo(f"  tuning: {len(s['tuning']['trials'])} trials, best {s['tuning']['metric_id']} "
                   f"{best['metric']:.4f} with {best['parameters']}")
    if s["gate"]:
        click.echo(f"  gate: {'BLESSED' if s['gate']['blessed'] else 'NOT BLESSED'}: {s['gate']['reason']}")
    if s["tflite"]:
        click.echo(f"  tflite: {'PUBLISHED' if s['tflite']['published'] else 'NOT PUBLISHED'}: {s['tflite']['reason']}")
    if s["registry"]:
        click.echo(f"  published {s['registry']['model_name']} version {s['registry']['version']}: "
                   f"{s['registry']['path']}")
    if e := s["endpoint"]:
        click.echo(f"  serving version {e['served_version']}: REST {e['rest_url']}/v1/models/{e['model_name']}:predict"
                   + (f", gRPC {e['grpc_target']}" if e["grpc_target"] else ""))
        if e["stop"]:
            click.echo(f"  the server keeps running after this run; stop it with: {e['stop']} (log: {e['log']})")
    if b := s["batch_prediction"]:
        click.echo(f"  batch prediction: {b['succeeded']} ok, {b['failed']} failed of {b['instances']} instances "
                   f"→ {b['output_directory']}")
    click.echo(f"  report: {s['report']}")


@cli.command("compile")
@click.option("--target", type=click.Choice(["vertex", "kubeflow"]), required=True)
@click.option("--output", type=click.Path(dir_okay=False), required=True, help="pipeline YAML to write")
@click.option("--config", "config_file", type=click.Path(), help="YAML config (parameters/platform sections)")
@click.option("--pipeline", type=click.Choice(_PIPELINES), default="training", show_default=True,
              help="which pipeline to compile")
def compile_(target, output, config_file, pipeline):
    """Compile the training (or batch prediction) pipeline for Vertex AI Pipelines or Kubeflow Pipelines."""
    from kfp import compiler

    from pipelines.batch_prediction import build_batch_pipeline
    from pipelines.training import build_pipeline

    try:
        config = load_config(config_file)
    except ConfigError as e:
        _fail(str(e))
    if not output.endswith((".yaml", ".yml", ".json")):
        _fail(f"--output must end in .yaml or .json, got {output}")
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    if pipeline == "batch_prediction":
        func, defaults = build_batch_pipeline(target, config.platform), config.batch.pipeline_arguments()
    else:
        func, defaults = build_pipeline(target, config.platform, config.study), config.parameters.model_dump()
    compiler.Compiler().compile(func, output, pipeline_parameters=defaults)
    click.echo(f"compiled {target} {pipeline} pipeline to {output}")


@cli.command()
@click.option("--model-base-path", required=True, help="model repository: serves <base>/<model-name>/<version>/")
@click.option("--model-name", required=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (0.0.0.0 in a container)")
@click.option("--rest-port", type=int, default=lambda: int(os.environ.get("AIP_HTTP_PORT", 8501)),
              show_default="8501 or $AIP_HTTP_PORT", help="0: any free port")
@click.option("--grpc-port", type=int, default=8500, show_default=True, help="0: any free port, -1: no gRPC")
@click.option("--poll-seconds", type=float, default=1.0, show_default=True, help="file-system poll period")
@click.option("--version-policy", type=click.Choice(["latest", "all", "specific"]), default="latest",
              show_default=True)
@click.option("--latest", "latest_versions", type=click.IntRange(min=1), default=1, show_default=True,
              help="versions served by the latest policy")
@click.option("--versions", default="", help="comma-separated versions of the specific policy")
@click.option("--label", "labels", multiple=True, metavar="LABEL=VERSION", help="version label (repeatable)")
@click.option("--enable-batching", is_flag=True, help="batch concurrent requests")
@click.option("--max-batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--batch-timeout-ms", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--num-batch-threads", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-request-bytes", type=click.IntRange(min=1), default=1_500_000, show_default=True)
@click.option("--health-route", default=lambda: os.environ.get("AIP_HEALTH_ROUTE", "/health"),
              show_default="/health or $AIP_HEALTH_ROUTE", help="Vertex-style health check: 200 once loaded")
@click.option("--predict-route", default=lambda: os.environ.get("AIP_PREDICT_ROUTE", "/predict"),
              show_default="/predict or $AIP_PREDICT_ROUTE", help="Vertex-style predict route")
@click.option("--ready-file", default="", help="write the pid and addresses here (JSON) once serving")
def serve(model_base_path, model_name, latest_versions, versions, labels, enable_batching, max_batch_size,
          batch_timeout_ms, num_batch_threads, poll_seconds, version_policy, **options):
    """Serve the model repository with TF Serving's REST and gRPC APIs (a stand-in for tensorflow/serving)."""
    import asyncio
    import logging

    from pipelines.serving.batching import BatchingOptions
    from pipelines.serving.models import ModelManager, Policy
    from pipelines.serving.server import ModelServer, ServerOptions

    try:
        specific = tuple(int(v) for v in versions.split(",") if v.strip())
        label_map = {k: int(v) for k, v in (item.split("=", 1) for item in labels)}
    except ValueError:
        _fail("--versions takes integers like 1,3 and --label takes LABEL=VERSION like stable=3")
    if version_policy == "specific" and not specific:
        _fail("--version-policy specific needs --versions")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    manager = ModelManager(
        _local_path(model_base_path), model_name, Policy(version_policy, latest_versions, specific), label_map,
        poll_seconds, BatchingOptions(max_batch_size, batch_timeout_ms / 1000, num_batch_threads)
        if enable_batching else None)
    options["deployed_model_id"] = os.environ.get("AIP_DEPLOYED_MODEL_ID", "")
    asyncio.run(ModelServer(manager, ServerOptions(**options)).serve())


@cli.command("stop-serving")
@click.option("--model-base-path", required=True)
@click.option("--model-name", required=True)
def stop_serving(model_base_path, model_name):
    """Stop the local server that a pipeline run started for this repository and model."""
    from components.deploy_model import stop_server

    if not stop_server(_local_path(model_base_path), model_name):
        _fail(f"no server is running for {model_name} in {model_base_path}")
    click.echo(f"stopped the server for {model_name} in {model_base_path}")


def main() -> None:
    try:
        cli(prog_name="python -m pipelines")
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    sys.exit(main())
