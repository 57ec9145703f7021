"""The delivery's contract, `Delivery`, and what both targets share: compiling a template, resolving the one a
command runs, publishing it to a KFP template registry, and the schedule actions by name."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from pipelines.actions import doing
from pipelines.config import PIPELINES, Config, ConfigError, Platform
from pipelines.cron import Cron
from pipelines.schedule import ScheduleRow
from pipelines.templates import TemplateError, load_template, published_url

Echo = Callable[[str], None]


class DeliveryError(ValueError):
    """A delivery cannot go ahead (user-facing message)."""


@dataclass(frozen=True)
class Template:
    """The template a command runs, resolved before any API call."""

    path: str  # a local file: compiled now, given, or the published one downloaded
    spec: dict[str, Any]
    source: str  # how the output names it: its URL, its file or "TARGET PIPELINE pipeline compiled now"
    url: str = ""  # a published template's URL

    @property
    def name(self) -> str:
        return self.spec["pipelineInfo"]["name"]


@dataclass(frozen=True)
class Checked:
    """The template a run or schedule sends (on Vertex: its tagged images pinned by digest) and the problems that
    would fail the run (one line each; none: it may go)."""

    template: Template
    problems: list[str]


@dataclass(frozen=True)
class Run:
    """What a run or schedule runs: the template, the parameter values checked against it, and caching (None: as
    compiled)."""

    template: Template
    values: dict[str, Any]
    caching: bool | None


@dataclass(frozen=True)
class Connection:
    """Where the calls go: the platform settings and, on Kubeflow, the KFP API endpoint and namespace."""

    platform: Platform
    host: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class Schedules:
    """The schedules `where` (a Vertex AI location or a KFP host) holds."""

    where: str
    rows: list[ScheduleRow]


class Submitted(Protocol):
    """A run just created."""

    url: str  # where to follow it

    @property
    def name(self) -> str:
        """Vertex: the PipelineJob's resource name; Kubeflow: the run id."""
        ...

    @property
    def state(self) -> str:
        """The run's state now, asked of the service."""
        ...

    def wait(self, poll_seconds: float, echo: Echo) -> None:
        """Follow the run until it ends, `echo`ing each new state; DeliveryError unless it succeeded."""
        ...


class Delivery(Protocol):
    """How a target takes the compiled pipelines: templates, runs and recurring runs. Each method checks what it
    can before any API call; its errors carry the line to print (DeliveryError; TemplateError for the template
    itself) and `echo` prints its progress."""

    target: str  # what its templates are compiled for: vertex | kubeflow
    kfp_options: bool  # whether it takes the KFP API's options: --host, --namespace, a recurring run's --experiment
    schedule_fields: tuple[str, ...]  # the config fields that listing and changing schedules sends

    def compile(self, pipeline: str, config: Config, output: str | Path) -> str: ...

    def template(
        self, pipeline: str, config: Config, workdir: str, file: str | None, tag: str | None, registry: str | None
    ) -> Template: ...

    def publish(self, registry: str, template: Template, tags: Sequence[str]) -> tuple[str, str]: ...

    def check_experiment(self, experiment: str, what: str) -> None:
        """core.names.InvalidName unless `experiment` can name this target's experiments."""
        ...

    def connect(self, platform: Platform, host: str | None, namespace: str | None, running: bool) -> Connection:
        """Where the calls go (`running`: for a run or schedule rather than to manage schedules)."""
        ...

    def preflight(self, platform: Platform, template: Template, skip: bool, echo: Echo, workdir: str) -> Checked:
        """The template to send (written in `workdir` when it differs) and the problems that would fail the run,
        checked before it is created (none: none, or nothing to check)."""
        ...

    def submit(
        self, connection: Connection, run: Run, name: str | None, experiment: str | None, echo: Echo
    ) -> Submitted:
        """Create a run (`name`, `experiment`: the target's defaults when None)."""
        ...

    def check_cron(self, cron: Cron) -> None:
        """DeliveryError unless this target can schedule on `cron`."""
        ...

    def time_zone(self, cron: Cron) -> str:
        """The time zone a schedule's times are in, as the output names it."""
        ...

    def schedule(
        self, connection: Connection, run: Run, cron: Cron, name: str, experiment: str | None, echo: Echo
    ) -> None:
        """Create a recurring run named `name`, replacing those with that name."""
        ...

    def list_schedules(self, connection: Connection) -> Schedules: ...

    def pause(self, connection: Connection, name: str, echo: Echo) -> None: ...

    def resume(self, connection: Connection, name: str, echo: Echo) -> None: ...

    def delete(self, connection: Connection, name: str, echo: Echo) -> None: ...


