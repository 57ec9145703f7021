"""Submit a compiled pipeline: a Vertex AI `PipelineJob` (google-cloud-aiplatform) or a run on a Kubeflow
Pipelines deployment (`kfp.Client`), and follow it until it ends.

Everything that can be checked locally (the platform settings a submission needs, the run's parameters against the
template's inputs) is checked by the callers before any of these functions talks to an API.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable

from pipelines.config import Platform

# Vertex AI PipelineState names: the run has ended
VERTEX_DONE = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED", "PIPELINE_STATE_PAUSED"}
# KFP v2beta1 RuntimeState values: the run has ended
KFP_DONE = {"SUCCEEDED", "SKIPPED", "FAILED", "CANCELED"}


class SubmitError(ValueError):
    """The submission cannot go ahead (user-facing message)."""


def check_vertex(platform: Platform, running: bool = True) -> None:
    """What a call to Vertex AI needs from the platform settings (`running`: a run or schedule, which also needs
    the pipeline root)."""
    if not platform.project:
        raise SubmitError(
            "platform.project is required on Vertex AI: set it in the config (profile), "
            "TFPIPE_PLATFORM__PROJECT or --set platform.project=PROJECT"
        )
    if running and not platform.pipeline_root.startswith("gs://"):
        raise SubmitError(
            f"platform.pipeline_root must be a gs:// URI on Vertex AI (gs://BUCKET/pipeline-root), "
            f"got {platform.pipeline_root!r}"
        )


def console_url(project: str, location: str, job_id: str) -> str:
    return f"https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/runs/{job_id}?project={project}"


@contextlib.contextmanager
def quiet_aiplatform():
    """aiplatform logs every call at INFO on stdout, each module on its own logger, and the errors it passes over
    (its check of the pipeline root's bucket) with their traceback; the CLI prints what matters itself."""
    names = ["google.cloud.aiplatform"]
    names += [n for n in logging.root.manager.loggerDict if n.startswith("google.cloud.aiplatform.")]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def vertex_job(
    template: str,
    platform: Platform,
    params: dict,
    display_name: str,
    enable_caching: bool | None = None,
    credentials=None,
):
    """An `aiplatform.PipelineJob` for `template` (a compiled file or a registry URL), with the platform's pipeline
    root, labels, project and location (no API call yet)."""
    from google.cloud import aiplatform

    with quiet_aiplatform():
        return aiplatform.PipelineJob(
            display_name=display_name,
            template_path=template,
            pipeline_root=platform.pipeline_root,
            parameter_values=params,
            enable_caching=enable_caching,
            labels=dict(platform.labels) or None,
            encryption_spec_key_name=platform.encryption_spec_key_name or None,
            project=platform.project,
            location=platform.location,
            credentials=credentials,
        )


def submit_vertex(job, platform: Platform, experiment: str = "") -> str:
    """Create the pipeline job (service account and network from the platform) and, with `experiment`, add it to
    that Vertex AI Experiment (created when missing); return its console URL."""
    with quiet_aiplatform():
        job.submit(
            service_account=platform.service_account or None,
            network=platform.network or None,
            experiment=experiment or None,
        )
    return console_url(platform.project, platform.location, job.resource_name.rsplit("/", 1)[-1])


def wait_vertex(job, poll_seconds: float = 30.0, echo: Callable[[str], None] = print) -> tuple[str, str]:
    """Poll the job until it ends; return its final state name and error message ("" when none)."""
    last = None
    while True:
        with quiet_aiplatform():
            state = job.state.name  # GetPipelineJob
        if state != last:
            echo(f"{time.strftime('%H:%M:%S')} {state}")
            last = state
        if state in VERTEX_DONE:
            error = job.gca_resource.error
            return state, error.message if error and error.message else ""
        time.sleep(poll_seconds)


def kfp_client(host: str, namespace: str = ""):
    """A `kfp.Client` for the Kubeflow Pipelines API at `host` (authentication: kfp's own environment variables,
    e.g. KF_PIPELINES_IAP_OAUTH2_CLIENT_ID, or none)."""
    import kfp

    class Client(kfp.Client):
        def get_kfp_healthz(self, sleep_duration=5):
            """One try: a host that answers the health check with an error says so at once (kfp.Client tries 5
            times in 25 s, logging each traceback)."""
            return self._healthz_api.healthz_service_get_healthz()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2 and later"
        return Client(host=host, namespace=namespace or "kubeflow")


def submit_kubeflow(
    client,
    template_path: str,
    params: dict,
    run_name: str,
    platform: Platform,
    experiment: str,
    namespace: str = "",
    enable_caching: bool | None = None,
) -> str:
    """Create a run of the compiled file in `experiment` (created when missing); return the run id."""
    result = client.create_run_from_pipeline_package(
        pipeline_file=template_path,
        arguments=params,
        run_name=run_name,
        experiment_name=experiment,
        namespace=namespace or None,
        pipeline_root=platform.pipeline_root or None,
        enable_caching=enable_caching,
        service_account=platform.kfp_service_account or None,
    )
    return result.run_id


def wait_kubeflow(
    client, run_id: str, poll_seconds: float = 30.0, echo: Callable[[str], None] = print
) -> tuple[str, str]:
    """Poll the run until it ends; return its final state and error message ("" when none)."""
    last = None
    while True:
        run = client.get_run(run_id)
        state = str(run.state or "PENDING")
        if state != last:
            echo(f"{time.strftime('%H:%M:%S')} {state}")
            last = state
        if state in KFP_DONE:
            return state, (run.error.message if run.error and run.error.message else "")
        time.sleep(poll_seconds)
