"""`python -m pipelines`: run the training pipeline locally, compile it for Vertex AI or Kubeflow."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click

from pipelines.config import ConfigError, load_config


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
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="run output directory [runs/<timestamp>]")
@click.option("--config", "config_file", type=click.Path(), help="YAML config (parameters/platform sections)")
@click.option("-v", "--verbose", is_flag=True, help="stream every step's full log")
def run(out_dir, config_file, verbose, **options):
    """Run the whole training pipeline locally (kfp.local, no cloud, no Docker) and print a summary."""
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
    summary = report.collect(run_root, steps, PIPELINE_NAME, params, time.time() - started)
    report.write(summary, out)
    _print_summary(summary)
    if summary["status"] != "SUCCEEDED":
        _fail(summary["error"] or f"the pipeline failed; see the step logs in {out / 'logs'}")


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
    if s["model"]["published_version"]:
        click.echo(f"  published version {s['model']['published_version']}: {s['model']['published_path']}")
    click.echo(f"  report: {s['report']}")


@cli.command("compile")
@click.option("--target", type=click.Choice(["vertex", "kubeflow"]), required=True)
@click.option("--output", type=click.Path(dir_okay=False), required=True, help="pipeline YAML to write")
@click.option("--config", "config_file", type=click.Path(), help="YAML config (parameters/platform sections)")
def compile_(target, output, config_file):
    """Compile the training pipeline for Vertex AI Pipelines or Kubeflow Pipelines."""
    from kfp import compiler

    from pipelines.training import build_pipeline

    try:
        config = load_config(config_file)
    except ConfigError as e:
        _fail(str(e))
    if not output.endswith((".yaml", ".yml", ".json")):
        _fail(f"--output must end in .yaml or .json, got {output}")
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build_pipeline(target, config.platform, config.study), output,
                                pipeline_parameters=config.parameters.model_dump())
    click.echo(f"compiled {target} pipeline to {output}")


def main() -> None:
    try:
        cli(prog_name="python -m pipelines")
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    sys.exit(main())
