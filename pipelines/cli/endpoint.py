"""`promote` and `rollback`: move a Vertex AI endpoint's traffic between its deployed models (canary → everything,
or back to the previous model), undeploy what no longer serves, keep the champion alias on what serves.
`undeploy` and `delete-endpoint`: take a model off the endpoint, or the endpoint away, so that nothing billed is
left."""

from __future__ import annotations

import click

from pipelines.actions import doing
from pipelines.cli import _fail, _load, cli, config_options


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


def _endpoint_name(platform, endpoint):
    from components.lib.vertex.registry import find_resource

    if not platform.project:
        _fail(
            "platform.project is required on Vertex AI: set it in the config (profile), TFPIPE_PLATFORM__PROJECT "
            "or --set platform.project=PROJECT"
        )
    if endpoint and endpoint.startswith("projects/"):
        return endpoint
    display_name = endpoint or platform.endpoint_display_name
    name = find_resource("endpoint", display_name, platform.project, platform.location)
    if not name:
        _fail(f"no endpoint named {display_name!r} in projects/{platform.project}/locations/{platform.location}")
    return name


def _run(action, platform, endpoint, rehearsal_state, **arguments):
    import contextlib

    from components.lib.vertex.rollout import RolloutError

    api = contextlib.nullcontext()
    if rehearsal_state:
        from pathlib import Path

        from pipelines.rehearsal.run import PROJECT, rehearsal_api, state_location

        state = Path(rehearsal_state).resolve()
        platform = platform.model_copy(update={"project": PROJECT, "location": state_location(state)})
        api = rehearsal_api(state, platform.location, log=click.echo)
    with api, doing(f"{action.__name__} on Vertex AI"):
        try:
            name = _endpoint_name(platform, endpoint)
            return action(name, echo=click.echo, **arguments)
        except RolloutError as e:
            _fail(str(e))


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
    from components.lib.vertex.rollout import promote as promote_canary

    platform = _load(config_file, profile, sets).platform
    kept = platform.keep_previous if keep_previous is None else keep_previous
    result = _run(
        promote_canary,
        platform,
        endpoint,
        rehearsal_state,
        keep_previous=kept,
        deployed_model_id=deployed_model_id,
        aliases=list(platform.model_version_aliases),
    )
    click.echo(f"promoted {result.model_version} (deployed model {result.deployed_model_id})")


@cli.command()
@endpoint_options
def rollback(endpoint, rehearsal_state, config_file, profile, sets):
    """Give the previous deployed model all of the endpoint's traffic and undeploy the newest one (the canary, or
    the last full rollout if platform.keep_previous kept its predecessor deployed)."""
    from components.lib.vertex.rollout import rollback as roll_back

    platform = _load(config_file, profile, sets).platform
    result = _run(roll_back, platform, endpoint, rehearsal_state, aliases=list(platform.model_version_aliases))
    click.echo(f"rolled back to {result.model_version} (deployed model {result.deployed_model_id})")


@cli.command()
@endpoint_options
@click.option("--deployed-model-id", required=True, help="the deployed model to take off the endpoint")
@click.option("--force", is_flag=True, help="take it off even if it is the only model serving traffic")
def undeploy(endpoint, deployed_model_id, force, rehearsal_state, config_file, profile, sets):
    """Take a deployed model off the endpoint, its traffic given to the other models serving in proportion to their
    shares. The only model serving traffic stays unless --force (the endpoint then answers no prediction). The
    version aliases do not move."""
    from components.lib.vertex.rollout import undeploy_model

    platform = _load(config_file, profile, sets).platform
    result = _run(undeploy_model, platform, endpoint, rehearsal_state, deployed_model_id=deployed_model_id, force=force)
    split = ", ".join(f"{k}: {v} %" for k, v in result.traffic_split.items()) or "none"
    click.echo(f"undeployed {result.model_version} (deployed model {result.deployed_model_id}); traffic: {split}")


@cli.command("delete-endpoint")
@endpoint_options
@click.option("--force", is_flag=True, help="delete it even if its models serve traffic")
def delete_endpoint(endpoint, force, rehearsal_state, config_file, profile, sets):
    """Undeploy every model of the endpoint, then delete it (Vertex AI deletes only an endpoint with no model
    deployed). An endpoint serving traffic stays unless --force. The registry's model versions stay."""
    from components.lib.vertex.rollout import delete_endpoint as delete

    result = _run(delete, _load(config_file, profile, sets).platform, endpoint, rehearsal_state, force=force)
    undeployed = ", ".join(result.undeployed) or "none"
    click.echo(f"deleted {result.endpoint_name} (deployed models undeployed: {undeployed})")
