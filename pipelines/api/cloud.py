"""The API's verbs on the clouds: submit and schedule runs on Vertex AI or Kubeflow Pipelines, manage the schedules,
publish templates, and move a Vertex AI endpoint's traffic (promote, rollback) or take it down (undeploy,
delete_endpoint). Each checks what it can before any API call, and looks up the credentials it needs first."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.api._common import Log, config_of, logger, public, raising
from pipelines.api.local import Params, check_target, param_strings, refuse_examples
from pipelines.api.results import Published, Scheduled, SubmittedRun
from pipelines.config import Config, ConfigError, Platform
from pipelines.delivery.base import Connection, Delivery, DeliveryError, Run, Schedules, Template
from pipelines.errors import CloudError, MissingArgument

if TYPE_CHECKING:
    from components.lib.vertex.rollout import Deletion, Promotion, Removal, Rollback


class PreflightError(CloudError):
    """The pre-flight checks found problems that would fail the run; `problems`: one line each."""

    def __init__(self, problems: list[str], skipped: bool):
        hint = "" if skipped else " (fix these, or pass skip_checks=True to create the run anyway)"
        super().__init__("; ".join(problems) + hint)
        self.problems = problems
        self.skipped = skipped


def _delivery(target: str) -> Delivery:
    from pipelines.delivery import delivery_for

    check_target(target)
    return delivery_for(target)


def _only_kubeflow(delivery: Delivery, **given: Any) -> None:
    """ConfigError naming the arguments given (true values of `given`) unless the target takes the KFP API's."""
    names = [k for k, v in given.items() if v]
    if names and not delivery.kfp_options:
        raise ConfigError("only with target kubeflow", ", ".join(names))


def check_names(target: str, **given: str | None) -> None:
    """The run_name, display_name and experiment given (None: not given), by the rules of where they go on
    `target` (core/names.py); ConfigError naming the first that breaks them."""
    from core import names

    delivery = _delivery(target)
    for argument, value in given.items():
        if value is None:
            continue
        try:
            if argument == "experiment":
                delivery.check_experiment(value, argument)
            else:
                names.display_name(value, argument)
        except names.InvalidName as e:
            raise ConfigError(e.detail, argument) from None


def _connect(delivery, config, pipeline, template, template_tag, registry, host, namespace) -> Connection:
    """Settings a run or schedule needs, checked before any API call (example values first); where the calls go."""
    if template and template_tag:
        raise ConfigError("give one of them", "template, template_tag")
    if registry and not template_tag:
        raise ConfigError("only with template_tag", "registry")
    fields = config.cloud_fields(
        delivery.target,
        pipeline,
        compiling=not (template or template_tag),
        running=True,
        registry=bool(template_tag and not registry),
    )
    refuse_examples(config, [f for f in fields if not (host and f == "platform.kfp_host")])
    with raising(ConfigError, DeliveryError):
        return delivery.connect(config.platform, host, namespace, running=True)


@contextlib.contextmanager
def _prepared(
    delivery: Delivery,
    config: Config,
    pipeline: str,
    sources: tuple[str | Path | None, str | None, str | None],
    params: Params | None,
    caching: bool | None,
    skip_checks: bool,
    log: Log,
) -> Iterator[Run]:
    """The run to send: the template (`sources`: file, tag, registry; else compiled now), the parameter values
    checked against it, after the pre-flight checks; its files live until the block ends."""
    from pipelines.templates import TemplateError, parse_params

    file, tag, registry = sources
    with tempfile.TemporaryDirectory(prefix="tfpipe-") as workdir:
        with raising(ConfigError, TemplateError):
            chosen = delivery.template(pipeline, config, workdir, str(file) if file else None, tag, registry)
            values = parse_params(param_strings(params), chosen.spec)
        checked = delivery.preflight(config.platform, chosen, skip_checks, log, workdir)
        if checked.problems:
            raise PreflightError(checked.problems, skip_checks)
        yield Run(checked.template, values, config.platform.enable_caching if caching is None else caching)


