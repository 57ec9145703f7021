"""Delivery on Vertex AI: a run is a `PipelineJob` (after the pre-flight checks), a recurring run a
`PipelineJobSchedule` of the project and location (pipelines/submit.py, pipelines/schedule.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from core import names
from pipelines.actions import doing
from pipelines.config import Platform
from pipelines.cron import Cron
from pipelines.delivery.base import (
    BaseDelivery,
    Checked,
    Connection,
    DeliveryError,
    Echo,
    Run,
    Schedules,
    Submitted,
    Template,
)
from pipelines.schedule import ScheduleError
from pipelines.submit import SubmitError, check_vertex


class VertexRun:
    """A `PipelineJob` just created."""

    def __init__(self, job: Any, url: str):
        self.job = job
        self.url = url

    @property
    def name(self) -> str:
        return self.job.resource_name

    @property
    def state(self) -> str:
        from pipelines.submit import quiet_aiplatform

        with doing("reading the pipeline job"), quiet_aiplatform():
            return self.job.state.name  # GetPipelineJob

    def wait(self, poll_seconds: float, echo: Echo) -> None:
        from pipelines.submit import wait_vertex

        with doing("reading the pipeline job"):
            state, error = wait_vertex(self.job, poll_seconds, echo)
        if state != "PIPELINE_STATE_SUCCEEDED":
            raise DeliveryError(f"the run ended {state}" + (f": {error}" if error else "") + f" ({self.url})")


class VertexDelivery(BaseDelivery):
    """Vertex AI Pipelines: runs, schedules, experiments (Vertex AI Experiments) of the configured project."""

    target = "vertex"
    kfp_options = False
    schedule_fields = ("platform.project",)

    def check_experiment(self, experiment: str, what: str) -> None:
        names.vertex_experiment(experiment, what)

    def connect(self, platform: Platform, host: str | None, namespace: str | None, running: bool) -> Connection:
        """The project (and to run: a gs:// pipeline root) is required, and the caller's credentials: looked up
        here, before anything is compiled or sent."""
        from pipelines.credentials import application_default

        try:
            check_vertex(platform, running)
        except SubmitError as e:
            raise DeliveryError(str(e)) from None
        application_default()
        return Connection(platform)

    def preflight(self, platform: Platform, template: Template, skip: bool, echo: Echo, workdir: str) -> Checked:
        """The pre-flight checks of a Vertex run (pipelines/preflight.py) unless `skip`, and in any case the
        template's tagged images pinned by digest (Vertex's cache keys on the image string, not its content): the
        pinned template is written in `workdir`, each digest named by `echo`."""
        from pipelines.preflight import pin_images, preflight

        if skip:
            echo("pre-flight checks skipped (--skip-checks)")
            action = "pinning the images by digest"
        else:
            action = "the pre-flight checks could not finish (--skip-checks to go on without them)"
        with doing(action):
            found = preflight(platform, template.spec, note=echo, checks=not skip)
        if found.problems:
            return Checked(template, found.problems)
        if not skip:
            echo(
                "pre-flight checks passed: pipeline root writable, images present, service account usable, APIs enabled, "
                "roles granted"
            )
        if not found.pinned:
            return Checked(template, [])
        for image, pinned in found.pinned.items():
            echo(f"image {image} pinned by digest: {pinned.rsplit('@', 1)[1]}")
        spec = pin_images(template.spec, found.pinned)
        path = Path(workdir) / "pinned.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return Checked(Template(str(path), spec, f"{template.source}, images pinned by digest"), [])

    def _job(self, run: Run, platform: Platform, display_name: str) -> Any:
        """The unsubmitted aiplatform.PipelineJob (its own checks: display name, labels, job id)."""
        from pipelines.submit import vertex_job

        if len(display_name) > 128:
            raise DeliveryError(f"display name {display_name[:20]!r}...: at most 128 characters")
        try:
            return vertex_job(run.template.url or run.template.path, platform, run.values, display_name, run.caching)
        except ValueError as e:
            raise DeliveryError(f"aiplatform refused the pipeline job: {e}") from None

    def submit(
        self, connection: Connection, run: Run, name: str | None, experiment: str | None, echo: Echo
    ) -> Submitted:
        """A PipelineJob named `name` (default: the pipeline's), in the Vertex AI Experiment `experiment` (default:
        platform.vertex_experiment, none when empty)."""
        from pipelines.submit import submit_vertex

        platform, template = connection.platform, run.template
        experiment = experiment or platform.vertex_experiment
        job = self._job(run, platform, name or template.name)
        with doing("creating the pipeline job on Vertex AI"):
            url = submit_vertex(job, platform, experiment)
        echo(
            f"submitted {template.name} ({template.source}) to Vertex AI: {job.resource_name}"
            + (f" in experiment {experiment}" if experiment else "")
        )
        echo(f"console: {url}")
        return VertexRun(job, url)

    def check_cron(self, cron: Cron) -> None:
        """Vertex takes every cron expression, with or without a time zone."""

    def time_zone(self, cron: Cron) -> str:
        return cron.zone or "UTC"

    def schedule(
        self, connection: Connection, run: Run, cron: Cron, name: str, experiment: str | None, echo: Echo
    ) -> None:
        """A schedule with platform.schedule's settings (no experiment: a schedule's runs take none)."""
        from pipelines.schedule import replace_vertex_schedule, schedule_console_url

        platform = connection.platform
        job = self._job(run, platform, name)
        try:
            with doing("creating the schedule on Vertex AI"):
                created = replace_vertex_schedule(job, platform, cron, platform.schedule, name, echo=echo)
        except ScheduleError as e:
            raise DeliveryError(str(e)) from None
        schedule_id = created.resource_name.rsplit("/", 1)[-1]
        echo(f"console: {schedule_console_url(platform.project, platform.location, schedule_id)}")

    def list_schedules(self, connection: Connection) -> Schedules:
        """The schedules of the project and location."""
        from pipelines.schedule import describe_vertex, vertex_schedules

        platform = connection.platform
        with doing("listing the schedules"):
            rows = [describe_vertex(s) for s in vertex_schedules(platform)]
        return Schedules(f"projects/{platform.project}/locations/{platform.location}", rows)

    def _change(self, action: str, connection: Connection, name: str, echo: Echo) -> None:
        from pipelines.schedule import change_vertex_schedule

        try:
            with doing(f"{action} {name}"):
                change_vertex_schedule(action, connection.platform, name, echo=echo)
        except ScheduleError as e:
            raise DeliveryError(str(e)) from None
