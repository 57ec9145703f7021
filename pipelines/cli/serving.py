"""`serve` (the model server's own command, `serving.command`) and `stop-serving`: the local TF-Serving-compatible
server."""

from __future__ import annotations

import click

from components.lib.storage import local_path
from pipelines.cli import _fail, cli
from serving.command import serve

cli.add_command(serve)


@cli.command("stop-serving")
@click.option("--model-base-path", required=True)
@click.option("--model-name", required=True)
def stop_serving(model_base_path, model_name):
    """Stop the local server that a pipeline run started for this repository and model."""
    from components.deploy_model import stop_server

    if not stop_server(local_path(model_base_path), model_name):
        _fail(f"no server is running for {model_name} in {model_base_path}")
    click.echo(f"stopped the server for {model_name} in {model_base_path}")
