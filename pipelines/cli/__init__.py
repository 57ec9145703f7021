"""`python -m pipelines`: run the pipelines locally; compile, publish, submit and schedule them on Vertex AI or
Kubeflow; serve a model repository. Shared options and helpers here, the commands in the modules beside it."""

from __future__ import annotations

import subprocess
import sys
import traceback

import click

from pipelines.cli import errors
from pipelines.config import Config, ConfigError, load_config


def _fail(message: str) -> None:
    raise click.ClickException(message)


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


def _load(config_file, profile=None, sets=(), overrides=None, batch_overrides=None):
    try:
        return load_config(config_file, overrides, batch_overrides, profile=profile, sets=sets)
    except ConfigError as e:
        _fail(str(e))


def _refuse_examples(config: Config, fields) -> None:
    """One line naming every field of `fields` that still holds an example value of tfpipe.yaml or the docs."""
    found = config.example_values(fields)
    if found:
        _fail(f"the config still holds example values (edit them or --set them): {', '.join(found)}")


def _source_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


class _Group(click.Group):
    """The top command: an error of a cloud call ends the command with one `Error:` line (errors.describe), its
    traceback before it with -v."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as e:
            message = errors.describe(e)
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
