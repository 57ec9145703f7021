"""`publish`, `submit` and `schedule` on Vertex AI and Kubeflow."""

from __future__ import annotations

import click

from pipelines.cli import _fail, _load, _refuse_examples, cli, config_options
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


def _template(delivery, pipeline, config, template, template_tag, registry, workdir):
    """The template a submit/schedule/publish command runs, resolved before any API call."""
    from pipelines.templates import TemplateError

    if template and template_tag:
        _fail("--template and --template-tag: give one of them")
    if registry and not template_tag:
        _fail("--registry: only with --template-tag")
    try:
        return delivery.template(pipeline, config, workdir, template, template_tag, registry)
    except TemplateError as e:
        _fail(str(e))


def _params(chosen, assignments):
    from pipelines.templates import TemplateError, parse_params

    try:
        return parse_params(assignments, chosen.spec)
    except TemplateError as e:
        _fail(str(e))


def _attempt(action, *args, **kwargs):
    """`action`'s result; its DeliveryError as the command's error."""
    from pipelines.delivery.base import DeliveryError

    try:
        return action(*args, **kwargs)
    except DeliveryError as e:
        _fail(str(e))


def _only_kubeflow(delivery, **given):
    """Refuse the options given (the true values of `given`) unless the target takes the KFP API's options."""
    names = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if names and not delivery.kfp_options:
        _fail(f"{', '.join(names)}: only with --target kubeflow")


def _check_names(delivery, run_name=None, experiment=None, display_name=None):
    """The names given as options, by the rules of where they go (core/names.py), in one line."""
    from core import names

    try:
        if run_name is not None:
            names.display_name(run_name, "--run-name")
        if display_name is not None:
            names.display_name(display_name, "--display-name")
        if experiment is not None:
            delivery.check_experiment(experiment, "--experiment")
    except names.InvalidName as e:
        _fail(str(e))


def _precheck(delivery, pipeline, config, template, template_tag, registry, host, namespace):
    """Settings a run or schedule needs, checked before any API call (example values first); returns where the
    calls go."""
    fields = config.cloud_fields(
        delivery.target,
        pipeline,
        compiling=not (template or template_tag),
        running=True,
        registry=bool(template_tag and not registry),
    )
    _refuse_examples(config, [f for f in fields if not (host and f == "platform.kfp_host")])
    return _attempt(delivery.connect, config.platform, host, namespace, running=True)


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
    import tempfile

    from pipelines.delivery import delivery_for
    from pipelines.delivery.base import Run

    delivery = delivery_for(target)
    _only_kubeflow(delivery, host=host, namespace=namespace)
    _check_names(delivery, run_name=run_name, experiment=experiment)
    config = _load(config_file, profile, sets)
    platform = config.platform
    caching = False if no_caching else platform.enable_caching
    connection = _precheck(delivery, pipeline, config, template, template_tag, registry, host, namespace)
    with tempfile.TemporaryDirectory(prefix="tfpipe-submit-") as workdir:
        chosen = _template(delivery, pipeline, config, template, template_tag, registry, workdir)
        values = _params(chosen, params)
        chosen = _preflight(delivery, platform, chosen, skip_checks, workdir)
        run = Run(chosen, values, caching)
        submitted = _attempt(delivery.submit, connection, run, run_name, experiment, click.echo)
        if wait:
            _follow(submitted, poll_seconds)


def _preflight(delivery, platform, chosen, skip, workdir):
    """The template to send after the target's pre-flight checks; on a problem: every one on its own line, then
    exit 1."""
    checked = delivery.preflight(platform, chosen, skip, click.echo, workdir)
    problems = checked.problems
    if problems:
        for problem in problems[:-1]:
            click.echo(f"Error: {problem}", err=True)
        _fail(problems[-1] + ("" if skip else "\n(fix these, or pass --skip-checks to create the run anyway)"))
    return checked.template


