"""`promote` and `rollback`: move a Vertex AI endpoint's traffic between its deployed models (canary → everything,
or back to the previous model), undeploy what no longer serves, keep the champion alias on what serves.
`undeploy` and `delete-endpoint`: take a model off the endpoint, or the endpoint away, so that nothing billed is
left."""

from __future__ import annotations

import click

from pipelines import api
from pipelines.cli import _load, cli, config_options


def endpoint_options(func):
    func = config_options(func)
    func = click.option(
        "--rehearsal",
        "rehearsal_state",
        type=click.Path(exists=True, file_okay=False),
        metavar="STATE_DIR",
        help="act on a rehearsal's endpoint (rehearse --state) instead of Vertex AI",
    )(func)
    return click.option("--endpoint", help="endpoint display name or resource name [platform.endpoint_display_name]")(
        func
    )


@cli.command()
@endpoint_options
@click.option("--deployed-model-id", default="", help="the deployed model to promote [the most recently deployed]")
@click.option(
    "--keep-previous",
    type=click.IntRange(min=0),
    default=None,
    help="earlier deployed models to keep at 0 % [platform.keep_previous]",
)
def promote(endpoint, deployed_model_id, keep_previous, rehearsal_state, config_file, profile, sets):
    """Give the canary all of the endpoint's traffic, undeploy the other models (but --keep-previous) and move the
    champion alias to its version."""
    config = _load(config_file, profile, sets)
    result = api.promote(
        config,
        endpoint,
        deployed_model_id=deployed_model_id,
        keep_previous=keep_previous,
        rehearsal_state=rehearsal_state,
        log=click.echo,
    )
    click.echo(f"promoted {result.model_version} (deployed model {result.deployed_model_id})")


@cli.command()
@endpoint_options
def rollback(endpoint, rehearsal_state, config_file, profile, sets):
    """Give the previous deployed model all of the endpoint's traffic and undeploy the newest one (the canary, or
    the last full rollout if platform.keep_previous kept its predecessor deployed)."""
    result = api.rollback(_load(config_file, profile, sets), endpoint, rehearsal_state=rehearsal_state, log=click.echo)
    click.echo(f"rolled back to {result.model_version} (deployed model {result.deployed_model_id})")


@cli.command()
@endpoint_options
@click.option("--deployed-model-id", required=True, help="the deployed model to take off the endpoint")
@click.option("--force", is_flag=True, help="take it off even if it is the only model serving traffic")
def undeploy(endpoint, deployed_model_id, force, rehearsal_state, config_file, profile, sets):
    """Take a deployed model off the endpoint, its traffic given to the other models serving in proportion to their
    shares. The only model serving traffic stays unless --force (the endpoint then answers no prediction). The
    version aliases do not move."""
    config = _load(config_file, profile, sets)
    result = api.undeploy(
        config, deployed_model_id, endpoint, force=force, rehearsal_state=rehearsal_state, log=click.echo
    )
    split = ", ".join(f"{k}: {v} %" for k, v in result.traffic_split.items()) or "none"
    click.echo(f"undeployed {result.model_version} (deployed model {result.deployed_model_id}); traffic: {split}")


@cli.command("delete-endpoint")
@endpoint_options
@click.option("--force", is_flag=True, help="delete it even if its models serve traffic")
def delete_endpoint(endpoint, force, rehearsal_state, config_file, profile, sets):
    """Undeploy every model of the endpoint, then delete it (Vertex AI deletes only an endpoint with no model
    deployed). An endpoint serving traffic stays unless --force. The registry's model versions stay."""
    config = _load(config_file, profile, sets)
    result = api.delete_endpoint(config, endpoint, force=force, rehearsal_state=rehearsal_state, log=click.echo)
    undeployed = ", ".join(result.undeployed) or "none"
    click.echo(f"deleted {result.endpoint_name} (deployed models undeployed: {undeployed})")
