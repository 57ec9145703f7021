"""`publish`, `submit` and `schedule` on Vertex AI and Kubeflow."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
import yaml

from pipelines.cli import _fail, _load, _refuse_examples, cli, config_options
from pipelines.cli.errors import doing
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
        help="vertex: create the run without the pre-flight checks (bucket, images, service account)",
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


class _Template:
    """The template a submit/schedule/publish command runs, resolved before any API call: `path` (a local file),
    `url` (a published template) and the loaded `spec`."""

    def __init__(self, target, pipeline, config, template, template_tag, registry, workdir, credentials=None):
        from pipelines.templates import TemplateError, compile_template, load_template, published_url

        self.url = None
        if template and template_tag:
            _fail("--template and --template-tag: give one of them")
        if registry and not template_tag:
            _fail("--registry: only with --template-tag")
        try:
            if template_tag:
                self.url = published_url(registry or config.platform.template_registry, pipeline, template_tag)
                self.spec = load_template(self.url, config.platform.project or None, credentials)
                self.path = str(Path(workdir) / "template.yaml")
                Path(self.path).write_text(yaml.safe_dump(self.spec, sort_keys=False))
            elif template:
                self.path = template
                self.spec = load_template(template)
            else:
                self.path = compile_template(target, pipeline, config, Path(workdir) / f"{pipeline}.yaml")
                self.spec = load_template(self.path)
        except TemplateError as e:
            _fail(str(e))
        self.name = self.spec["pipelineInfo"]["name"]
        self.source = self.url or (self.path if template else f"{target} {pipeline} pipeline compiled now")

    def params(self, assignments):
        from pipelines.templates import TemplateError, parse_params

        try:
            return parse_params(assignments, self.spec)
        except TemplateError as e:
            _fail(str(e))


def _kubeflow_target(platform, host, namespace):
    host = host or platform.kfp_host or os.environ.get("KF_PIPELINES_ENDPOINT", "")
    if not host:
        _fail("--target kubeflow needs the KFP API endpoint: --host URL, platform.kfp_host or $KF_PIPELINES_ENDPOINT")
    return host.rstrip("/"), namespace or platform.kfp_namespace


def _only_with(target, wanted, **given):
    names = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if names and target != wanted:
        _fail(f"{', '.join(names)}: only with --target {wanted}")


def _check_names(target, run_name=None, experiment=None, display_name=None):
    """The names given as options, by the rules of where they go (core/names.py), in one line."""
    from core import names

    try:
        if run_name is not None:
            names.display_name(run_name, "--run-name")
        if display_name is not None:
            names.display_name(display_name, "--display-name")
        if experiment is not None:
            check = names.vertex_experiment if target == "vertex" else names.display_name
            check(experiment, "--experiment")
    except names.InvalidName as e:
        _fail(str(e))


def _precheck(target, pipeline, config, template, template_tag, registry, host, namespace):
    """Settings a run or schedule needs, checked before any API call (example values first); returns kubeflow's
    (host, namespace)."""
    from pipelines.submit import SubmitError, check_vertex

    fields = config.cloud_fields(
        target,
        pipeline,
        compiling=not (template or template_tag),
        running=True,
        registry=bool(template_tag and not registry),
    )
    _refuse_examples(config, [f for f in fields if not (host and f == "platform.kfp_host")])
    if target == "kubeflow":
        return _kubeflow_target(config.platform, host, namespace)
    try:
        check_vertex(config.platform)
    except SubmitError as e:
        _fail(str(e))
    return host, namespace


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

    _only_with(target, "kubeflow", host=host, namespace=namespace)
    _check_names(target, run_name=run_name, experiment=experiment)
    config = _load(config_file, profile, sets)
    platform = config.platform
    caching = False if no_caching else platform.enable_caching
    host, namespace = _precheck(target, pipeline, config, template, template_tag, registry, host, namespace)
    with tempfile.TemporaryDirectory(prefix="tfpipe-submit-") as workdir:
        chosen = _Template(target, pipeline, config, template, template_tag, registry, workdir)
        values = chosen.params(params)
        if target == "vertex":
            _preflight(platform, chosen.spec, skip_checks)
            _submit_vertex(
                chosen,
                values,
                platform,
                run_name,
                caching,
                wait,
                poll_seconds,
                experiment or platform.vertex_experiment,
            )
        else:
            _submit_kubeflow(
                chosen,
                values,
                platform,
                run_name,
                caching,
                wait,
                poll_seconds,
                host,
                namespace,
                experiment or platform.kfp_experiment,
            )


def _preflight(platform, spec, skip):
    """The pre-flight checks of a Vertex run (pipelines/preflight.py): every problem on its own line, then exit 1."""
    from pipelines.preflight import preflight

    if skip:
        click.echo("pre-flight checks skipped (--skip-checks)")
        return
    with doing("the pre-flight checks could not finish (--skip-checks to go on without them)"):
        problems = preflight(platform, spec, note=click.echo)
    if problems:
        for problem in problems[:-1]:
            click.echo(f"Error: {problem}", err=True)
        _fail(f"{problems[-1]}\n(fix these, or pass --skip-checks to create the run anyway)")
    click.echo("pre-flight checks passed: pipeline root writable, images present, service account usable")


def _follow(wait, url, echo=click.echo):
    """Run `wait()`; on Ctrl-C say that the run goes on."""
    try:
        return wait()
    except KeyboardInterrupt:
        echo(f"stopped following the run; it goes on: {url}", err=True)
        raise


def _vertex_job(chosen, platform, values, display_name, caching):
    """The unsubmitted aiplatform.PipelineJob (its own checks: display name, labels, job id)."""
    from pipelines.submit import vertex_job

    if len(display_name) > 128:
        _fail(f"display name {display_name[:20]!r}...: at most 128 characters")
    try:
        return vertex_job(chosen.url or chosen.path, platform, values, display_name, caching)
    except ValueError as e:
        _fail(f"aiplatform refused the pipeline job: {e}")


def _submit_vertex(chosen, values, platform, run_name, caching, wait, poll_seconds, experiment):
    from pipelines.submit import submit_vertex, wait_vertex

    job = _vertex_job(chosen, platform, values, run_name or chosen.name, caching)
    with doing("creating the pipeline job on Vertex AI"):
        url = submit_vertex(job, platform, experiment)
    click.echo(
        f"submitted {chosen.name} ({chosen.source}) to Vertex AI: {job.resource_name}"
        + (f" in experiment {experiment}" if experiment else "")
    )
    click.echo(f"console: {url}")
    if wait:
        with doing("reading the pipeline job"):
            state, error = _follow(lambda: wait_vertex(job, poll_seconds, click.echo), url)
        if state != "PIPELINE_STATE_SUCCEEDED":
            _fail(f"the run ended {state}" + (f": {error}" if error else "") + f" ({url})")


def _submit_kubeflow(chosen, values, platform, run_name, caching, wait, poll_seconds, host, namespace, experiment):
    from pipelines.submit import kfp_client, submit_kubeflow, wait_kubeflow

    run_name = run_name or f"{chosen.name} {time.strftime('%Y-%m-%d %H-%M-%S')}"
    with doing(f"submitting the run to Kubeflow Pipelines at {host}"):
        client = kfp_client(host, namespace)
        run_id = submit_kubeflow(client, chosen.path, values, run_name, platform, experiment, namespace, caching)
    click.echo(f"submitted {chosen.name} ({chosen.source}) to Kubeflow Pipelines as {run_name!r}: run {run_id}")
    click.echo(f"run: {host}/#/runs/details/{run_id}")
    if wait:
        with doing("reading the run"):
            state, error = _follow(
                lambda: wait_kubeflow(client, run_id, poll_seconds, click.echo), f"{host}/#/runs/details/{run_id}"
            )
        if state != "SUCCEEDED":
            _fail(f"the run ended {state}" + (f": {error}" if error else ""))


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
    _only_with(target, "kubeflow", host=host, namespace=namespace, experiment=experiment)
    _check_names(target, experiment=experiment, display_name=display_name)
    config = _load(config_file, profile, sets)
    platform = config.platform
    settings = platform.schedule
    caching = False if no_caching else platform.enable_caching
    host, namespace = _precheck(target, pipeline, config, template, template_tag, registry, host, namespace)
    parsed = _parse_cron(cron or settings.cron, target)
    with tempfile.TemporaryDirectory(prefix="tfpipe-schedule-") as workdir:
        chosen = _Template(target, pipeline, config, template, template_tag, registry, workdir)
        values = chosen.params(params)
        name = display_name or settings.display_name or chosen.name
        if target == "vertex":
            _preflight(platform, chosen.spec, skip_checks)
        _create_schedule(target, chosen, values, platform, settings, parsed, name, caching, host, namespace, experiment)
    zone = parsed.zone or ("UTC" if target == "vertex" else "")
    runs = ", ".join(t.strftime("%Y-%m-%d %H:%M") for t in parsed.next_runs(3))
    click.echo(
        f"{name}: {chosen.name} ({chosen.source}) on '{parsed}'; next runs {runs}"
        + (f" {zone}" if zone else " (the KFP controller's time zone)")
    )


def _create_schedule(target, chosen, values, platform, settings, parsed, name, caching, host, namespace, experiment):
    from pipelines.schedule import ScheduleError

    try:
        if target == "vertex":
            from pipelines.schedule import replace_vertex_schedule, schedule_console_url

            job = _vertex_job(chosen, platform, values, name, caching)
            with doing("creating the schedule on Vertex AI"):
                created = replace_vertex_schedule(job, platform, parsed, settings, name, echo=click.echo)
            schedule_id = created.resource_name.rsplit("/", 1)[-1]
            click.echo(f"console: {schedule_console_url(platform.project, platform.location, schedule_id)}")
        else:
            from pipelines.schedule import replace_kfp_recurring_run
            from pipelines.submit import kfp_client

            with doing(f"creating the recurring run on Kubeflow Pipelines at {host}"):
                client = kfp_client(host, namespace)
                replace_kfp_recurring_run(
                    client,
                    chosen.path,
                    values,
                    platform,
                    parsed,
                    settings,
                    name,
                    experiment or platform.kfp_experiment,
                    namespace,
                    caching,
                    echo=click.echo,
                )
    except ScheduleError as e:
        _fail(str(e))


def _parse_cron(text, target):
    from pipelines.cron import parse_cron
    from pipelines.schedule import kfp_cron

    if not text:
        _fail('--cron is required (or platform.schedule.cron), e.g. --cron "TZ=Europe/Paris 0 3 * * 1"')
    try:
        parsed = parse_cron(text)
        if target == "kubeflow":
            kfp_cron(parsed)
    except ValueError as e:  # ScheduleError included
        _fail(f"--cron: {e}")
    return parsed


def schedule_target_options(func):
    func = kubeflow_options(func)
    func = config_options(func)
    return _target_option()(func)


@schedule.command("list")
@schedule_target_options
def schedule_list(target, config_file, profile, sets, host, namespace):
    """List the schedules (Vertex: of the project and location; kubeflow: recurring runs)."""
    platform, host, namespace = _managed_target(target, config_file, profile, sets, host, namespace)
    if target == "vertex":
        from pipelines.schedule import describe_vertex, vertex_schedules

        with doing("listing the schedules"):
            rows = [describe_vertex(s) for s in vertex_schedules(platform)]
        where = f"projects/{platform.project}/locations/{platform.location}"
    else:
        from pipelines.schedule import describe_kfp, kfp_recurring_runs
        from pipelines.submit import kfp_client

        with doing(f"listing the recurring runs at {host}"):
            rows = [describe_kfp(r) for r in kfp_recurring_runs(kfp_client(host, namespace), None, namespace)]
        where = host
    if not rows:
        click.echo(f"no schedules in {where}")
        return
    for row in rows:
        click.echo(
            f"{row['display_name']:<28} {row['state']:<9} {row['cron']:<32} "
            f"{('next ' + row['next_run']) if row['next_run'] else '':<32} {row['name']}".rstrip()
        )


def _managed_target(target, config_file, profile, sets, host, namespace):
    """The platform and kubeflow's (host, namespace) of list, pause, resume and delete, checked before any API
    call."""
    _only_with(target, "kubeflow", host=host, namespace=namespace)
    config = _load(config_file, profile, sets)
    _refuse_examples(config, ["platform.project"] if target == "vertex" else [] if host else ["platform.kfp_host"])
    if target == "kubeflow":
        return (config.platform, *_kubeflow_target(config.platform, host, namespace))
    if not config.platform.project:
        _fail(
            "platform.project is required on Vertex AI: set it in the config (profile), "
            "TFPIPE_PLATFORM__PROJECT or --set platform.project=PROJECT"
        )
    return config.platform, host, namespace


def _change_schedule(action, target, name, config_file, profile, sets, host, namespace):
    from pipelines.schedule import ScheduleError, change_kfp_recurring_run, change_vertex_schedule

    platform, host, namespace = _managed_target(target, config_file, profile, sets, host, namespace)
    try:
        if target == "vertex":
            with doing(f"{action} {name}"):
                change_vertex_schedule(action, platform, name, echo=click.echo)
        else:
            from pipelines.submit import kfp_client

            with doing(f"{action} {name} at {host}"):
                change_kfp_recurring_run(action, kfp_client(host, namespace), name, namespace, echo=click.echo)
    except ScheduleError as e:
        _fail(str(e))


@schedule.command("pause")
@click.argument("name")
@schedule_target_options
def schedule_pause(name, **options):
    """Pause the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    _change_schedule("pause", name=name, **options)


