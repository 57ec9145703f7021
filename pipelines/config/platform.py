"""The platform settings (`platform:`): compile time (images, machines, region) and submission (project, bucket,
identity, network, labels, caching, registry, Kubeflow host, schedule) of the cloud targets."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from components.lib.vertex.registry import SOURCE_COMMIT_LABEL
from core import names
from core.names import NETWORK_ATTACHMENT, PERSISTENT_RESOURCE, PERSISTENT_RESOURCE_ID
from pipelines.config.accelerators import accelerator_problem
from pipelines.config.errors import ConfigError
from pipelines.config.fields import (
    DisplayName,
    ImageUri,
    KubernetesName,
    KubernetesSubdomain,
    Labels,
    Network,
    OptionalDisplayName,
    ProjectId,
    Region,
    ServiceAccount,
    Uri,
    VertexExperiment,
)
from pipelines.config.kubeflow import KubeflowSettings
from pipelines.config.parameters import PIPELINE_NAMES, PipelineParameters
from pipelines.config.target_use import TARGET_USE
from pipelines.cron import parse_cron

PIPELINE_LABEL = "pipeline"  # the label naming the pipeline on each Vertex job and resource a run creates
# Vertex AI Pipelines adds its own label (vertex-ai-pipelines-run-billing-id) to every job and resource a run's
# Google Cloud Pipeline Components create
PIPELINES_SYSTEM_LABELS = 1
PREBUILT_SERVING = "-docker.pkg.dev/vertex-ai/prediction/"  # Vertex's prebuilt prediction images live here
SERVING_PORT = 8080  # the port this project's serving image listens on (AIP_HTTP_PORT)
COMPUTE_API = "https://www.googleapis.com/compute/v1"  # the prefix of a Compute Engine resource's full URL
SOURCE_COMMIT_HINT = (
    f"on Vertex AI each model version records it as its label {SOURCE_COMMIT_LABEL} (a git SHA-1 fits; "
    "abbreviate a longer id, e.g. git rev-parse --short=40 HEAD)"
)
# Scheduling.Strategy values of aiplatform_v1 a custom job takes (the others: unspecified, or deprecated: replaced by)
CAPACITY_STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")
DEPRECATED_STRATEGIES = {"ON_DEMAND": "STANDARD", "LOW_COST": "SPOT"}
DEFAULT_MAX_WAIT = "86400s"  # Vertex AI's (and GCPC's) wait for FLEX_START capacity when none is set


class ScheduleSettings(BaseModel):
    """The recurring run that `python -m pipelines schedule` creates (Vertex schedule / KFP recurring run)."""

    model_config = ConfigDict(extra="forbid")

    display_name: OptionalDisplayName = Field(
        "",
        description=(
            "The schedule's display name (`--display-name` overrides it); an existing schedule with this name is "
            "replaced. Empty: the pipeline's name (tfpipe-training, tfpipe-batch-prediction)."
        ),
    )
    cron: str = Field(
        "",
        description=(
            "When runs start (`--cron` overrides it): five cron fields, minute hour day-of-month month day-of-week, "
            "e.g. 0 3 * * 1; on Vertex optionally with a time zone, TZ=Europe/Paris 0 3 * * 1. Checked on load."
        ),
    )
    max_concurrent_runs: int = Field(1, ge=1, description="Most runs of the schedule running at once.")
    allow_queueing: bool = Field(
        False,
        description="Vertex: queue a due run while max_concurrent_runs are running (false: skip it).",
    )
    max_run_count: int | None = Field(
        None, ge=1, description="Vertex: the schedule completes after this many runs (null: never)."
    )
    start_time: str = Field(
        "", description="When the schedule starts, RFC 3339 like 2026-01-01T00:00:00Z (empty: now)."
    )
    end_time: str = Field("", description="When the schedule ends, RFC 3339 like 2026-12-31T00:00:00Z (empty: never).")

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return str(parse_cron(value)) if value.strip() else ""

    @field_validator("start_time", "end_time")
    @classmethod
    def _timestamp(cls, value: str) -> str:
        if value:
            from google.protobuf.timestamp_pb2 import Timestamp

            try:
                Timestamp().FromJsonString(value)
            except ValueError:
                raise ValueError(f"{value!r} is not an RFC 3339 time like 2026-01-01T00:00:00Z") from None
        return value


class DataPrepSettings(BaseModel):
    """Where the vertex target prepares data: on Dataflow (the default: one job per run, scaled out; its workers run
    the components image, which starts Beam's SDK harness) or in the step's own container on Beam's direct runner.
    A source of fewer than `dataflow_min_records` records is prepared in the step on Dataflow's settings too: a job
    takes minutes to start, more than such data takes to prepare. The local and kubeflow targets always use the
    direct runner."""

    model_config = ConfigDict(extra="forbid")

    runner: Literal["dataflow", "direct"] = Field(
        "dataflow",
        description=(
            "dataflow: a Dataflow job per run, its workers on the components image; direct: Beam's direct runner in "
            "the step's own container."
        ),
    )
    dataflow_min_records: int = Field(
        100_000,
        ge=0,
        description=(
            "Sources of fewer records are prepared in the step all the same, since a Dataflow job takes minutes to "
            "start (0: always Dataflow)."
        ),
    )
    machine_type: str = Field("n1-standard-4", description="Machine type of Dataflow's workers.")
    max_workers: int = Field(10, ge=1, description="Dataflow's autoscaling ceiling: the most workers of the job.")
    region: str = Field("", description="Region of the Dataflow job (empty: the runs' location).")
    subnetwork: str = Field(
        "",
        description=(
            "Subnetwork of Dataflow's workers, regions/REGION/subnetworks/NAME (in the project of `network`) or its "
            "full URL; required on a Shared VPC network or a custom-mode one (empty: Dataflow takes the auto-mode "
            "network named by `network` in the runs' project)."
        ),
    )
    endpoint: str = Field(
        "",
        description="The Dataflow API's endpoint (empty: Google's), e.g. a Private Service Connect endpoint.",
    )


class TrainingCapacity(BaseModel):
    """Where the Vertex training job's and the tuning job's trials' machines come from (CustomJobSpec.scheduling):
    on-demand, Spot (cheaper, but Vertex may preempt them, and the training job then restarts and resumes from its last
    epoch's checkpoint) or FLEX_START (Dynamic Workload Scheduler: a job or trial waits until all its machines are free,
    at most `max_wait_duration`)."""

    model_config = ConfigDict(extra="forbid")

    strategy: str = Field(
        "STANDARD",
        description="STANDARD (on-demand machines), SPOT (preemptible Spot VMs) or FLEX_START (queued for capacity).",
    )
    max_wait_duration: str = Field(
        "",
        description=(
            "FLEX_START only: the longest the job waits for its machines, a duration like 1800s (0s: no limit; "
            "empty: Vertex's 24 hours)."
        ),
    )

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, value: str) -> str:
        if value in DEPRECATED_STRATEGIES:
            raise ValueError(f"{value!r} is deprecated in Vertex AI: use {DEPRECATED_STRATEGIES[value]}")
        if value not in CAPACITY_STRATEGIES:
            raise ValueError(f"{value!r} is not a Vertex AI scheduling strategy: use {', '.join(CAPACITY_STRATEGIES)}")
        return value

    @field_validator("max_wait_duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        if value:
            from google.protobuf.duration_pb2 import Duration

            try:
                Duration().FromJsonString(value)
                valid = not value.startswith("-")
            except ValueError:
                valid = False
            if not valid:
                raise ValueError(f"{value!r} is not a duration in seconds like 1800s")
        return value

    @model_validator(mode="after")
    def _flex_start_only(self):
        if self.max_wait_duration and self.strategy != "FLEX_START":
            raise ValueError(f"max_wait_duration applies to FLEX_START only; Vertex AI refuses it with {self.strategy}")
        return self

    def scheduling(self) -> dict[str, str]:
        """The CustomTrainingJobOp inputs: `strategy`, and `max_wait_duration` (Vertex's default when unset; GCPC
        leaves it out of the request unless the strategy is FLEX_START)."""
        return {"strategy": self.strategy, "max_wait_duration": self.max_wait_duration or DEFAULT_MAX_WAIT}


class StepLimits(BaseModel):
    """A Vertex AI Pipelines lightweight step's CPU and memory limits (Vertex picks a machine that has them)."""

    model_config = ConfigDict(extra="forbid")

    cpu_limit: str = Field("", description="CPUs of the step, like 8 or 500m (empty: Vertex's default machine).")
    memory_limit: str = Field("", description="Memory of the step, like 32G or 16Gi (empty: Vertex's default machine).")

    @field_validator("cpu_limit")
    @classmethod
    def _cpu(cls, value: str) -> str:
        if value and not re.fullmatch(r"([0-9]*[.])?[0-9]+m?", value):
            raise ValueError(f"{value!r} is not a CPU limit like 8 or 500m")
        return value

    @field_validator("memory_limit")
    @classmethod
    def _memory(cls, value: str) -> str:
        if value and not re.fullmatch(r"[0-9]+(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki)?", value):
            raise ValueError(f"{value!r} is not a memory limit like 32G or 16Gi")
        return value


class Platform(BaseModel):
    """Settings of the cloud targets: compile time (images, machines, region) and submission (project, bucket,
    identity, network, labels, caching, registry, Kubeflow host, schedule)."""

    model_config = ConfigDict(extra="forbid")

    project: ProjectId = Field(
        "", description="Google Cloud project id of the Vertex AI runs and schedules (required on Vertex)."
    )
    pipeline_root: Uri = Field(
        "",
        description=(
            "Where the runs write their artifacts. Vertex: gs://BUCKET/PATH (required); Kubeflow: any root its "
            "launcher reads, like minio:// or gs:// (empty: the deployment's default)."
        ),
    )
    service_account: ServiceAccount = Field(
        "",
        description=(
            "Vertex: e-mail of the service account the runs act as, also the identity of their training, tuning and "
            "batch jobs and deployed models (empty: the Compute Engine default service account)."
        ),
    )
    network: Network = Field(
        "",
        description=(
            "Vertex: the VPC network the runs and their training and tuning jobs peer with, "
            "projects/PROJECT_NUMBER/global/networks/NAME (empty: none)."
        ),
    )
    psc_network_attachment: str = Field(
        "",
        description=(
            "Vertex: the training job and the tuning job's trials reach your VPC through this Private Service "
            "Connect interface, a network attachment's name or projects/P/regions/REGION/networkAttachments/NAME in "
            "location; instead of `network` (empty: none)."
        ),
    )
    encryption_spec_key_name: str = Field(
        "",
        description=(
            "Vertex: the Cloud KMS key (CMEK) of the pipeline jobs, training, tuning and batch jobs, models and "
            "endpoints, projects/P/locations/L/keyRings/R/cryptoKeys/K in location (empty: Google-managed keys)."
        ),
    )
    tensorboard: str = Field(
        "",
        description=(
            "Vertex: the TensorBoard instance the training job logs to, projects/P/locations/L/tensorboards/ID in "
            "location; needs service_account (empty: none)."
        ),
    )
    vertex_experiment: VertexExperiment = Field(
        "",
        description=(
            "Vertex: the Vertex AI Experiment `submit` adds runs to (`--experiment` overrides it; empty: none)."
        ),
    )
    labels: Labels = Field(
        {},
        description=(
            "Google Cloud labels of the pipeline jobs, schedules and every Vertex AI job and resource a run creates; "
            "with model_labels, the pipeline's own label and a model version's source_commit, at most 63."
        ),
    )
    enable_caching: bool | None = Field(
        None,
        description=(
            "null: the compiled caching settings (look-ups never cached, the other steps keyed on the data's "
            "fingerprint); false: nothing cached. true is refused: it would cache the look-ups too."
        ),
    )
    template_registry: Uri = Field(
        "",
        description=(
            "The Artifact Registry repository of pipeline templates, https://REGION-kfp.pkg.dev/PROJECT/REPO: where "
            "`publish` uploads them and `--template-tag` reads them."
        ),
    )
    kfp_host: Uri = Field("", description="Kubeflow: the Kubeflow Pipelines API endpoint, e.g. http://localhost:8080.")
    kfp_namespace: KubernetesName = Field(
        "", description="Kubeflow: your profile namespace on a multi-user deployment (`--namespace` overrides it)."
    )
    kfp_experiment: DisplayName = Field(
        "tfpipe",
        description=(
            "Kubeflow: the experiment of runs and recurring runs, created when missing (`--experiment` overrides it)."
        ),
    )
    kfp_service_account: KubernetesSubdomain = Field(
        "",
        description=(
            "Kubeflow: the Kubernetes service account every step of a run executes as: tfpipe-runner, the one "
            "manifests/kubeflow creates with only what the steps and Kubeflow Pipelines call (empty: the deployment's "
            "default, pipeline-runner on a standalone install, default-editor in a profile namespace)."
        ),
    )
    schedule: ScheduleSettings = Field(
        ScheduleSettings(), description="The recurring run `schedule` creates: its name, timing and limits."
    )
    kubeflow: KubeflowSettings = Field(
        KubeflowSettings(),
        description="The kubeflow target: the engine of each heavy step, the shared volume and the pods' resources.",
    )
    components_image: ImageUri = Field(
        "us-docker.pkg.dev/PROJECT/tfpipe/components:latest",
        description="The image of the pipeline's steps (on Vertex, of Dataflow's workers too).",
    )
    trainer_image: ImageUri = Field(
        "us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest",
        description=(
            "The image of the training and tuning workers: Vertex's worker pools, Kubeflow's TFJob replicas and "
            "Katib trials."
        ),
    )
    trainer_gpu_image: ImageUri = Field(
        "us-docker.pkg.dev/PROJECT/tfpipe/trainer-gpu:latest",
        description=(
            "The trainer image with CUDA TensorFlow, used instead of trainer_image when accelerator_type is set "
            "(Vertex) or kubeflow.worker_resources.gpus > 0."
        ),
    )
    serving_image: ImageUri = Field(
        "us-docker.pkg.dev/PROJECT/tfpipe/serving:latest",
        description=(
            "The model server's image: the uploaded model's container on Vertex, KServe's custom predictor on "
            "Kubeflow. This project's, or a prebuilt Vertex image (.../vertex-ai/prediction/...), used as given."
        ),
    )
    serving_gpu_image: ImageUri = Field(
        "us-docker.pkg.dev/PROJECT/tfpipe/serving-gpu:latest",
        description=(
            "The serving image with CUDA TensorFlow, used instead of this project's serving_image when "
            "serving_accelerator_type is set (Vertex) or kubeflow.serving_resources.gpus > 0."
        ),
    )
    location: Region = Field(
        "us-central1",
        description=(
            "Vertex: the Google Cloud region of the pipeline jobs, schedules, training and tuning jobs, registry "
            "models and endpoint."
        ),
    )
    machine_type: str = Field("n1-standard-4", description="Vertex: machine type of the training and tuning workers.")
    accelerator_type: str = Field(
        "",
        description=(
            "Vertex: accelerator of each training and tuning worker, e.g. NVIDIA_TESLA_T4, set with "
            "accelerator_count; the workers then run trainer_gpu_image (empty: none)."
        ),
    )
    accelerator_count: int = Field(
        0, ge=0, description="Vertex: accelerators per training and tuning worker (0 without accelerator_type)."
    )
    training_capacity: TrainingCapacity = Field(
        TrainingCapacity(),
        description=(
            "Vertex: the capacity of the training job and of the tuning job's trials, on-demand, Spot or FLEX_START "
            "(Vertex takes each for both)."
        ),
    )
    persistent_resource_id: str = Field(
        "",
        description=(
            "Vertex: the training job and the tuning job's trials run on this persistent resource's machines, its "
            "ID or projects/P/locations/L/persistentResources/ID in location, with the same network and CMEK key "
            "(empty: machines of their own)."
        ),
    )
    model_display_name: DisplayName = Field(
        "tfpipe-model",
        description=(
            "Vertex: the registry model's display name; each upload is a new version of it once it exists. Use "
            "another name for another data set."
        ),
    )
    model_version_aliases: list[str] = Field(
        ["champion"],
        description=(
            "Vertex: the registry aliases moved (with Vertex's default) to a version once it serves all traffic; the "
            "first one marks the champion, which the gate compares with and batch prediction uses."
        ),
    )
    model_labels: dict[str, str] = Field(
        {},
        description=(
            "Vertex: labels added to those of `labels` on every Vertex AI job and resource a run creates (training, "
            "tuning and batch jobs, model, endpoint), not on the pipeline jobs and schedules."
        ),
    )
    endpoint_display_name: DisplayName = Field(
        "tfpipe-endpoint",
        description=(
            "Vertex: the endpoint's display name, reused when it exists, created otherwise; `promote` and "
            "`rollback` act on it."
        ),
    )
    keep_previous: int = Field(
        0,
        ge=0,
        description=(
            "Deployed models kept at 0 % traffic after a full rollout, for a quick rollback (Kubeflow: older KServe "
            "revisions kept; 0: none)."
        ),
    )
    serving_machine_type: str = Field("n1-standard-2", description="Vertex: machine type of the endpoint's replicas.")
    serving_min_replicas: int = Field(
        1, ge=1, description="Fewest replicas of the deployed model (Vertex endpoint; KServe's minReplicas)."
    )
    serving_max_replicas: int = Field(
        1,
        ge=1,
        description=(
            "Most replicas of the deployed model, at least serving_min_replicas (Vertex endpoint; KServe's "
            "maxReplicas)."
        ),
    )
    serving_accelerator_type: str = Field(
        "",
        description=(
            "Vertex: accelerator of each endpoint replica, e.g. NVIDIA_TESLA_T4, set with serving_accelerator_count; "
            "the model is then served by serving_gpu_image (empty: none)."
        ),
    )
    serving_accelerator_count: int = Field(
        0, ge=0, description="Vertex: accelerators per endpoint replica (0 without serving_accelerator_type)."
    )
    batch_machine_type: str = Field(
        "n1-standard-4", description="Vertex: machine type of the batch prediction job's replicas."
    )
    batch_accelerator_type: str = Field(
        "",
        description=(
            "Vertex: accelerator of each batch prediction replica, an AcceleratorType such as NVIDIA_TESLA_T4 (of "
            "batch_machine_type's series), set with batch_accelerator_count (empty: none)."
        ),
    )
    batch_accelerator_count: int = Field(
        0, ge=0, description="Vertex: accelerators per batch prediction replica (0 without batch_accelerator_type)."
    )
    batch_starting_replicas: int = Field(1, ge=1, description="Vertex: replicas the batch prediction job starts with.")
    batch_max_replicas: int = Field(
        2,
        ge=1,
        description="Vertex: most replicas the batch prediction job scales to, at least batch_starting_replicas.",
    )
    data_prep: DataPrepSettings = Field(
        DataPrepSettings(),
        description="Vertex: where prepare-data runs its Beam pipeline, on Dataflow or in the step's own container.",
    )
    step_limits: dict[str, StepLimits] = Field(
        {},
        description=(
            "Vertex: CPU and memory limits of lightweight steps by step name (fingerprint-data, prepare-data, "
            "evaluate-model, quantize-model); Vertex runs each on a machine that has them."
        ),
    )

    @field_validator("enable_caching")
    @classmethod
    def _caching(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError(
                "true would cache every step of a run, the champion, registry and endpoint look-ups too "
                "(a run-level setting overrides each step's): leave it null for the compiled settings "
                "(look-ups never cached, the rest keyed on the data's fingerprint) or set false"
            )
        return value

    @field_validator("step_limits")
    @classmethod
    def _step_names(cls, value: dict) -> dict:
        for name in value:
            if not names.DNS_LABEL.fullmatch(name):
                raise ValueError(f"{name!r}: keys are step names like prepare-data")
        return value

    def dataflow_network(self) -> tuple[str, str]:
        """Dataflow's (network, subnetwork) for the runs' network: a subnetwork as its full URL in the network's
        project, which Dataflow requires on a Shared VPC (it looks a short path or a network's name up in the job's
        own project), and then no network (Dataflow takes the subnetwork's); without a subnetwork, the network's name."""
        subnetwork = self.data_prep.subnetwork
        if subnetwork.startswith("regions/") and self.network:
            subnetwork = f"{COMPUTE_API}/{self.network.split('/global/')[0]}/{subnetwork}"
        if subnetwork:
            return "", subnetwork
        return self.network.rsplit("/", 1)[-1], ""

    def vertex_labels(self, pipeline_name: str) -> dict[str, str]:
        """The labels of every Vertex AI job and resource a run of `pipeline_name` creates."""
        return {**self.labels, **self.model_labels, PIPELINE_LABEL: pipeline_name}

    def check_vertex_parameters(self, parameters: PipelineParameters) -> None:
        """ConfigError unless the training parameters suit Vertex AI: `source_commit` is each uploaded model
        version's label (SOURCE_COMMIT_LABEL), so it must be a label value."""
        try:
            names.label_value(parameters.source_commit, "parameters.source_commit")
        except names.InvalidName as e:
            raise ConfigError(f"invalid configuration: {e}: {SOURCE_COMMIT_HINT}") from None

    @model_validator(mode="after")
    def _vertex_rules(self):
        for alias in self.model_version_aliases:
            names.version_alias(alias, "model_version_aliases")
        if len(set(self.model_version_aliases)) != len(self.model_version_aliases):
            raise ValueError("model_version_aliases must be distinct")
        names.labels(self.model_labels, "model_labels")
        for field, labels in (("labels", self.labels), ("model_labels", self.model_labels)):
            if SOURCE_COMMIT_LABEL in labels:
                raise ValueError(
                    f"{field}: {SOURCE_COMMIT_LABEL} is the label each model version gets from parameters.source_commit "
                    "on Vertex AI: use another key"
                )
        # the most labels a run puts on a resource: the model version's, with its source_commit
        merged = {**self.vertex_labels(max(PIPELINE_NAMES.values(), key=len)), SOURCE_COMMIT_LABEL: ""}
        if len(merged) > names.MAX_LABELS - PIPELINES_SYSTEM_LABELS:
            raise ValueError(
                f"labels and model_labels make {len(merged)} labels on a Vertex AI model version (with "
                f"{PIPELINE_LABEL}=<pipeline name> and {SOURCE_COMMIT_LABEL}=<commit>); Vertex allows "
                f"{names.MAX_LABELS}, and a pipeline run adds {PIPELINES_SYSTEM_LABELS} of its own: keep them to "
                f"{names.MAX_LABELS - PIPELINES_SYSTEM_LABELS}"
            )
        if self.serving_max_replicas < self.serving_min_replicas:
            raise ValueError(
                f"serving_max_replicas ({self.serving_max_replicas}) must be >= serving_min_replicas "
                f"({self.serving_min_replicas})"
            )
        if self.batch_max_replicas < self.batch_starting_replicas:
            raise ValueError(
                f"batch_max_replicas ({self.batch_max_replicas}) must be >= batch_starting_replicas "
                f"({self.batch_starting_replicas})"
            )
        if bool(self.serving_accelerator_type) != bool(self.serving_accelerator_count):
            raise ValueError("serving_accelerator_type and serving_accelerator_count must be set together")
        if bool(self.accelerator_type) != bool(self.accelerator_count):
            raise ValueError("accelerator_type and accelerator_count must be set together")
        problem = accelerator_problem(
            "batch_", self.batch_accelerator_type, self.batch_accelerator_count, self.batch_machine_type
        )
        if problem:
            raise ValueError(problem)
        if not self.model_version_aliases:
            raise ValueError("model_version_aliases: give at least one alias (the first one marks the champion)")
        if self.encryption_spec_key_name:
            names.kms_key(self.encryption_spec_key_name, "encryption_spec_key_name", self.location)
        if self.tensorboard:
            names.tensorboard(self.tensorboard, "tensorboard", self.location)
        self._training_placement()
        if self.tensorboard and not self.service_account:
            raise ValueError(
                "tensorboard needs service_account: Vertex AI writes to a TensorBoard instance only from "
                "a training job that runs as a service account"
            )
        return self

    def _training_placement(self) -> None:
        """The persistent resource and the PSC interface: in the runs' location, each as Vertex takes it."""
        resource = PERSISTENT_RESOURCE.fullmatch(self.persistent_resource_id)
        if resource and resource["location"] != self.location:
            raise ValueError(
                f"persistent_resource_id: {self.persistent_resource_id!r} is in {resource['location']}; the training "
                f"job and the tuning trials run in location {self.location}"
            )
        if self.persistent_resource_id and not PERSISTENT_RESOURCE_ID.fullmatch(self.training_persistent_resource()):
            raise ValueError(
                f"persistent_resource_id: {self.persistent_resource_id!r} must be an ID matching "
                f"{PERSISTENT_RESOURCE_ID.pattern} or projects/P/locations/L/persistentResources/ID"
            )
        if self.persistent_resource_id and self.training_capacity.strategy != "STANDARD":
            raise ValueError(
                "persistent_resource_id: the training job and the tuning trials run on the resource's machines, so "
                "training_capacity.strategy "
                f"{self.training_capacity.strategy} does not apply; leave it STANDARD"
            )
        attachment = NETWORK_ATTACHMENT.fullmatch(self.psc_network_attachment)
        if self.psc_network_attachment and not attachment:
            raise ValueError(
                f"psc_network_attachment: {self.psc_network_attachment!r} must be a network attachment's name or "
                "projects/P/regions/REGION/networkAttachments/NAME"
            )
        if attachment and attachment["region"] and attachment["region"] != self.location:
            raise ValueError(
                f"psc_network_attachment: {self.psc_network_attachment!r} is in {attachment['region']}; the training "
                f"job and the tuning trials run in location {self.location}"
            )
        if self.psc_network_attachment and self.network:
            raise ValueError(
                "psc_network_attachment and network are exclusive: a Vertex training job or tuning trial reaches a "
                "VPC through peering or through a Private Service Connect interface, not both"
            )

    def training_persistent_resource(self) -> str:
        """The persistent resource's ID (CustomJobSpec's, in the job's project and location); "" without one."""
        return self.persistent_resource_id.rsplit("/", 1)[-1]

    def psc_interface_config(self) -> dict[str, str]:
        """The training job's CustomJobSpec.psc_interface_config ({} without an attachment)."""
        return {"network_attachment": self.psc_network_attachment} if self.psc_network_attachment else {}

    def trial_placement(self) -> dict[str, str]:
        """Where the tuning job's trials run, as the tuning step's inputs (`strategy`, `max_wait_duration`,
        `persistent_resource_id`, `psc_network_attachment`): the training job's settings, each only when set (on-demand
        STANDARD machines are the trials' default)."""
        capacity = self.training_capacity
        values = {
            "strategy": "" if capacity.strategy == "STANDARD" else capacity.strategy,
            "max_wait_duration": capacity.max_wait_duration,
            "persistent_resource_id": self.training_persistent_resource(),
            "psc_network_attachment": self.psc_network_attachment,
        }
        return {name: value for name, value in values.items() if value}

    @property
    def champion_alias(self) -> str:
        """The registry alias that marks the champion (the first of model_version_aliases)."""
        return self.model_version_aliases[0]

    def training_image(self) -> str:
        """The image of the training and tuning worker pools: the GPU variant when an accelerator is set."""
        return self.trainer_gpu_image if self.accelerator_type else self.trainer_image

    def kubeflow_trainer_image(self) -> str:
        """The image of the TFJob replicas and Katib trials: the GPU variant when they get GPUs."""
        return self.trainer_gpu_image if self.kubeflow.worker_resources.gpus else self.trainer_image

    def serving_image_field(self) -> str:
        """The serving image the Vertex deploy uses: this project's GPU variant when the deployment gets an
        accelerator (a prebuilt Vertex image is taken as given: its name says CPU or GPU)."""
        gpu = self.serving_accelerator_type and PREBUILT_SERVING not in self.serving_image
        return "serving_gpu_image" if gpu else "serving_image"

    def kubeflow_serving_image(self) -> str:
        """The image of the KServe predictor (predictor serving_image): the GPU variant when it gets GPUs."""
        return self.serving_gpu_image if self.kubeflow.serving_resources.gpus else self.serving_image

    def serving_container_spec(self) -> dict:
        """The uploaded model's containerSpec: a prebuilt Vertex image needs only its URI; this project's serving
        image listens on SERVING_PORT and reads the routes Vertex gives it in AIP_HEALTH_ROUTE/AIP_PREDICT_ROUTE."""
        image = getattr(self, self.serving_image_field())
        if PREBUILT_SERVING in image:
            return {"imageUri": image}
        return {"imageUri": image, "ports": [{"containerPort": SERVING_PORT}]}

    def vertex_training_images(self) -> list[str]:
        """The image fields the vertex training pipeline's jobs run besides the components image: the trainer's
        (the GPU variant with an accelerator) and the uploaded model's serving image."""
        return ["trainer_gpu_image" if self.accelerator_type else "trainer_image", self.serving_image_field()]

    def images_used(self, target: str, pipeline: str = "training") -> list[str]:
        """The image fields a run of `pipeline` on `target` uses (batch prediction: only the components image)."""
        used = ["components_image"]
        if pipeline != "training":
            return used
        return used + TARGET_USE[target].training_images(self)
