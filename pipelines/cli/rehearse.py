"""`rehearse`: run the compiled Vertex AI pipeline on this machine against a local Vertex AI API double."""

from __future__ import annotations

import click

from pipelines import api
from pipelines.api.local import DEFAULT_STATE
from pipelines.cli import _fail, _load, cli, config_options
from pipelines.config import PIPELINES


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
    from pipelines.cli.local import _print_summary

    summary = api.rehearse(
        _load(config_file, profile, sets),
        params,
        template=template,
        pipeline=pipeline,
        out=out_dir,
        state=state_dir,
        caching=not no_caching,
        api_faults=api_faults,
        preempt_replica=preempt_replica,
        progress=not quiet,
        verbose=verbose,
        log=click.echo,
    )
    _print_summary(summary.details)
    vertex = summary.details["vertex"]
    refused = f" ({vertex['refused']} refused with 429 or 503)" if api_faults else ""
    click.echo(f"  Vertex AI requests: {vertex['requests']}{refused}")
    for endpoint in vertex["endpoints"]:
        click.echo(f"  endpoint {endpoint['display_name']}: traffic {endpoint['traffic_split']}")
    if not summary.succeeded:
        _fail(summary.error or f"the rehearsal failed; see the step logs in {summary.out / 'logs'}")
