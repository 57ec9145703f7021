"""Dataflow, data prep's runner on Vertex AI: the Beam pipeline options of a prep job, from the settings the vertex
target compiles into the step (`platform.data_prep`), checked by Beam's own validator before anything is sent.

The workers run the components image (`sdk_container_image`, Runner v2, `sdk_location=container`): the same
packages as the step, nothing installed at start-up. The job runs as the runs' service account, on their network or
subnetwork, with their CMEK key and labels; its temp and staging locations are beside the dataset artifact, under
the pipeline root.

Beam's Dataflow client creates the job and watches it with retries of its own (server errors, with backoff); a step
whose wait fails otherwise (terminated, or the watch given up) cancels the job it launched, which would run on, and
bill, without it.

The rehearsal sets `RECORD_ENV` to a folder: the step then writes the options it would have sent there
(`dataflow-options.json`), creates the job, without its steps, on the rehearsal's Dataflow API (`API_ENV`;
`create_recorded`), which refuses it as Dataflow would (a disabled API, a missing role), and runs the same pipeline on
the direct runner.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
import time

RECORD_ENV = "TFPIPE_DATAFLOW_RECORD"
RECORD_FILE = "dataflow-options.json"
API_ENV = "TFPIPE_DATAFLOW_API"  # the rehearsal's Dataflow API (its base URL), which the recorded job is created on


class DataflowOptionsError(ValueError):
    """The options Dataflow would refuse (Beam's validator), one per line."""


def job_name(output_dir: str, now: float | None = None) -> str:
    """A Dataflow job name ([-a-z0-9], a letter first): the step's and the dataset's, unique per run."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    digest = hashlib.sha256(output_dir.encode()).hexdigest()[:8]
    return f"tfpipe-prepare-data-{stamp}-{digest}"


def flags(settings: dict, output_dir: str, project: str = "") -> list[str]:
    """Beam's flags for DataflowRunner: `settings` as compiled (region, service_account, network, subnetwork,
    kms_key, labels, machine_type, max_workers, sdk_container_image, temp_location, staging_location, endpoint; "" or
    absent: Dataflow's default), the project (the settings' or the step's own), temp and staging beside `output_dir` when
    the settings give none."""
    base = output_dir.rstrip("/") + "-dataflow"
    values = {
        "runner": "DataflowRunner",
        "project": settings.get("project") or project,
        "region": settings.get("region", ""),
        "job_name": job_name(output_dir),
        "temp_location": settings.get("temp_location") or f"{base}/temp",
        "staging_location": settings.get("staging_location") or f"{base}/staging",
        "service_account_email": settings.get("service_account", ""),
        "network": settings.get("network", ""),
        "subnetwork": settings.get("subnetwork", ""),
        "dataflow_kms_key": settings.get("kms_key", ""),
        "machine_type": settings.get("machine_type", ""),
        # a whole number: a dict parameter's numbers are protobuf doubles, 10.0 where its JSON keeps the fraction
        "max_num_workers": str(int(settings.get("max_workers") or 0) or ""),
        "sdk_container_image": settings.get("sdk_container_image", ""),
        "sdk_location": "container",
        "experiments": "use_runner_v2",
        "dataflow_endpoint": settings.get("endpoint", ""),
    }
    out = [f"--{name}={value}" for name, value in values.items() if value]
    out += [f"--labels={key}={value}" for key, value in sorted((settings.get("labels") or {}).items())]
    return out


def options(settings: dict, output_dir: str, project: str = ""):
    """The PipelineOptions of the job; DataflowOptionsError with every reason Beam's validator gives."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    result = PipelineOptions(flags(settings, output_dir, project))
    errors = PipelineOptionsValidator(result, DataflowRunner()).validate()
    if not settings.get("sdk_container_image"):
        errors.append("sdk_container_image: the workers' image (the components image) is required")
    if errors:
        raise DataflowOptionsError("Dataflow would refuse this job:\n" + "\n".join(errors))
    return result


def step_project() -> str:
    """The project the step runs in: Vertex's CLOUD_ML_PROJECT_ID, else Application Default Credentials'."""
    project = os.environ.get("CLOUD_ML_PROJECT_ID", "")
    if project:
        return project
    try:
        import google.auth

        return google.auth.default()[1] or ""
    except Exception:  # noqa: BLE001 (no credentials: the validator names the missing project)
        return ""


def record(folder: str, sent) -> str:
    """Write the options that would have been sent (the rehearsal); the file's path."""
    path = os.path.join(folder, RECORD_FILE)
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        json.dump(sent.get_all_options(drop_default=True), f, indent=2, sort_keys=True)
    return path


class DataflowRefused(RuntimeError):
    """Dataflow refused the job (its status and message)."""


def create_recorded(sent) -> str:
    """The rehearsal: the job the options `sent` describe (its name, project, region, workers' account, key, temp
    location and labels; no steps) created with Dataflow's `projects.locations.jobs.create` on the Dataflow API at
    `API_ENV` (the Dataflow client's REST transport); its ID ("": no API_ENV, nothing created), else DataflowRefused
    with the API's answer."""
    endpoint = os.environ.get(API_ENV, "")
    if not endpoint:
        return ""
    from apache_beam.options.pipeline_options import GoogleCloudOptions
    from google.api_core import exceptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import dataflow_v1beta3 as dataflow

    cloud = sent.view_as(GoogleCloudOptions)
    client = dataflow.JobsV1Beta3Client(
        credentials=AnonymousCredentials(), transport="rest", client_options={"api_endpoint": endpoint}
    )
    job = dataflow.Job(
        name=cloud.job_name,
        type_=dataflow.JobType.JOB_TYPE_BATCH,
        environment=dataflow.Environment(
            service_account_email=cloud.service_account_email or "",
            service_kms_key_name=cloud.dataflow_kms_key or "",
            temp_storage_prefix=cloud.temp_location or "",
        ),
        labels=dict(label.split("=", 1) for label in cloud.labels or ()),
    )
    request = dataflow.CreateJobRequest(project_id=cloud.project, location=cloud.region, job=job)
    try:
        return client.create_job(request=request).id
    except exceptions.GoogleAPICallError as e:
        try:  # the service's own message, without the URL the client puts first
            message = e.response.json()["error"]["message"]
        except Exception:  # noqa: BLE001 (no JSON answer: the client's message)
            message = e.message
        raise DataflowRefused(f"Dataflow refused the job {cloud.job_name}: {e.code} {message}") from None


class _Launch:
    """The job a step launches, cancelled on SIGTERM (`cancelled_on_termination`)."""

    def __init__(self):
        self.result = None
        self.signum = 0

    def on_signal(self, signum, frame):
        if self.result is None:  # the job is being created: it is cancelled as soon as it exists
            self.signum = signum
            return
        self.cancel(signum)

    def launched(self, result) -> None:
        """The job exists (`Pipeline.run()` returned it); a SIGTERM received while it was created cancels it now."""
        self.result = result
        if self.signum:
            self.cancel(self.signum)

    def abandon(self, error: BaseException) -> None:
        """The step fails while its job has not ended (`error`: its wait gave up): cancel the job; one that cannot
        be cancelled is named for the user to cancel."""
        if self.result is None or self.result.is_in_terminal_state():
            return
        job = self.result.job_id()
        print(f"the step failed ({type(error).__name__}) while its Dataflow job {job} runs: cancelling it", flush=True)
        try:
            self.result.cancel()
        except Exception as e:  # noqa: BLE001 (the step's own error is the one to raise)
            print(f"could not cancel the Dataflow job {job} ({e}): cancel it in the console", flush=True)

    def cancel(self, signum: int):
        print(f"terminated (signal {signum}): cancelling the Dataflow job {self.result.job_id()}", flush=True)
        self.result.cancel()
        raise SystemExit(128 + signum)


@contextlib.contextmanager
def cancelled_on_termination():
    """Around a step's launch of its job and its wait for it: SIGTERM (the run cancelled, or the step's time up)
    cancels the job, which would otherwise run on, and bill, without the step; then the step ends. Yields a
    `_Launch` to give the job to (`launched`) once `Pipeline.run()` returns it: a SIGTERM that comes while the job is
    being created cancels it then. An error while the job runs (its watch given up) cancels it too."""
    launch = _Launch()
    main = threading.current_thread() is threading.main_thread()  # only the main thread takes signals
    previous = signal.signal(signal.SIGTERM, launch.on_signal) if main else None
    try:
        yield launch
    except Exception as e:
        launch.abandon(e)
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
