"""`python -m pipelines`: run the pipelines locally; compile, publish, submit and schedule them on Vertex AI or
Kubeflow; serve a model repository. A thin layer over pipelines.api: the commands (in the modules beside this one)
parse their options, call the API and print what it returns; an API error is one `Error:` line."""

from __future__ import annotations

import sys
import traceback

import click

from pipelines import api, cloud_errors
from pipelines.config import Config
from pipelines.errors import CloudError, CredentialsError, MissingArgument, TfpipeError


def _fail(message: str) -> None:
    raise click.ClickException(message)


def option_line(error: TfpipeError) -> str:
    """An API error's line with the CLI's option names for the arguments it is about (`run_name` → --run-name)."""
    if not error.argument:
        return str(error)
    options = ", ".join(f"--{a.strip().replace('_', '-')}" for a in error.argument.split(","))
    if isinstance(error, MissingArgument):
        return f"{options} is required (or {error.fallback}), e.g. {options} {error.example}"
    return f"{options}: {error.reason}"


def config_options(func):
    """--config, --profile and repeatable --set, shared by every command that reads the config."""
    func = click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="SECTION.FIELD=VALUE",
        help="override one config value (repeatable), e.g. platform.trainer_image=IMAGE",
    )(func)
    func = click.option("--profile", help="config profile to apply over the base sections [$TFPIPE_PROFILE]")(func)
    return click.option(
        "--config",
        "config_file",
        type=click.Path(),
        help="YAML config (parameters/batch/platform/study/trainer sections, profiles)",
    )(func)


def _load(config_file, profile=None, sets=(), overrides=None, batch_overrides=None) -> Config:
    """The config of the options: the file, profile and --set, then the command's own options (`overrides` of the
    parameters, `batch_overrides` of the batch section)."""
    given = {f"parameters.{k}": v for k, v in (overrides or {}).items()}
    given.update({f"batch.{k}": v for k, v in (batch_overrides or {}).items()})
    return api.load_config(config_file, profile, given, sets=sets, origin="the command line")


class _Group(click.Group):
    """The top command: an API error ends the command with its one `Error:` line, and an error of a cloud call
    raised outside the API too (cloud_errors.describe); with -v, a cloud call's traceback before it."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TfpipeError as e:
            if ctx.params.get("verbose") and isinstance(e, (CloudError, CredentialsError)):
                click.echo(traceback.format_exc().rstrip(), err=True)
            raise click.ClickException(option_line(e)) from None
        except Exception as e:
            message = cloud_errors.describe(e)
            if message is None:
                raise
            if ctx.params.get("verbose"):
                click.echo(traceback.format_exc().rstrip(), err=True)
            raise click.ClickException(message) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="with an error of a cloud call, print its traceback too")
def cli(verbose):
    """TensorFlow training pipeline for Vertex AI Pipelines, Kubeflow and your own machine."""


def main() -> None:
    try:
        cli(prog_name="python -m pipelines")
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        sys.exit(130)


from pipelines.cli import delivery, endpoint, local, rehearse, render, serving  # noqa: E402,F401 (register the commands)