@public
def submit(
    target: str,
    config: Config | str | Path | None,
    params: Params | None = None,
    *,
    wait: bool = False,
    pipeline: str = "training",
    template: str | Path | None = None,
    template_tag: str | None = None,
    registry: str | None = None,
    run_name: str | None = None,
    experiment: str | None = None,
    caching: bool | None = None,
    skip_checks: bool = False,
    host: str | None = None,
    namespace: str | None = None,
    poll_seconds: float = 30.0,
    log: Log | None = None,
) -> SubmittedRun:
    """Create one run of `pipeline` on `target` (vertex: a Vertex AI PipelineJob; kubeflow: a KFP run) from a fresh
    compile, a compiled `template` file or the published `template_tag` (of `registry`, else
    platform.template_registry), with `params` (a mapping or `NAME=VALUE` strings) checked against the template
    before anything is sent; the run's handle. `caching`: None keeps the compiled settings. On Vertex the
    pre-flight checks run first (PreflightError) unless `skip_checks`. `wait`: follow the run until it ends
    (CloudError unless it succeeded). CredentialsError without usable Google Cloud credentials (Vertex)."""
    delivery, config, log = _delivery(target), config_of(config), log or logger
    _only_kubeflow(delivery, host=host, namespace=namespace)
    check_names(target, run_name=run_name, experiment=experiment)
    connection = _connect(delivery, config, pipeline, template, template_tag, registry, host, namespace)
    with _prepared(
        delivery, config, pipeline, (template, template_tag, registry), params, caching, skip_checks, log
    ) as run:
        with raising(CloudError, DeliveryError):
            created = delivery.submit(connection, run, run_name, experiment, log)
    handle = SubmittedRun(created.name, created.url, lambda: created.state, _raising_wait(created.wait))
    if wait:
        handle.wait(poll_seconds, log)
    return handle


def _raising_wait(wait: Callable[[float, Log], None]) -> Callable[[float, Log], None]:
    def follow(poll_seconds: float, log: Log) -> None:
        with raising(CloudError, DeliveryError):
            wait(poll_seconds, log)

    return follow


@public
def schedule(
    target: str,
    config: Config | str | Path | None,
    cron: str | None = None,
    params: Params | None = None,
    *,
    display_name: str | None = None,
    pipeline: str = "training",
    template: str | Path | None = None,
    template_tag: str | None = None,
    registry: str | None = None,
    experiment: str | None = None,
    caching: bool | None = None,
    skip_checks: bool = False,
    host: str | None = None,
    namespace: str | None = None,
    log: Log | None = None,
) -> Scheduled:
    """Create (or replace: same display name) a recurring run of `pipeline` on `target` (a Vertex AI schedule or a
    Kubeflow recurring run) on `cron` (e.g. "TZ=Europe/Paris 0 3 * * 1"; None: platform.schedule.cron), named
    `display_name` (else platform.schedule.display_name, else the pipeline's name). The cron expression and the
    parameters are checked before any API call; the rest as `submit`."""
    from pipelines.cron import parse_cron

    delivery, config, log = _delivery(target), config_of(config), log or logger
    _only_kubeflow(delivery, host=host, namespace=namespace, experiment=experiment)
    check_names(target, experiment=experiment, display_name=display_name)
    settings = config.platform.schedule
    connection = _connect(delivery, config, pipeline, template, template_tag, registry, host, namespace)
    text = cron or settings.cron
    if not text:
        raise MissingArgument("cron", "platform.schedule.cron", '"TZ=Europe/Paris 0 3 * * 1"')
    try:
        parsed = parse_cron(text)
        delivery.check_cron(parsed)
    except ValueError as e:  # DeliveryError included
        raise ConfigError(str(e), "cron") from None
    sources = (template, template_tag, registry)
    with _prepared(delivery, config, pipeline, sources, params, caching, skip_checks, log) as run:
        name = display_name or settings.display_name or run.template.name
        with raising(CloudError, DeliveryError):
            delivery.schedule(connection, run, parsed, name, experiment, log)
    runs = [t.strftime("%Y-%m-%d %H:%M") for t in parsed.next_runs(3)]
    return Scheduled(name, run.template.name, run.template.source, parsed, runs, delivery.time_zone(parsed))


