"""`python -m serving` (also the `serve` verb of `python -m pipelines`): serve the models of a repository, or of a TF
Serving model config file."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from core.storage import local_path
from serving.ports import PortError, check_ports
from serving.tls import TlsConfigError, read_ssl_config

if TYPE_CHECKING:
    from serving.repository import ModelConfigFile


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--model-base-path",
    default="",
    help="model repository: serves <base>/<model-name>/<version>/ for every model folder (found by polling)",
)
@click.option("--model-name", "model_names", multiple=True, help="serve only this model of the repository (repeatable)")
@click.option(
    "--model-config-file",
    default="",
    help="TF Serving's ModelServerConfig text file (each model's base_path, version policy, labels; re-read at "
    "every poll) instead of --model-base-path",
)
@click.option("--skip-models-file", default="", help="model names not to serve, one a line (re-read at every poll)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (0.0.0.0 in a container)")
@click.option(
    "--rest-port",
    type=click.IntRange(0, 65535),
    default=lambda: int(os.environ.get("AIP_HTTP_PORT", 8501)),
    show_default="8501 or $AIP_HTTP_PORT",
    help="0: any free port",
)
@click.option(
    "--grpc-port", type=click.IntRange(-1, 65535), default=8500, show_default=True, help="0: any free port, -1: no gRPC"
)
@click.option("--poll-seconds", type=float, default=1.0, show_default=True, help="file-system poll period")
@click.option("--version-policy", type=click.Choice(["latest", "all", "specific"]), default="latest", show_default=True)
@click.option(
    "--aspired-version-policy",
    "transition",
    type=click.Choice(["availability-preserving", "resource-preserving"]),
    default="availability-preserving",
    show_default=True,
    help="how a version replaces another (TF Serving's): load the new one, then unload the old; or unload first "
    "(the model is unavailable in between), for a model that does not fit in memory twice",
)
@click.option(
    "--latest",
    "latest_versions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="versions served by the latest policy",
)
@click.option("--versions", default="", help="comma-separated versions of the specific policy")
@click.option("--label", "labels", multiple=True, metavar="LABEL=VERSION", help="version label (repeatable)")
@click.option("--enable-batching", is_flag=True, help="batch concurrent requests")
@click.option("--max-batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--batch-timeout-ms", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--num-batch-threads", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--request-threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="threads that run the model calls of overlapping REST requests (0: one per usable CPU above 2 CPUs, else "
    "none; 1: every call on the event loop)",
)
@click.option(
    "--grpc-max-threads",
    "grpc_threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="gRPC worker threads (0: two per usable CPU, and at least --max-batch-size with --enable-batching)",
)
@click.option("--max-request-bytes", type=click.IntRange(min=1), default=1_500_000, show_default=True)
@click.option(
    "--health-route",
    default=lambda: os.environ.get("AIP_HEALTH_ROUTE", "/health"),
    show_default="/health or $AIP_HEALTH_ROUTE",
    help="Vertex-style health check: 200 once loaded",
)
@click.option(
    "--predict-route",
    default=lambda: os.environ.get("AIP_PREDICT_ROUTE", "/predict"),
    show_default="/predict or $AIP_PREDICT_ROUTE",
    help="Vertex-style predict route",
)
@click.option(
    "--ready-file", default="", help="write the pid, addresses and aspired-version policy here (JSON) once serving"
)
@click.option(
    "--ssl-config-file",
    default="",
    help="TF Serving's SSLConfig text file (PEM text of server_key, server_cert, custom_ca; client_verify): gRPC and "
    "REST over TLS, mutual TLS with client_verify",
)
@click.option(
    "--tensorflow-intra-op-parallelism",
    "intra_op",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="threads of one TensorFlow op (0: TensorFlow's default, one per CPU)",
)
@click.option(
    "--tensorflow-inter-op-parallelism",
    "inter_op",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="TensorFlow ops run at once (0: TensorFlow's default)",
)
@click.option(
    "--tensorflow-spin-wait/--no-tensorflow-spin-wait",
    "spin_wait",
    default=None,
    help="whether TensorFlow's idle pool threads spin before sleeping  [default: only above 2 usable CPUs]",
)
@click.pass_context
def serve(
    ctx,
    model_base_path,
    model_names,
    model_config_file,
    skip_models_file,
    latest_versions,
    versions,
    labels,
    enable_batching,
    max_batch_size,
    batch_timeout_ms,
    num_batch_threads,
    poll_seconds,
    version_policy,
    intra_op,
    inter_op,
    spin_wait,
    ssl_config_file,
    transition,
    **options,
):
    """Serve a model repository's models with TF Serving's REST and gRPC APIs (a stand-in for tensorflow/serving):
    every model folder, or the --model-name ones, or the models of --model-config-file."""
    if not model_base_path and not model_config_file:
        raise click.ClickException("give the repository to serve (--model-base-path) or a --model-config-file")
    per_model = ("model_base_path", "model_names", "version_policy", "latest_versions", "versions", "labels")
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name in per_model and ctx.get_parameter_source(p.name) != click.core.ParameterSource.DEFAULT
    ]
    if model_config_file and given:
        raise click.ClickException(
            f"--model-config-file gives each model's base_path, version policy and labels: leave out {', '.join(given)}"
        )
    try:
        specific = tuple(int(v) for v in versions.split(",") if v.strip())
        label_map = {k: int(v) for k, v in (item.split("=", 1) for item in labels)}
    except ValueError:
        raise click.ClickException(
            "--versions takes integers like 1,3 and --label takes LABEL=VERSION like stable=3"
        ) from None
    if version_policy == "specific" and not specific:
        raise click.ClickException("--version-policy specific needs --versions")
    try:  # refused before TensorFlow loads (the server checks them again before the models load)
        check_ports(options["host"], options["rest_port"], options["grpc_port"])
        options["ssl"] = read_ssl_config(local_path(ssl_config_file)) if ssl_config_file else None
    except (PortError, TlsConfigError) as e:
        raise click.ClickException(str(e)) from None

    import logging

    from core.names import InvalidName
    from serving.batching import BatchingOptions
    from serving.models import Policy
    from serving.repository import Repository, ServedModels
    from serving.server import ModelServer, ServerOptions, run, set_tensorflow_threads

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    set_tensorflow_threads(intra_op, inter_op, spin_wait)
    policy = Policy(version_policy, latest_versions, specific)
    try:
        source = (
            _config_file(local_path(model_config_file))
            if model_config_file
            else Repository(local_path(model_base_path), model_names, policy, label_map)
        )
    except InvalidName as e:  # a --model-name that is no model name
        raise click.ClickException(str(e)) from None
    models = ServedModels(
        source,
        poll_seconds,
        BatchingOptions(max_batch_size, batch_timeout_ms / 1000, num_batch_threads) if enable_batching else None,
        local_path(skip_models_file),
        transition,
    )
    options["deployed_model_id"] = os.environ.get("AIP_DEPLOYED_MODEL_ID", "")
    try:
        run(ModelServer(models, ServerOptions(**options)).serve())
    except PortError as e:
        raise click.ClickException(str(e)) from None


def _config_file(path: str) -> ModelConfigFile:
    """The config file's models, checked before serving (an unreadable or invalid file stops the server)."""
    import tensorflow as tf
    from google.protobuf import text_format

    from serving.repository import ModelConfigFile

    source = ModelConfigFile(path)
    try:
        source.configs()
    except (ValueError, text_format.ParseError, tf.errors.OpError) as e:
        raise click.ClickException(f"--model-config-file {path}: {str(e).splitlines()[0]}") from None
    return source
