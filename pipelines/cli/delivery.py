"""`publish`, `submit` and `schedule` on Vertex AI and Kubeflow."""

from __future__ import annotations

import click

from pipelines import api
from pipelines.api.cloud import check_names
from pipelines.cli import _fail, _load, cli, config_options
from pipelines.config import PIPELINES


def template_options(func):
    """Which template to run: a fresh compile (default), a compiled file or a published tag."""
    func = click.option("--registry", help="template registry for --template-tag [platform.template_registry]")(func)
    func = click.option(
        "--template-tag", metavar="TAG", help="run the published template REGISTRY/PIPELINE_NAME/TAG (see publish)"
    )(func)
    func = click.option(
        "--template",
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="run this compiled pipeline YAML instead of compiling one now",
    )(func)
    return click.option(
        "--pipeline", type=click.Choice(PIPELINES), default="training", show_default=True, help="which pipeline"
    )(func)


def run_options(func):
    """Run parameters, caching and the pre-flight checks, shared by submit and schedule."""
    func = click.option(
        "--skip-checks",
        "skip_checks",
        is_flag=True,
        help="vertex: create the run without the pre-flight checks (bucket, images, service account, APIs, roles, key); "
        "images by tag are pinned by digest all the same",
    )(func)
    func = click.option(
        "--no-caching",
        "no_caching",
        is_flag=True,
        help="run every step again (default: the compiled settings, where look-ups are never "
        "cached and the rest is keyed on the data's fingerprint) [platform.enable_caching]",
    )(func)
    return click.option(
        "--param",
        "params",
        multiple=True,
        metavar="NAME=VALUE",
        help="pipeline input for the run (repeatable), typed and checked against the template",
    )(func)


def kubeflow_options(func):
    func = click.option("--namespace", help="kubeflow: multi-user namespace [platform.kfp_namespace]")(func)
    return click.option("--host", help="kubeflow: the KFP API endpoint [platform.kfp_host, $KF_PIPELINES_ENDPOINT]")(
        func
    )


def _only_kubeflow(target, **given):
    """Refuse the options given (the true values of `given`) unless the target takes the KFP API's options."""
    names = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if names and target != "kubeflow":
        _fail(f"{', '.join(names)}: only with --target kubeflow")


def _template_choice(template, template_tag, registry):
    if template and template_tag:
        _fail("--template and --template-tag: give one of them")
    if registry and not template_tag:
        _fail("--registry: only with --template-tag")


def _refused(problems: list[str], skipped: bool):
    """Every pre-flight problem on its own `Error:` line; the last as the command's error."""
    for problem in problems[:-1]:
        click.echo(f"Error: {problem}", err=True)
    return click.ClickException(
        problems[-1] + ("" if skipped else "\n(fix these, or pass --skip-checks to create the run anyway)")
    )


@cli.command()
@click.option("--target", type=click.Choice(["vertex", "kubeflow"]), required=True)
@template_options
@config_options
@run_options
@click.option("--run-name", help="the run's display name [vertex: the pipeline's name; kubeflow: name + time]")
@click.option("--wait", is_flag=True, help="follow the run until it ends; exit non-zero unless it succeeded")
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="--wait: seconds between state checks",
)
@kubeflow_options
@click.option(
    "--experiment",
    help="the run's experiment: a Vertex AI Experiment [platform.vertex_experiment] or a "
    "Kubeflow experiment [platform.kfp_experiment]",
)
def submit(
    target,
    pipeline,
    template,
    template_tag,
    registry,
    config_file,
    profile,
    sets,
    params,
    no_caching,
    skip_checks,
    run_name,
    wait,
    poll_seconds,
    host,
    namespace,
    experiment,
):
    """Submit one run: a Vertex AI PipelineJob or a run on a Kubeflow Pipelines deployment. The parameters are
    checked against the template's inputs before anything is sent."""
    _only_kubeflow(target, host=host, namespace=namespace)
    _template_choice(template, template_tag, registry)
    check_names(target, run_name=run_name, experiment=experiment)
    config = _load(config_file, profile, sets)
    try:
        submitted = api.submit(
            target,
            config,
            params,
            pipeline=pipeline,
            template=template,
            template_tag=template_tag,
            registry=registry,
            run_name=run_name,
            experiment=experiment,
            caching=False if no_caching else None,
            skip_checks=skip_checks,
            host=host,
            namespace=namespace,
            log=click.echo,
        )
    except api.PreflightError as e:
        raise _refused(e.problems, e.skipped) from None
    if wait:
        try:
            submitted.wait(poll_seconds, click.echo)
        except KeyboardInterrupt:
            click.echo(f"stopped following the run; it goes on: {submitted.url}", err=True)
            raise


# --- schedule ----------------------------------------------------------------------------------------------------


def _target_option(required=True):
    return click.option("--target", type=click.Choice(["vertex", "kubeflow"]), required=required)