def _managed(target, config, host, namespace) -> tuple[Delivery, Connection]:
    """The delivery of list, pause, resume and delete, and where their calls go, checked before any API call."""
    delivery, config = _delivery(target), config_of(config)
    _only_kubeflow(delivery, host=host, namespace=namespace)
    refuse_examples(config, [f for f in delivery.schedule_fields if not (host and f == "platform.kfp_host")])
    with raising(ConfigError, DeliveryError):
        return delivery, delivery.connect(config.platform, host, namespace, running=False)


@public
def list_schedules(
    target: str, config: Config | str | Path | None, *, host: str | None = None, namespace: str | None = None
) -> Schedules:
    """The schedules of `target` (Vertex: of the project and location; kubeflow: the recurring runs)."""
    delivery, connection = _managed(target, config, host, namespace)
    return delivery.list_schedules(connection)


def _change(action: str, target, name, config, host, namespace, log) -> None:
    delivery, connection = _managed(target, config, host, namespace)
    with raising(CloudError, DeliveryError):
        getattr(delivery, action)(connection, name, log or logger)


@public
def pause(
    target: str,
    name: str,
    config: Config | str | Path | None,
    *,
    host: str | None = None,
    namespace: str | None = None,
    log: Log | None = None,
) -> None:
    """Pause the schedule(s) with display name `name` (or the resource name / recurring run id `name`)."""
    _change("pause", target, name, config, host, namespace, log)


@public
def resume(
    target: str,
    name: str,
    config: Config | str | Path | None,
    *,
    host: str | None = None,
    namespace: str | None = None,
    log: Log | None = None,
) -> None:
    """Resume the schedule(s) with display name `name` (or the resource name / recurring run id `name`)."""
    _change("resume", target, name, config, host, namespace, log)


@public
def delete(
    target: str,
    name: str,
    config: Config | str | Path | None,
    *,
    host: str | None = None,
    namespace: str | None = None,
    log: Log | None = None,
) -> None:
    """Delete the schedule(s) with display name `name` (or the resource name / recurring run id `name`)."""
    _change("delete", target, name, config, host, namespace, log)


@public
def publish(
    config: Config | str | Path | None,
    tags: Sequence[str],
    *,
    registry: str | None = None,
    target: str = "vertex",
    pipeline: str = "training",
    template: str | Path | None = None,
) -> Published:
    """Upload `template` (else `pipeline` compiled now for `target`) to the KFP template registry `registry` (else
    platform.template_registry) with `tags`; submit and schedule run it with template_tag=TAG."""
    from pipelines.credentials import application_default, on_artifact_registry
    from pipelines.preflight import tag_warning
    from pipelines.publish import PublishError, check_registry
    from pipelines.templates import TemplateError, check_tag

    delivery, config = _delivery(target), config_of(config)
    refuse_examples(config, config.cloud_fields(target, pipeline, compiling=not template, registry=not registry))
    with raising(ConfigError, PublishError, TemplateError):
        registry = check_registry(registry or config.platform.template_registry)
        if not tags:
            raise ConfigError("at least one is required", "tags")
        for tag in tags:
            check_tag(tag)
    if on_artifact_registry(registry):  # before the compile: without credentials, the one line at once
        application_default()
    with tempfile.TemporaryDirectory(prefix="tfpipe-publish-") as workdir:
        with raising(ConfigError, TemplateError):
            chosen: Template = delivery.template(
                pipeline, config, workdir, str(template) if template else None, None, None
            )
        package, version = delivery.publish(registry, chosen, tags)
    warning = (tag_warning(chosen.spec) or None) if delivery.target == "vertex" else None
    urls = [f"{registry}/{package}/{tag}" for tag in tags]
    return Published(package, version, chosen.source, list(tags), urls, warning)


# --- a Vertex AI endpoint ------------------------------------------------------------------------------------------


