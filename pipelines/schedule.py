"""Recurring runs: Vertex AI pipeline schedules (`aiplatform.PipelineJobSchedule`) and Kubeflow Pipelines
recurring runs (`kfp.Client`), identified by display name.

Replacing: a schedule created with the display name of existing ones replaces them. aiplatform's
`PipelineJobSchedule.update()` can change only the timing fields (cron, start/end time, run counts, queueing),
not the pipeline spec, parameters, service account or network of the scheduled request, so a replacement is
*create the new schedule, then delete the old ones*: there is never a moment without a schedule, and a failed
creation leaves the old schedule untouched. (Between the two calls both exist; a run due in that instant could
start twice.) Kubeflow recurring runs cannot be updated through `kfp.Client` at all: same approach.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from pipelines.config import Platform, ScheduleSettings
from pipelines.cron import Cron
from pipelines.submit import quiet_aiplatform

_DONE = {"pause": "paused", "resume": "resumed", "delete": "deleted"}


class ScheduleError(ValueError):
    """A schedule operation cannot go ahead (user-facing message)."""


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule as `schedule list` shows it."""

    display_name: str
    state: str
    cron: str
    next_run: str  # "" when unknown
    name: str  # the resource name (Vertex) or recurring run id (Kubeflow)


def schedule_console_url(project: str, location: str, schedule_id: str) -> str:
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/schedules/{schedule_id}"
        f"?project={project}"
    )


# --- Vertex AI ---------------------------------------------------------------------------------------------------


def vertex_schedules(platform: Platform, display_name: str | None = None, credentials=None) -> list:
    """The schedules of the project and location (`display_name`: only those named so), oldest first. ListSchedules
    is repeated on transient errors (aiplatform repeats its Get calls itself, not its lists)."""
    from google.cloud import aiplatform

    from components.lib.vertex.registry import display_name_filter
    from core.retries import policy

    with quiet_aiplatform():
        found = policy()(aiplatform.PipelineJobSchedule.list)(
            filter=display_name_filter(display_name) if display_name else None,
            project=platform.project,
            location=platform.location,
            credentials=credentials,
        )
    if display_name:
        found = [s for s in found if s.display_name == display_name]
    return sorted(
        found,
        key=lambda s: (s.gca_resource.create_time.timestamp() if s.gca_resource.create_time else 0, s.resource_name),
    )


def replace_vertex_schedule(
    job,
    platform: Platform,
    cron: Cron,
    settings: ScheduleSettings,
    display_name: str,
    credentials=None,
    echo: Callable[[str], None] = print,
):
    """Create a schedule of `job` (an unsubmitted `aiplatform.PipelineJob`) named `display_name`, then delete the
    schedules that had that name; return the new schedule."""
    existing = vertex_schedules(platform, display_name, credentials)
    with quiet_aiplatform():
        created = job.create_schedule(
            cron=str(cron),
            display_name=display_name,
            start_time=settings.start_time or None,
            end_time=settings.end_time or None,
            allow_queueing=settings.allow_queueing,
            max_run_count=settings.max_run_count,
            max_concurrent_run_count=settings.max_concurrent_runs,
            service_account=platform.service_account or None,
            network=platform.network or None,
        )
    echo(f"created schedule {display_name!r}: {created.resource_name}")

    def delete(old):
        with quiet_aiplatform():
            old.delete()  # DeleteSchedule, waits for the operation

    _delete_replaced(
        existing,
        delete,
        lambda old: old.resource_name,
        created.resource_name,
        "schedule",
        "RESOURCE_NAME --target vertex",
        echo,
    )
    return created


def _named(platform: Platform, name: str, credentials) -> list:
    """The schedules a command names: a resource name (projects/.../schedules/ID) or every one with that display
    name."""
    from google.cloud import aiplatform

    if name.startswith("projects/") and "/schedules/" in name:
        with quiet_aiplatform():
            return [
                aiplatform.PipelineJobSchedule.get(
                    name, project=platform.project, location=platform.location, credentials=credentials
                )
            ]
    found = vertex_schedules(platform, name, credentials)
    if not found:
        raise ScheduleError(f"no schedule named {name!r} in projects/{platform.project}/locations/{platform.location}")
    return found


def change_vertex_schedule(
    action: str, platform: Platform, name: str, credentials=None, echo: Callable[[str], None] = print
) -> list:
    """`pause`, `resume` or `delete` the schedules `name` designates; return them."""
    if action not in ("pause", "resume", "delete"):
        raise ValueError(f"unknown action {action!r}")
    schedules = _named(platform, name, credentials)
    for schedule in schedules:
        with quiet_aiplatform():
            getattr(schedule, action)()
        echo(f"{_DONE[action]} schedule {schedule.display_name!r}: {schedule.resource_name}")
    return schedules