@cli.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@_target_option(required=False)
@click.option("--cron", help='when to run, e.g. "TZ=Europe/Paris 0 3 * * 1" [platform.schedule.cron]')
@click.option(
    "--display-name",
    help="the schedule's name; one with this name is replaced "
    "[platform.schedule.display_name, else the pipeline's name]",
)
@template_options
@config_options
@run_options
@kubeflow_options
@click.option("--experiment", help="kubeflow: experiment of the recurring run [platform.kfp_experiment]")
@click.pass_context
def schedule(
    ctx,
    target,
    cron,
    display_name,
    pipeline,
    template,
    template_tag,
    registry,
    config_file,
    profile,
    sets,
    params,
    no_caching,
    skip_checks,
    host,
    namespace,
    experiment,
):
    """Create (or replace: same display name) a recurring run of the pipeline: a Vertex AI schedule or a Kubeflow
    recurring run. The cron expression and the parameters are checked before any API call.

    Sub-commands manage existing schedules by display name: list, pause NAME, resume NAME, delete NAME (their
    options after the sub-command name)."""
    from click.core import ParameterSource

    if ctx.invoked_subcommand:
        given = [
            f"--{p.name.replace('_', '-')}"
            for p in ctx.command.params
            if ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)
        ]
        if given:
            _fail(f"{', '.join(given)}: put the options after '{ctx.invoked_subcommand}'")
        return
    if not target:
        _fail("--target is required (vertex or kubeflow)")
    _only_kubeflow(target, host=host, namespace=namespace, experiment=experiment)
    _template_choice(template, template_tag, registry)
    check_names(target, experiment=experiment, display_name=display_name)
    config = _load(config_file, profile, sets)
    try:
        done = api.schedule(
            target,
            config,
            cron,
            params,
            display_name=display_name,
            pipeline=pipeline,
            template=template,
            template_tag=template_tag,
            registry=registry,
            experiment=experiment,
            caching=False if no_caching else None,
            skip_checks=skip_checks,
            host=host,
            namespace=namespace,
            log=click.echo,
        )
    except api.PreflightError as e:
        raise _refused(e.problems, e.skipped) from None
    runs = ", ".join(done.next_runs)
    click.echo(f"{done.name}: {done.template} ({done.source}) on '{done.cron}'; next runs {runs} {done.time_zone}")


def schedule_target_options(func):
    func = kubeflow_options(func)
    func = config_options(func)
    return _target_option()(func)


@schedule.command("list")
@schedule_target_options
def schedule_list(target, config_file, profile, sets, host, namespace):
    """List the schedules (Vertex: of the project and location; kubeflow: recurring runs)."""
    _only_kubeflow(target, host=host, namespace=namespace)
    listing = api.list_schedules(target, _load(config_file, profile, sets), host=host, namespace=namespace)
    if not listing.rows:
        click.echo(f"no schedules in {listing.where}")
        return
    for row in listing.rows:
        click.echo(
            f"{row.display_name:<28} {row.state:<9} {row.cron:<32} "
            f"{('next ' + row.next_run) if row.next_run else '':<32} {row.name}".rstrip()
        )


def _change(action, name, target, config_file, profile, sets, host, namespace):
    _only_kubeflow(target, host=host, namespace=namespace)
    action(target, name, _load(config_file, profile, sets), host=host, namespace=namespace, log=click.echo)


@schedule.command("pause")
@click.argument("name")
@schedule_target_options
def schedule_pause(name, **options):
    """Pause the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    _change(api.pause, name, **options)


@schedule.command("resume")
@click.argument("name")
@schedule_target_options
def schedule_resume(name, **options):
    """Resume the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    _change(api.resume, name, **options)


@schedule.command("delete")
@click.argument("name")
@schedule_target_options
def schedule_delete(name, **options):
    """Delete the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    _change(api.delete, name, **options)


# --- publish -----------------------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--registry", help="KFP template registry, https://REGION-kfp.pkg.dev/PROJECT/REPO [platform.template_registry]"
)
@click.option("--tag", "tags", multiple=True, required=True, help="tag of the uploaded version (repeatable)")
@click.option(
    "--target",
    type=click.Choice(["vertex", "kubeflow"]),
    default="vertex",
    show_default=True,
    help="target to compile for (when no --template)",
)
@click.option("--pipeline", type=click.Choice(PIPELINES), default="training", show_default=True)
@click.option(
    "--template",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="publish this compiled pipeline YAML instead of compiling one now",
)
@config_options
def publish(registry, tags, target, pipeline, template, config_file, profile, sets):
    """Upload the compiled pipeline to a KFP template registry (Artifact Registry) with tags; submit and schedule
    run it with --template-tag TAG."""
    published = api.publish(
        _load(config_file, profile, sets), tags, registry=registry, target=target, pipeline=pipeline, template=template
    )
    click.echo(f"published {published.package} {published.version} ({published.source}) with tag(s) {', '.join(tags)}")
    for url in published.urls:
        click.echo(f"  {url}")
    if published.warning:
        click.echo(published.warning, err=True)
