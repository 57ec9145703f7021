"""`serve` (the model server's own command, `serving.command`) and `stop-serving`: the local TF-Serving-compatible
server."""

from __future__ import annotations

import click

from core.storage import local_path
from pipelines.cli import _fail, cli
from serving.command import serve

cli.add_command(serve)


@cli.command("stop-serving")
@click.option("--model-base-path", required=True, help="the repository whose server pipeline runs started")
@click.option(
    "--model-name",
    default="",
    help="stop serving this model only: the server unloads it and keeps serving the others (it stops with its last)",
)
def stop_serving(model_base_path, model_name):
    """Stop the local server that pipeline runs started for this repository, or only its serving of one model."""
    from serving.lifecycle import stop_server

    try:
        done = stop_server(local_path(model_base_path), model_name)
    except (ValueError, TimeoutError) as e:
        _fail(str(e))
    if not done:
        _fail(f"no server is running for {model_base_path}")
    click.echo(done)
