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
@click.option("--ca-file", default="", help="a TLS server: the CA file of its certificate (--model-name waits on it)")
@click.option(
    "--client-cert-file", default="", help="a server with client_verify: PEM file of a client certificate and its key"
)
def stop_serving(model_base_path, model_name, ca_file, client_cert_file):
    """Stop the local server that pipeline runs started for this repository, or only its serving of one model."""
    from serving.lifecycle import stop_server
    from serving.tls import ClientTls

    try:
        done = stop_server(local_path(model_base_path), model_name, ClientTls(ca_file, client_cert_file))
    except (ValueError, TimeoutError) as e:
        _fail(str(e))
    if not done:
        _fail(f"no server is running for {model_base_path}")
    click.echo(done)
