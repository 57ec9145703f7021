"""`rehearse`: run the compiled Vertex AI pipeline on this machine against a local Vertex AI API double."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import click

from core.storage import local_path
from pipelines.cli import _fail, _load, cli, config_options
from pipelines.config import PIPELINES

DEFAULT_STATE = "runs/rehearsal-state"


@cli.command()
@click.option(
    "--template",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="the compiled Vertex pipeline to run [compiled now from the config]",
)
@click.option(
    "--pipeline",
    type=click.Choice(PIPELINES),
    default="training",
    show_default=True,
    help="which pipeline to compile (without --template)",
)
@config_options
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="pipeline input (repeatable), typed and checked against the template",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="output folder [runs/rehearsal-<time>]")
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False),
    default=DEFAULT_STATE,
    show_default=True,
    help="the rehearsed Model Registry, endpoints and GCS bucket, shared by successive rehearsals",
)
@click.option(
    "--no-caching",
    "no_caching",
    is_flag=True,
    help="run every step (default: unchanged steps are served from the cache kept in --state, as on Vertex)",
)
@click.option(
    "--api-faults",
    "api_faults",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.0,
    show_default=True,
    metavar="SHARE",
    help="refuse this share of the steps' own Vertex AI calls with 429 or 503, as a busy Vertex AI does (e.g. 0.2)",
)
@click.option(
    "--preempt-replica",
    "preempt_replica",
    type=click.IntRange(0),
    default=None,
    metavar="N",
    help="each custom job loses replica N (0: the chief) once to a Spot VM preemption as its second epoch begins",
)
@click.option("-v", "--verbose", is_flag=True, help="stream every step's log")
@click.option("-q", "--quiet", is_flag=True, help="show only the summary (no steps, no progress)")
def rehearse(
    template,
    pipeline,
    config_file,
    profile,
    sets,
    params,
    out_dir,
    state_dir,
    no_caching,
    api_faults,
    preempt_replica,
    verbose,
    quiet,
):
    """Run the compiled Vertex AI pipeline here: its DAG through kfp.local, Google Cloud Pipeline Components'
    own launchers, and a local Vertex AI API double doing the work with this project's local engines."""
    if verbose and quiet:
        _fail("-v/--verbose and -q/--quiet: choose one")
    from pipelines.cli.local import _make_folder, _print_summary
    from pipelines.delivery import delivery_for
    from pipelines.rehearsal.iam import Iam
    from pipelines.rehearsal.run import PIPELINE_ROOT, PROJECT, PROJECT_NUMBER, rehearse as run_rehearsal
    from pipelines.templates import TemplateError, load_template, parse_params

    out = _make_folder(Path(out_dir or f"runs/rehearsal-{time.strftime('%Y%m%d-%H%M%S')}").resolve(), "--out")
    config = _load(config_file, profile, sets)
    try:
        if not template:
            template = delivery_for("vertex").compile(pipeline, config, out / "template.yaml")
        spec = load_template(template)
        arguments = parse_params(params, spec)
    except TemplateError as e:
        _fail(str(e))
    inputs = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    for name in ("data_source", "instances"):  # local paths: absolute, steps run in other folders
        if name in arguments:
            arguments[name] = ",".join(local_path(i.strip()) for i in str(arguments[name]).split(","))
    if "data_source" in inputs and "data_source" not in arguments:
        default = inputs["data_source"].get("defaultValue", "")
        if default and not default.startswith(("gs://", "builtin:")):
            arguments["data_source"] = local_path(default)
    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)  # its iam.json: the set-up of this config (a new one; kept if there)
    platform = config.platform.model_copy(update={"project": config.platform.project or PROJECT})
    Iam(str(state / "iam.json"), platform.service_account, PROJECT_NUMBER, platform)
    with contextlib.ExitStack() as stack:
        if quiet:  # the steps' lines (the local runner's) and the double's messages go to stdout
            stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
        click.echo(f"Rehearsing {spec['pipelineInfo']['name']} ({template}) against a local Vertex AI; output in {out}")
        summary = run_rehearsal(
            template,
            arguments,
            out,
            state,
            verbose,
            click.echo,
            caching=not no_caching,
            project=platform.project,
            pipeline_root=config.platform.pipeline_root
            if config.platform.pipeline_root.startswith("gs://")
            else PIPELINE_ROOT,
            service_account=config.platform.service_account,
            api_faults=api_faults,
            preempt_replica=preempt_replica,
        )
    from pipelines import report

    report.write(summary, out)
    _print_summary(summary)
    vertex = summary["vertex"]
    refused = f" ({vertex['refused']} refused with 429 or 503)" if api_faults else ""
    click.echo(f"  Vertex AI requests: {vertex['requests']}{refused}")
    for endpoint in vertex["endpoints"]:
        click.echo(f"  endpoint {endpoint['display_name']}: traffic {endpoint['traffic_split']}")
    if summary["status"] != "SUCCEEDED":
        _fail(summary["error"] or f"the rehearsal failed; see the step logs in {out / 'logs'}")