class BaseDelivery(Delivery):
    """What both targets share: the template (compiled for `target`, a file or a published one), publishing, and
    the schedule actions by name (`_change`)."""

    def compile(self, pipeline: str, config: Config, output: str | Path) -> str:
        """Compile `pipeline` for this target into `output`, with the config's parameters (training) or batch
        section (batch prediction) as the pipeline's defaults (`_defaults`: the target's own for those the config
        leaves empty) and its platform (and training: study and trainer) sections baked in; TemplateError when it
        cannot."""
        from kfp import compiler

        if pipeline == "batch_prediction":
            from pipelines.batch_prediction import build_batch_pipeline

            func, defaults = build_batch_pipeline(self.target, config.platform), config.batch.pipeline_arguments()
        elif pipeline == "training":
            from pipelines.training import build_pipeline

            try:
                config.check_target(self.target)  # the names the parameters give on this target
                func = build_pipeline(self.target, config.platform, config.study, config.trainer)
            except ConfigError as e:  # or trainer.model names no function on this Python path
                raise TemplateError(str(e)) from None
            defaults = config.parameters.model_dump()
        else:
            raise TemplateError(f"unknown pipeline {pipeline!r}; use one of: {', '.join(PIPELINES)}")
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        compiler.Compiler().compile(func, str(output), pipeline_parameters=self._defaults(config.platform, defaults))
        return str(output)

    def _defaults(self, platform: Platform, defaults: dict[str, Any]) -> dict[str, Any]:
        """The compiled pipeline's defaults: the config's, here as they are."""
        return defaults

    def template(
        self, pipeline: str, config: Config, workdir: str, file: str | None, tag: str | None, registry: str | None
    ) -> Template:
        """The template a command runs: the published `tag` (from `registry`, else the configured one), the
        compiled `file`, or `pipeline` compiled now in `workdir`; TemplateError when it cannot be had."""
        if tag:
            url = published_url(registry or config.platform.template_registry, pipeline, tag)
            spec = load_template(url, config.platform.project or None)
            downloaded = Path(workdir) / "template.yaml"
            downloaded.write_text(yaml.safe_dump(spec, sort_keys=False))
            return Template(str(downloaded), spec, url, url)
        if file:
            return Template(file, load_template(file), file)
        compiled = self.compile(pipeline, config, Path(workdir) / f"{pipeline}.yaml")
        return Template(compiled, load_template(compiled), f"{self.target} {pipeline} pipeline compiled now")

    def publish(self, registry: str, template: Template, tags: Sequence[str]) -> tuple[str, str]:
        """Upload the template to the KFP template registry with `tags`; return (package, version)."""
        from pipelines.publish import publish_template

        with doing(f"uploading to {registry}"):
            return publish_template(registry, template.path, tags)

    def pause(self, connection: Connection, name: str, echo: Echo) -> None:
        self._change("pause", connection, name, echo)

    def resume(self, connection: Connection, name: str, echo: Echo) -> None:
        self._change("resume", connection, name, echo)

    def delete(self, connection: Connection, name: str, echo: Echo) -> None:
        self._change("delete", connection, name, echo)

    @abstractmethod
    def _change(self, action: str, connection: Connection, name: str, echo: Echo) -> None:
        """`pause`, `resume` or `delete` the schedules `name` designates."""