def describe_vertex(schedule) -> ScheduleRow:
    s = schedule.gca_resource
    return ScheduleRow(
        display_name=s.display_name,
        state=s.state.name,
        cron=s.cron,
        next_run=s.next_run_time.isoformat() if s.next_run_time else "",
        name=s.name,
    )


# --- Kubeflow Pipelines ------------------------------------------------------------------------------------------


def kfp_cron(cron: Cron) -> str:
    """KFP's cron format has a leading seconds field (`0 0 3 * * 1`) and no time zone prefix: the scheduled
    workflow controller evaluates it in its own time zone."""
    if cron.zone:
        raise ScheduleError(
            f"Kubeflow recurring runs take no time zone prefix ({cron.prefix}={cron.zone}): KFP "
            "evaluates cron in its scheduled-workflow controller's time zone; give the times in it"
        )
    return f"0 {cron.fields}"


def kfp_recurring_runs(client, display_name: str | None = None, namespace: str = "") -> list:
    """The recurring runs (`display_name`: only those named so), following every page."""
    query = {}
    if display_name:
        query["filter"] = json.dumps(
            {"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": display_name}]}
        )
    found: list = []
    token = ""
    while True:
        page = client.list_recurring_runs(page_token=token, page_size=100, namespace=namespace or None, **query)
        found += page.recurring_runs or []
        token = page.next_page_token or ""
        if not token:
            break
    return [r for r in found if display_name is None or r.display_name == display_name]


def replace_kfp_recurring_run(
    client,
    template_path: str,
    params: dict,
    platform: Platform,
    cron: Cron,
    settings: ScheduleSettings,
    display_name: str,
    experiment: str,
    namespace: str = "",
    enable_caching: bool | None = None,
    echo: Callable[[str], None] = print,
):
    """Create a recurring run named `display_name` of the compiled file, then delete the ones that had that name;
    return the new recurring run."""
    expression = kfp_cron(cron)
    existing = kfp_recurring_runs(client, display_name, namespace)
    experiment_id = client.create_experiment(name=experiment, namespace=namespace or None).experiment_id
    created = client.create_recurring_run(
        experiment_id=experiment_id,
        job_name=display_name,
        cron_expression=expression,
        max_concurrency=settings.max_concurrent_runs,
        no_catchup=True,
        params=params,
        pipeline_package_path=template_path,
        enabled=True,
        start_time=settings.start_time or None,
        end_time=settings.end_time or None,
        pipeline_root=platform.pipeline_root or None,
        enable_caching=enable_caching,
        service_account=platform.kfp_service_account or None,
    )
    echo(f"created recurring run {display_name!r}: {created.recurring_run_id}")
    _delete_replaced(
        existing,
        lambda old: client.delete_recurring_run(old.recurring_run_id),
        lambda old: old.recurring_run_id,
        created.recurring_run_id,
        "recurring run",
        "RECURRING_RUN_ID --target kubeflow",
        echo,
    )
    return created


def change_kfp_recurring_run(
    action: str, client, name: str, namespace: str = "", echo: Callable[[str], None] = print
) -> list:
    """`pause` (disable), `resume` (enable) or `delete` the recurring runs named `name` (or with that id)."""
    method = {"pause": "disable_recurring_run", "resume": "enable_recurring_run", "delete": "delete_recurring_run"}[
        action
    ]
    runs = kfp_recurring_runs(client, name, namespace)
    if not runs:
        runs = [r for r in kfp_recurring_runs(client, None, namespace) if r.recurring_run_id == name]
    if not runs:
        raise ScheduleError(f"no recurring run named {name!r}")
    for run in runs:
        getattr(client, method)(run.recurring_run_id)
        echo(f"{_DONE[action]} recurring run {run.display_name!r}: {run.recurring_run_id}")
    return runs


def describe_kfp(run) -> ScheduleRow:
    trigger = run.trigger.cron_schedule.cron if run.trigger and run.trigger.cron_schedule else ""
    return ScheduleRow(
        display_name=run.display_name,
        state=str(run.status or run.mode or ""),
        cron=trigger,
        next_run="",
        name=run.recurring_run_id,
    )


def _delete_replaced(existing, delete, name_of, created: str, kind: str, delete_args: str, echo) -> None:
    """Delete what a new schedule replaces (after it exists: never a gap); name every leftover, then fail."""
    failed = []
    for old in existing:
        try:
            delete(old)
            echo(f"deleted the {kind} it replaces: {name_of(old)}")
        except Exception as e:  # noqa: BLE001 (report every leftover, then fail)
            failed.append(f"{name_of(old)} ({str(e).strip().splitlines()[0]})")
    if failed:
        raise ScheduleError(
            f"created {created} but could not delete the {kind}(s) it replaces: "
            f"{'; '.join(failed)}; delete them with: python -m pipelines schedule delete {delete_args}"
        )
