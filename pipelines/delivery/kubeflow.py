"""Delivery on a Kubeflow Pipelines deployment (`kfp.Client`): a run in an experiment, a recurring run
(pipelines/submit.py, pipelines/schedule.py); the compiled templates default the model repository to the shared
volume."""

from __future__ import annotations

import os
import time
from typing import Any

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


def kubeflow_model_repository(platform: Platform) -> str:
    """The kubeflow target's default model repository: on the shared volume, where every step, the TFJob and
    KServe's storage initializer (`pvc://CLAIM/model-repository/...`) see it."""
    return f"{platform.kubeflow.volume.mount_path}/model-repository"


class KubeflowRun:
    """A KFP run just created."""

    def __init__(self, client: Any, run_id: str, url: str):
        self.client = client
        self.run_id = run_id
        self.url = url

    @property
    def name(self) -> str:
        return self.run_id

    @property
    def state(self) -> str:
        with doing("reading the run"):
            return str(self.client.get_run(self.run_id).state or "PENDING")

    def wait(self, poll_seconds: float, echo: Echo) -> None:
        from pipelines.submit import wait_kubeflow

        with doing("reading the run"):
            state, error = wait_kubeflow(self.client, self.run_id, poll_seconds, echo)
        if state != "SUCCEEDED":
            raise DeliveryError(f"the run ended {state}" + (f": {error}" if error else ""))


class KubeflowDelivery(BaseDelivery):
    """Kubeflow Pipelines at the KFP API endpoint (--host, platform.kfp_host or $KF_PIPELINES_ENDPOINT), in a
    multi-user namespace when given."""

    target = "kubeflow"
    kfp_options = True
    schedule_fields = ("platform.kfp_host",)

    def _defaults(self, platform: Platform, defaults: dict[str, Any]) -> dict[str, Any]:
        """The config's, the model repository on the shared volume when the config leaves it empty."""
        if platform.kubeflow.volume.claim_name and not defaults.get("model_repository"):
            defaults["model_repository"] = kubeflow_model_repository(platform)
        return defaults

    def check_experiment(self, experiment: str, what: str) -> None:
        names.display_name(experiment, what)

    def connect(self, platform: Platform, host: str | None, namespace: str | None, running: bool) -> Connection:
        """The KFP API endpoint is required."""
        host = host or platform.kfp_host or os.environ.get("KF_PIPELINES_ENDPOINT", "")
        if not host:
            raise DeliveryError(
                "--target kubeflow needs the KFP API endpoint: --host URL, platform.kfp_host or $KF_PIPELINES_ENDPOINT"
            )
        return Connection(platform, host.rstrip("/"), namespace or platform.kfp_namespace)

    def preflight(self, platform: Platform, template: Template, skip: bool, echo: Echo, workdir: str) -> Checked:
        """The template as it is: Kubeflow has no pre-flight checks (`skip` does not apply) and runs images by tag."""
        return Checked(template, [])

    def submit(
        self, connection: Connection, run: Run, name: str | None, experiment: str | None, echo: Echo
    ) -> Submitted:
        """A run named `name` (default: the pipeline's name and the time) in the KFP experiment `experiment`
        (default: platform.kfp_experiment; created when missing)."""
        from pipelines.submit import kfp_client, submit_kubeflow

        platform, template, host = connection.platform, run.template, connection.host
        name = name or f"{template.name} {time.strftime('%Y-%m-%d %H-%M-%S')}"
        with doing(f"submitting the run to Kubeflow Pipelines at {host}"):
            client = kfp_client(host, connection.namespace)
            run_id = submit_kubeflow(
                client,
                template.path,
                run.values,
                name,
                platform,
                experiment or platform.kfp_experiment,
                connection.namespace,
                run.caching,
            )
        echo(f"submitted {template.name} ({template.source}) to Kubeflow Pipelines as {name!r}: run {run_id}")
        url = f"{host}/#/runs/details/{run_id}"
        echo(f"run: {url}")
        return KubeflowRun(client, run_id, url)

    def check_cron(self, cron: Cron) -> None:
        """KFP's cron takes no time zone."""
        from pipelines.schedule import kfp_cron

        try:
            kfp_cron(cron)
        except ScheduleError as e:
            raise DeliveryError(str(e)) from None

    def time_zone(self, cron: Cron) -> str:
        return cron.zone or "(the KFP controller's time zone)"

    def schedule(
        self, connection: Connection, run: Run, cron: Cron, name: str, experiment: str | None, echo: Echo
    ) -> None:
        """A recurring run with platform.schedule's settings in the KFP experiment `experiment` (default:
        platform.kfp_experiment)."""
        from pipelines.schedule import replace_kfp_recurring_run
        from pipelines.submit import kfp_client

        platform, host = connection.platform, connection.host
        try:
            with doing(f"creating the recurring run on Kubeflow Pipelines at {host}"):
                client = kfp_client(host, connection.namespace)
                replace_kfp_recurring_run(
                    client,
                    run.template.path,
                    run.values,
                    platform,
                    cron,
                    platform.schedule,
                    name,
                    experiment or platform.kfp_experiment,
                    connection.namespace,
                    run.caching,
                    echo=echo,
                )
        except ScheduleError as e:
            raise DeliveryError(str(e)) from None

    def list_schedules(self, connection: Connection) -> Schedules:
        """The recurring runs (of the namespace, when given)."""
        from pipelines.schedule import describe_kfp, kfp_recurring_runs
        from pipelines.submit import kfp_client

        host, namespace = connection.host, connection.namespace
        with doing(f"listing the recurring runs at {host}"):
            rows = [describe_kfp(r) for r in kfp_recurring_runs(kfp_client(host, namespace), None, namespace)]
        return Schedules(host, rows)

    def _change(self, action: str, connection: Connection, name: str, echo: Echo) -> None:
        from pipelines.schedule import change_kfp_recurring_run
        from pipelines.submit import kfp_client

        host, namespace = connection.host, connection.namespace
        try:
            with doing(f"{action} {name} at {host}"):
                change_kfp_recurring_run(action, kfp_client(host, namespace), name, namespace, echo=echo)
        except ScheduleError as e:
            raise DeliveryError(str(e)) from None