def _follow(submitted, poll_seconds):
    """Follow the run until it ends; on Ctrl-C say that it goes on."""
    try:
        _attempt(submitted.wait, poll_seconds, click.echo)
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
    import tempfile

    from click.core import ParameterSource

    from pipelines.delivery import delivery_for
    from pipelines.delivery.base import Run

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
    delivery = delivery_for(target)
    _only_kubeflow(delivery, host=host, namespace=namespace, experiment=experiment)
    _check_names(delivery, experiment=experiment, display_name=display_name)
    config = _load(config_file, profile, sets)
    platform = config.platform
    settings = platform.schedule
    caching = False if no_caching else platform.enable_caching
    connection = _precheck(delivery, pipeline, config, template, template_tag, registry, host, namespace)
    parsed = _parse_cron(delivery, cron or settings.cron)
    with tempfile.TemporaryDirectory(prefix="tfpipe-schedule-") as workdir:
        chosen = _template(delivery, pipeline, config, template, template_tag, registry, workdir)
        values = _params(chosen, params)
        name = display_name or settings.display_name or chosen.name
        chosen = _preflight(delivery, platform, chosen, skip_checks, workdir)
        _attempt(delivery.schedule, connection, Run(chosen, values, caching), parsed, name, experiment, click.echo)
    runs = ", ".join(t.strftime("%Y-%m-%d %H:%M") for t in parsed.next_runs(3))
    click.echo(f"{name}: {chosen.name} ({chosen.source}) on '{parsed}'; next runs {runs} {delivery.time_zone(parsed)}")


def _parse_cron(delivery, text):
    from pipelines.cron import parse_cron

    if not text:
        _fail('--cron is required (or platform.schedule.cron), e.g. --cron "TZ=Europe/Paris 0 3 * * 1"')
    try:
        parsed = parse_cron(text)
        delivery.check_cron(parsed)
    except ValueError as e:  # DeliveryError included
        _fail(f"--cron: {e}")
    return parsed


def schedule_target_options(func):
    func = kubeflow_options(func)
    func = config_options(func)
    return _target_option()(func)


def _managed(target, config_file, profile, sets, host, namespace):
    """The delivery of list, pause, resume and delete, and where their calls go, checked before any API call."""
    from pipelines.delivery import delivery_for

    delivery = delivery_for(target)
    _only_kubeflow(delivery, host=host, namespace=namespace)
    config = _load(config_file, profile, sets)
    _refuse_examples(config, [f for f in delivery.schedule_fields if not (host and f == "platform.kfp_host")])
    return delivery, _attempt(delivery.connect, config.platform, host, namespace, running=False)


@schedule.command("list")
@schedule_target_options
def schedule_list(**options):
    """List the schedules (Vertex: of the project and location; kubeflow: recurring runs)."""
    delivery, connection = _managed(**options)
    listing = delivery.list_schedules(connection)
    if not listing.rows:
        click.echo(f"no schedules in {listing.where}")
        return
    for row in listing.rows:
        click.echo(
            f"{row.display_name:<28} {row.state:<9} {row.cron:<32} "
            f"{('next ' + row.next_run) if row.next_run else '':<32} {row.name}".rstrip()
        )


@schedule.command("pause")
@click.argument("name")
@schedule_target_options
def schedule_pause(name, **options):
    """Pause the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    delivery, connection = _managed(**options)
    _attempt(delivery.pause, connection, name, click.echo)


@schedule.command("resume")
@click.argument("name")
@schedule_target_options
def schedule_resume(name, **options):
    """Resume the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    delivery, connection = _managed(**options)
    _attempt(delivery.resume, connection, name, click.echo)


@schedule.command("delete")
@click.argument("name")
@schedule_target_options
def schedule_delete(name, **options):
    """Delete the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    delivery, connection = _managed(**options)
    _attempt(delivery.delete, connection, name, click.echo)


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
    import tempfile

    from pipelines.credentials import application_default, on_artifact_registry
    from pipelines.delivery import delivery_for
    from pipelines.publish import PublishError, check_registry
    from pipelines.templates import TemplateError, check_tag

    delivery = delivery_for(target)
    config = _load(config_file, profile, sets)
    _refuse_examples(config, config.cloud_fields(target, pipeline, compiling=not template, registry=not registry))
    try:
        registry = check_registry(registry or config.platform.template_registry)
        for tag in tags:
            check_tag(tag)
    except (PublishError, TemplateError) as e:
        _fail(str(e))
    if on_artifact_registry(registry):  # before the compile: without credentials, the one line at once
        application_default()
    with tempfile.TemporaryDirectory(prefix="tfpipe-publish-") as workdir:
        chosen = _template(delivery, pipeline, config, template, None, None, workdir)
        package, version = delivery.publish(registry, chosen, tags)
    click.echo(f"published {package} {version} ({chosen.source}) with tag(s) {', '.join(tags)}")
    for tag in tags:
        click.echo(f"  {registry}/{package}/{tag}")
    if delivery.target == "vertex":
        from pipelines.preflight import tag_warning

        if warning := tag_warning(chosen.spec):
            click.echo(warning, err=True)