def _endpoint_name(platform: Platform, endpoint: str | None) -> str:
    from components.lib.vertex.registry import find_resource

    if not platform.project:
        raise ConfigError(
            "platform.project is required on Vertex AI: set it in the config (profile), TFPIPE_PLATFORM__PROJECT "
            "or --set platform.project=PROJECT"
        )
    if endpoint and endpoint.startswith("projects/"):
        return endpoint
    display_name = endpoint or platform.endpoint_display_name
    name = find_resource("endpoint", display_name, platform.project, platform.location)
    if not name:
        raise CloudError(
            f"no endpoint named {display_name!r} in projects/{platform.project}/locations/{platform.location}"
        )
    return name


def _on_endpoint(action: Callable[..., Any], platform, endpoint, rehearsal_state, log, **arguments) -> Any:
    """`action` on the endpoint (on a rehearsal's, kept in `rehearsal_state`, when given)."""
    from components.lib.vertex.rollout import RolloutError
    from pipelines.actions import doing

    api: contextlib.AbstractContextManager = contextlib.nullcontext()
    if rehearsal_state:
        from pipelines.rehearsal.run import PROJECT, rehearsal_api, state_location

        state = Path(rehearsal_state).resolve()
        platform = platform.model_copy(update={"project": PROJECT, "location": state_location(state)})
        api = rehearsal_api(state, platform.location, log=log)
    with api, doing(f"{action.__name__} on Vertex AI"), raising(CloudError, RolloutError):
        return action(_endpoint_name(platform, endpoint), echo=log, **arguments)


@public
def promote(
    config: Config | str | Path | None,
    endpoint: str | None = None,
    *,
    deployed_model_id: str = "",
    keep_previous: int | None = None,
    rehearsal_state: str | Path | None = None,
    log: Log | None = None,
) -> Promotion:
    """Give the endpoint's canary (`deployed_model_id`, else the most recently deployed) all its traffic, undeploy
    the other models but `keep_previous` (None: platform.keep_previous) and move the champion alias to its
    version; the Promotion. `endpoint`: display or resource name (None: platform.endpoint_display_name);
    `rehearsal_state`: act on a rehearsal's endpoint instead of Vertex AI's."""
    from components.lib.vertex.rollout import promote as promote_canary

    platform = config_of(config).platform
    return _on_endpoint(
        promote_canary,
        platform,
        endpoint,
        rehearsal_state,
        log or logger,
        keep_previous=platform.keep_previous if keep_previous is None else keep_previous,
        deployed_model_id=deployed_model_id,
        aliases=list(platform.model_version_aliases),
    )


@public
def rollback(
    config: Config | str | Path | None,
    endpoint: str | None = None,
    *,
    rehearsal_state: str | Path | None = None,
    log: Log | None = None,
) -> Rollback:
    """Give the previous deployed model all of the endpoint's traffic and undeploy the newest one. Arguments as
    `promote`."""
    from components.lib.vertex.rollout import rollback as roll_back

    platform = config_of(config).platform
    aliases = list(platform.model_version_aliases)
    return _on_endpoint(roll_back, platform, endpoint, rehearsal_state, log or logger, aliases=aliases)


@public
def undeploy(
    config: Config | str | Path | None,
    deployed_model_id: str,
    endpoint: str | None = None,
    *,
    force: bool = False,
    rehearsal_state: str | Path | None = None,
    log: Log | None = None,
) -> Removal:
    """Take `deployed_model_id` off the endpoint, its traffic shared by the others in proportion; the only model
    serving traffic stays unless `force`. Arguments as `promote`."""
    from components.lib.vertex.rollout import undeploy_model

    platform = config_of(config).platform
    return _on_endpoint(
        undeploy_model,
        platform,
        endpoint,
        rehearsal_state,
        log or logger,
        deployed_model_id=deployed_model_id,
        force=force,
    )


@public
def delete_endpoint(
    config: Config | str | Path | None,
    endpoint: str | None = None,
    *,
    force: bool = False,
    rehearsal_state: str | Path | None = None,
    log: Log | None = None,
) -> Deletion:
    """Undeploy every model of the endpoint, then delete it; an endpoint serving traffic stays unless `force`.
    Arguments as `promote`."""
    from components.lib.vertex.rollout import delete_endpoint as delete_it

    platform = config_of(config).platform
    return _on_endpoint(delete_it, platform, endpoint, rehearsal_state, log or logger, force=force)
