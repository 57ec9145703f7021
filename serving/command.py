"""`python -m serving` (also the `serve` verb of `python -m pipelines`): serve a model repository."""

from __future__ import annotations

import os

import click

from components.lib.storage import local_path


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model-base-path", required=True, help="model repository: serves <base>/<model-name>/<version>/")
@click.option("--model-name", required=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (0.0.0.0 in a container)")
@click.option(
    "--rest-port",
    type=int,
    default=lambda: int(os.environ.get("AIP_HTTP_PORT", 8501)),
    show_default="8501 or $AIP_HTTP_PORT",
    help="0: any free port",
)
@click.option("--grpc-port", type=int, default=8500, show_default=True, help="0: any free port, -1: no gRPC")
@click.option("--poll-seconds", type=float, default=1.0, show_default=True, help="file-system poll period")
@click.option("--version-policy", type=click.Choice(["latest", "all", "specific"]), default="latest", show_default=True)
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
@click.option("--ready-file", default="", help="write the pid and addresses here (JSON) once serving")
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
def serve(
    model_base_path,
    model_name,
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
    **options,
):
    """Serve the model repository with TF Serving's REST and gRPC APIs (a stand-in for tensorflow/serving)."""
    try:
        specific = tuple(int(v) for v in versions.split(",") if v.strip())
        label_map = {k: int(v) for k, v in (item.split("=", 1) for item in labels)}
    except ValueError:
        raise click.ClickException(
            "--versions takes integers like 1,3 and --label takes LABEL=VERSION like stable=3"
        ) from None
    if version_policy == "specific" and not specific:
        raise click.ClickException("--version-policy specific needs --versions")

    import logging

    from serving.batching import BatchingOptions
    from serving.models import ModelManager, Policy
    from serving.server import ModelServer, ServerOptions, run, set_tensorflow_threads

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    manager = ModelManager(
        local_path(model_base_path),
        model_name,
        Policy(version_policy, latest_versions, specific),
        label_map,
        poll_seconds,
        BatchingOptions(max_batch_size, batch_timeout_ms / 1000, num_batch_threads) if enable_batching else None,
    )
    options["deployed_model_id"] = os.environ.get("AIP_DEPLOYED_MODEL_ID", "")
    set_tensorflow_threads(intra_op, inter_op)
    run(ModelServer(manager, ServerOptions(**options)).serve())