@schedule.command("resume")
@click.argument("name")
@schedule_target_options
def schedule_resume(name, **options):
    """Resume the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    _change_schedule("resume", name=name, **options)


@schedule.command("delete")
@click.argument("name")
@schedule_target_options
def schedule_delete(name, **options):
    """Delete the schedule(s) with display name NAME (or the resource name / recurring run id NAME)."""
    _change_schedule("delete", name=name, **options)


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

    from pipelines.publish import PublishError, check_registry, publish_template
    from pipelines.templates import TemplateError, check_tag

    config = _load(config_file, profile, sets)
    _refuse_examples(config, config.cloud_fields(target, pipeline, compiling=not template, registry=not registry))
    try:
        registry = check_registry(registry or config.platform.template_registry)
        for tag in tags:
            check_tag(tag)
    except (PublishError, TemplateError) as e:
        _fail(str(e))
    with tempfile.TemporaryDirectory(prefix="tfpipe-publish-") as workdir:
        chosen = _Template(target, pipeline, config, template, None, None, workdir)
        with doing(f"uploading to {registry}"):
            package, version = publish_template(registry, chosen.path, tags)
    click.echo(f"published {package} {version} ({chosen.source}) with tag(s) {', '.join(tags)}")
    for tag in tags:
        click.echo(f"  {registry}/{package}/{tag}")
