"""`render`: the Kubernetes objects of the kubeflow target, one YAML file each (pipelines/render.py)."""

from __future__ import annotations

import click

from pipelines import api
from pipelines.cli import _load, cli, config_options


@cli.command()
@click.option("--target", type=click.Choice(["kubeflow"]), required=True)
@config_options
@click.option("--out", required=True, type=click.Path(file_okay=False), metavar="DIR", help="folder of the YAML files")
def render(target, config_file, profile, sets, out):
    """Write every Kubernetes object the kubeflow steps would create for the config (training job and runtime,
    Katib Experiment, InferenceService) and the namespace's claim, permissions Job and RBAC, one YAML file per
    object, run-time values as placeholders: review them, or check them with
    `kubectl apply --dry-run=server -f DIR`."""
    config = _load(config_file, profile, sets)
    for path in api.render(config, out, target, source=config_file or "the default config"):
        click.echo(path)
