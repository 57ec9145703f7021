"""Run configuration: pipeline parameters (the ML knobs, typed pipeline inputs) and platform settings (project,
images, machines, region, submission and schedule settings). Loaded from a YAML file with `parameters:` (training
pipeline), `batch:` (batch prediction pipeline), `platform:`, `study:` and `trainer:` sections, plus optional
named `profiles:` deep-merged over them.

Precedence, highest first: CLI (`--set section.field=value`, then the dedicated options) > environment
(`TFPIPE_<SECTION>__<FIELD>[__<SUBFIELD>]`) > the selected profile (`--profile NAME` or `TFPIPE_PROFILE`) > the
file's base sections > defaults.
"""

from __future__ import annotations

import copy
import inspect
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from components.lib.batch.instance_formats import InstancesFormat
from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from core import names
from pipelines.cron import parse_cron
from trainer import builder

TARGETS = ("vertex", "kubeflow", "local")
# the pipelines (`--pipeline`) and their compiled names (also their package names in a template registry)
PIPELINE_NAMES = {"training": "tfpipe-training", "batch_prediction": "tfpipe-batch-prediction"}
PIPELINES = tuple(PIPELINE_NAMES)
# Vertex AI naming rules (Model.version_aliases, resource labels: core.names), also the rehearsal double's
_ALIAS, LABEL_KEY, LABEL_VALUE, MAX_LABELS = names.VERSION_ALIAS, names.LABEL_KEY, names.LABEL_VALUE, names.MAX_LABELS
PIPELINE_LABEL = "pipeline"  # the label naming the pipeline on each Vertex job and resource a run creates
# Vertex AI Pipelines adds its own label (vertex-ai-pipelines-run-billing-id) to every job and resource a run's
# Google Cloud Pipeline Components create
PIPELINES_SYSTEM_LABELS = 1
_REGION = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
_PROJECT = re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_SERVICE_ACCOUNT = re.compile(r"^[^@\s]+@[^@\s]+\.gserviceaccount\.com$")
NETWORK = re.compile(r"^projects/[0-9]+/global/networks/[^/\s]+$")
_URI = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")
KMS_KEY = re.compile(r"^projects/[^/\s]+/locations/(?P<location>[^/\s]+)/keyRings/[^/\s]+/cryptoKeys/[^/\s]+$")
TENSORBOARD = re.compile(r"^projects/(?P<project>[^/\s]+)/locations/(?P<location>[^/\s]+)/tensorboards/[0-9]+$")
PREBUILT_SERVING = "-docker.pkg.dev/vertex-ai/prediction/"  # Vertex's prebuilt prediction images live here
SERVING_PORT = 8080  # the port this project's serving image listens on (AIP_HTTP_PORT)
SECTIONS = ("parameters", "batch", "platform", "study", "trainer")
ENV_PREFIX = "TFPIPE_"
PROFILE_ENV = "TFPIPE_PROFILE"
# An example value a command must not send to the cloud: the project ids of the shipped tfpipe.yaml and the names
# made from them (gs://my-project-tfpipe; a generated id like my-project-384512 is a real one), the docs' upper-case
# placeholders (the default images' PROJECT), and the RFC 2606 example domains (YOU@example.com, kfp.example.com)
EXAMPLE_VALUE = re.compile(
    r"(?<![\w-])(?:my-project|my-dev-project)(?!\w|-[0-9])"
    r"|(?<![A-Za-z0-9])(?:PROJECT|BUCKET|REGION|REPO)(?![A-Za-z0-9])"
    r"|(?<![\w-])example\.(?:com|org|net)(?![\w-])"
)


class ConfigError(ValueError):
    """The configuration is invalid (user-facing message)."""


def _named(rule, value: str, optional: bool = False, **options) -> str:
    """`value` if it follows `rule` (core.names), or is "" and `optional`; else the rule's
    `RULE (got VALUE)` as the ValueError pydantic reports at the field (whose location names the parameter)."""
    if optional and not value:
        return value
    try:
        return rule(value, "value", **options)
    except names.InvalidName as e:
        raise ValueError(e.detail) from None


def _rule(rule, optional: bool = True, **options) -> AfterValidator:
    return AfterValidator(lambda value: _named(rule, value, optional, **options))


# the names and locations of the config and the pipeline inputs (docs/guides/configuration.md, "Validation"); the optional ones may be
# "" (not set)
ModelName = Annotated[str, _rule(names.model_name, optional=False)]
Location = Annotated[str, _rule(names.location)]
DataSource = Annotated[str, _rule(names.location, optional=False, prefixes=("builtin:",))]
Instances = Annotated[str, _rule(names.locations)]
GcsPrefix = Annotated[str, _rule(names.location, local=False)]
Url = Annotated[str, _rule(names.url)]
DisplayName = Annotated[str, _rule(names.display_name, optional=False)]
OptionalDisplayName = Annotated[str, _rule(names.display_name)]
KubernetesName = Annotated[str, _rule(names.dns_label)]
KubernetesSubdomain = Annotated[str, _rule(names.dns_subdomain)]


class PipelineParameters(BaseModel):
    """Inputs of the training pipeline, with their defaults (also the compiled pipeline's defaults); each field's
    description is its compiled input's description."""

    model_config = ConfigDict(extra="forbid")

    data_source: DataSource = Field(
        "builtin:digits",
        description=(
            "The data: builtin:digits, builtin:iris, an image folder (one subfolder per class) or a CSV file with a "
            "label column; a local path or gs:// URI."
        ),
    )
    workers: int = Field(2, ge=1, le=64, description="Training workers (replicas of the multi-worker strategy).")
    epochs: int = Field(15, ge=1, description="Epochs of the final training.")
    batch_size: int = Field(32, ge=1, description="Batch size per replica (global batch = batch_size × replicas).")
    learning_rate: float = Field(0.003, gt=0, description="Learning rate (the study's best trial overrides it).")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="Share of the examples in the validation split.")
    test_fraction: float = Field(0.1, gt=0, lt=1, description="Share of the examples in the test split.")
    image_size: int = Field(
        0,
        ge=0,
        description=(
            "Side in pixels of the prepared images; 0: the data's own (8 for digits; an image folder's smallest "
            "image side, capped at 180, never upsampled)."
        ),
    )
    label_column: str = Field("label", description="Label column of a CSV source.")
    max_corrupt_fraction: float = Field(
        0.05, ge=0, le=1, description=("Data prep fails above this share of unreadable records.")
    )
    split_salt: str = Field("", description="Salt of the deterministic split; change it to draw a different split.")
    max_restarts: int = Field(
        2,
        ge=0,
        description=(
            "Local launcher: restarts of the worker group after a lost worker (a worker's error is not retried)."
        ),
    )
    accuracy_threshold: float = Field(
        0.9, ge=0, le=1, description=("Evaluation gate: the test accuracy the model must reach to be blessed.")
    )
    champion_tolerance: float = Field(
        0.01, ge=0, description=("Evaluation gate: how far below the champion's test accuracy the model may be.")
    )
    model_repository: Location = Field(
        "",
        description=(
            "Self-hosted: the versioned model repository (empty: runs/model_repository for local runs, "
            "<volume mount path>/model-repository for compiled kubeflow templates)."
        ),
    )
    model_name: ModelName = Field("tfpipe-model", description="Self-hosted: the model's name in the repository.")
    source_commit: str = Field("", description="Commit recorded with the published version (local runs: git HEAD).")
    tune: bool = Field(True, description="Run the hyperparameter study before the final training.")
    tuning_trial_epochs: int = Field(2, ge=1, description="Epochs of each study trial.")
    tflite_mode: Literal["float32", "dynamic", "float16", "int8"] = Field(
        "dynamic", description=("TFLite mode to publish: float32, dynamic, float16 or int8.")
    )
    tflite_max_accuracy_drop: float = Field(
        1.0, ge=0, description=("Points of test accuracy the published .tflite may lose against the SavedModel.")
    )
    tflite_compare_all_modes: bool = Field(
        True, description=("Also convert and evaluate every other TFLite mode, for the report.")
    )
    tflite_int8_io: bool = Field(False, description="int8 mode: int8 input and output tensors too.")
    tflite_allow_flex: bool = Field(False, description="Accept models that need Select TF (Flex) ops.")
    deploy: bool = Field(True, description="Deploy the registered model (Vertex endpoint, KServe or TF Serving).")
    traffic_percentage: int = Field(
        100,
        ge=1,
        le=100,
        description=(
            "Vertex and KServe: the new model's share of the endpoint's traffic in % (< 100: a canary; the current "
            "models keep the rest)."
        ),
    )
    serving_url: Url = Field(
        "",
        description=(
            "Self-hosted: URL of a TF Serving watching model_repository (empty: local runs start the local server)."
        ),
    )
    rest_port: int = Field(8501, ge=0, le=65535, description="Local server's REST port (0: any free port).")
    grpc_port: int = Field(8500, ge=0, le=65535, description="Local server's gRPC port (0: any free port).")

    @model_validator(mode="after")
    def _fractions(self):
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        if self.rest_port == self.grpc_port != 0:
            raise ValueError(f"rest_port and grpc_port must differ (both {self.rest_port})")
        return self


class BatchParameters(BaseModel):
    """Inputs of the batch prediction pipeline, with their defaults; each field's description is its compiled
    input's description. `instances` has no compiled default (an empty value here leaves the compiled pipeline input
    required)."""

    model_config = ConfigDict(extra="forbid")

    instances: Instances = Field("", description="The instances: comma-separated paths or globs (Vertex: gs:// URIs).")
    instances_format: InstancesFormat = Field(
        "jsonl", description="Format of the instances: jsonl, csv, tf-record, tf-record-gzip or file-list."
    )
    model: str = Field(
        "",
        description=(
            "The model version (empty: the champion); self-hosted: a version number or SavedModel path; Vertex: a version "
            "id, alias or projects/.../models/ID[@VERSION] resource name."
        ),
    )
    model_repository: Location = Field(
        "", description=("Self-hosted: the model repository (empty: runs/model_repository for local runs).")
    )
    model_name: ModelName = Field("tfpipe-model", description="Self-hosted: the model's name in the repository.")
    batch_size: int = Field(64, ge=1, description="Instances per prediction call.")
    key_field: str = Field(
        "", description=("Field identifying an instance: never sent to the model; the output carries it as `key`.")
    )
    # which fields of a CSV row / JSONL object form the instance (Vertex's InstanceConfig)
    included_fields: list[str] = Field(
        [],
        description=(
            "Fields sent to the model, in this order (not with excluded_fields); []: the model's feature columns, "
            "matched by name, else every field but the key."
        ),
    )
    excluded_fields: list[str] = Field([], description="Fields not sent to the model: every field but these.")
    instance_type: Literal["", "object", "array"] = Field(
        "", description=("JSONL objects sent as objects or as arrays (in included_fields' order); empty: as given.")
    )
    max_error_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description=("The run fails when a larger share of its instances failed (a run with no instance fails too)."),
    )
    signature_name: str = Field(
        "",
        description=(
            "The signature to call (empty: serving_default, or serving_image_bytes for file lists and TFRecords of an "
            "image model)."
        ),
    )
    output_prefix: GcsPrefix = Field(
        "", description=("Vertex: gs:// prefix of the output directory (empty: under the pipeline root).")
    )

    @field_validator("included_fields", "excluded_fields", mode="before")
    @classmethod
    def _comma_separated(cls, value):
        if isinstance(value, str):  # `--set batch.excluded_fields=label,id`, TFPIPE_BATCH__EXCLUDED_FIELDS=label
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @model_validator(mode="after")
    def _fields(self):
        if self.included_fields and self.excluded_fields:
            raise ValueError("give included_fields or excluded_fields, not both")
        return self

    def pipeline_arguments(self) -> dict:
        """The values as pipeline inputs (an empty `instances` is left out: the input stays required)."""
        return {k: v for k, v in self.model_dump().items() if k != "instances" or v}


def described_by(parameters: type[BaseModel]):
    """Decorator of a documented pipeline function: an `Args:` docstring section from the descriptions of
    `parameters`' fields (one per pipeline input), which KFP compiles into the inputs' descriptions."""

    def describe(func):
        args = "".join(f"\n    {name}: {field.description}" for name, field in parameters.model_fields.items())
        func.__doc__ = f"{inspect.cleandoc(func.__doc__)}\n\nArgs:{args}\n"
        return func

    return describe


def _check_labels(labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key) or not LABEL_VALUE.fullmatch(value):
            raise ValueError(f"{key}={value!r}: keys must match {LABEL_KEY.pattern} and values {LABEL_VALUE.pattern}")
        if key.startswith("goog"):
            raise ValueError(f"{key}: label keys starting with goog are reserved by Google Cloud")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels, got {len(labels)}")


class ScheduleSettings(BaseModel):
    """The recurring run that `python -m pipelines schedule` creates (Vertex schedule / KFP recurring run)."""

    model_config = ConfigDict(extra="forbid")

    display_name: OptionalDisplayName = ""  # "" = the pipeline's name (tfpipe-training, tfpipe-batch-prediction)
    cron: str = ""  # "0 3 * * 1", optionally "TZ=Europe/Paris 0 3 * * 1"; validated on load
    max_concurrent_runs: int = Field(1, ge=1)
    allow_queueing: bool = False  # Vertex: queue a run instead of skipping it while max_concurrent_runs run
    max_run_count: int | None = Field(None, ge=1)  # the schedule completes after this many runs
    start_time: str = ""  # RFC 3339, e.g. 2026-01-01T00:00:00Z ("" = now)
    end_time: str = ""  # RFC 3339 ("" = never)

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


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")  # Kubernetes CPU/memory quantities
_DNS_LABEL = names.DNS_LABEL
DEFAULT_STEP = "default"  # kubeflow.step_resources key for every step without its own entry


class Resources(BaseModel):
    """Kubernetes requests and limits of one container ("" = not set: the namespace's defaults apply)."""

    model_config = ConfigDict(extra="forbid")

    cpu_request: str = ""  # "500m", "2"
    cpu_limit: str = ""
    memory_request: str = ""  # "1Gi", "512Mi"
    memory_limit: str = ""
    gpus: int = Field(0, ge=0)  # nvidia.com/gpu (a limit; Kubernetes sets the request equal)

    @field_validator("cpu_request", "cpu_limit", "memory_request", "memory_limit")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if value and not _QUANTITY.match(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity like 500m, 2, 512Mi or 4Gi")
        return value

    def requirements(self) -> dict:
        """The container's `resources` object: `{"requests": {...}, "limits": {...}}` (only what is set)."""
        requests = {k: v for k, v in (("cpu", self.cpu_request), ("memory", self.memory_request)) if v}
        limits = {k: v for k, v in (("cpu", self.cpu_limit), ("memory", self.memory_limit)) if v}
        if self.gpus:
            limits["nvidia.com/gpu"] = str(self.gpus)
        return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


class DataPrepSettings(BaseModel):
    """Where the vertex target prepares data: on Dataflow (the default: one job per run, scaled out; its workers run
    the components image, which starts Beam's SDK harness) or in the step's own container on Beam's direct runner.
    A source of fewer than `dataflow_min_records` records is prepared in the step on Dataflow's settings too: a job
    takes minutes to start, more than such data takes to prepare. The local and kubeflow targets always use the
    direct runner."""

    model_config = ConfigDict(extra="forbid")

    runner: Literal["dataflow", "direct"] = "dataflow"
    dataflow_min_records: int = Field(100_000, ge=0)  # fewer records: prepared in the step (0: always Dataflow)
    machine_type: str = "n1-standard-4"  # Dataflow workers' machine type
    max_workers: int = Field(10, ge=1)  # Dataflow's autoscaling ceiling
    region: str = ""  # "" = `location`
    subnetwork: str = ""  # regions/REGION/subnetworks/NAME or its full URL ("" = `network`'s default subnetwork)
    endpoint: str = ""  # the Dataflow API's endpoint ("" = Google's; e.g. a Private Service Connect endpoint)


class StepLimits(BaseModel):
    """A Vertex AI Pipelines lightweight step's CPU and memory limits (Vertex picks a machine that has them)."""

    model_config = ConfigDict(extra="forbid")

    cpu_limit: str = ""  # "8", "500m" ("" = Vertex's default machine)
    memory_limit: str = ""  # "32G", "16Gi"

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


class Volume(BaseModel):
    """The PersistentVolumeClaim every kubeflow step, TFJob replica, Katib trial and KServe predictor shares: data
    sources, staged data sets, training outputs and the model repository live on it."""

    model_config = ConfigDict(extra="forbid")

    claim_name: KubernetesSubdomain = "tfpipe"  # "" = no volume (then only training: pod, tuning: pod, serving:
    #                                             url | none)
    mount_path: str = "/mnt/tfpipe"

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") == "":
            raise ValueError(f"{value!r} must be an absolute path other than /")
        return value.rstrip("/")


def _default_step_resources() -> dict:
    return {
        DEFAULT_STEP: Resources(cpu_request="500m", memory_request="1Gi", memory_limit="4Gi"),
        # training: pod runs `workers` TensorFlow processes in this one pod; tuning: pod its parallel trials
        "train-model": Resources(cpu_request="2", memory_request="4Gi", memory_limit="8Gi"),
        "tune-hyperparameters": Resources(cpu_request="2", memory_request="4Gi", memory_limit="8Gi"),
    }


class KubeflowSettings(BaseModel):
    """The kubeflow target: which Kubeflow engine runs each heavy step, where its objects go, the shared volume and
    the resources of every pod."""

    model_config = ConfigDict(extra="forbid")

    training: Literal["operator", "pod"] = "operator"  # operator: a TFJob (training operator); pod: N processes in
    #                                                      the step's pod
    tuning: Literal["katib", "pod"] = "katib"  # katib: a Katib Experiment; pod: trials as processes in the step's pod
    serving: Literal["kserve", "url", "none"] = "kserve"  # kserve: an InferenceService; url: check the TF Serving at
    #                                                       the serving_url parameter; none: publish only
    namespace: str = ""  # of the TFJob, Experiment and InferenceService ("" = the run's namespace)
    service_account: str = ""  # of their pods ("" = the namespace's default)
    volume: Volume = Volume()
    step_resources: dict[str, Resources] = Field(default_factory=_default_step_resources)  # per step name
    worker_resources: Resources = Resources(cpu_request="2", memory_request="4Gi", memory_limit="8Gi")  # each TFJob
    #                                                           replica and Katib trial (gpus > 0: trainer_gpu_image)
    serving_resources: Resources = Resources(cpu_request="1", memory_request="2Gi", memory_limit="4Gi")
    predictor: Literal["serving_image", "tensorflow"] = "serving_image"  # KServe predictor: this project's serving
    #                                                   image (custom container) or KServe's TensorFlow runtime
    tensorflow_runtime_version: str = ""  # predictor tensorflow: the TF Serving image tag ("" = the runtime's)
    inference_service: Annotated[str, _rule(names.inference_service)] = ""  # the InferenceService's name ("" = the
    #                                                                        model_name parameter)
    poll_seconds: float = Field(10, gt=0)  # how often the steps read the objects' status
    training_timeout_minutes: int = Field(24 * 60, ge=1)
    tuning_timeout_minutes: int = Field(24 * 60, ge=1)
    serving_timeout_minutes: int = Field(15, ge=1)  # until the new revision is Ready

    @field_validator("namespace", "service_account")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and (len(value) > 63 or not _DNS_LABEL.fullmatch(value)):
            raise ValueError(f"{value!r} is not a Kubernetes name (lowercase letters, digits and '-', at most 63)")
        return value

    @field_validator("step_resources")
    @classmethod
    def _steps(cls, value: dict) -> dict:
        for name in value:
            if name != DEFAULT_STEP and not _DNS_LABEL.fullmatch(name):
                raise ValueError(f"{name!r}: keys are step names like train-model, or {DEFAULT_STEP!r}")
        return value

    @model_validator(mode="after")
    def _engines_need_the_volume(self):
        needs = [
            f"{field}: {getattr(self, field)}"
            for field, engine in (("training", "operator"), ("tuning", "katib"), ("serving", "kserve"))
            if getattr(self, field) == engine
        ]
        if needs and not self.volume.claim_name:
            raise ValueError(
                f"{', '.join(needs)} need volume.claim_name: the engines' pods read the data and the "
                "models from that PersistentVolumeClaim (or choose pod / url / none)"
            )
        return self

    def resources_of(self, step: str) -> Resources:
        return self.step_resources.get(step) or self.step_resources.get(DEFAULT_STEP) or Resources()


class Platform(BaseModel):
    """Settings of the cloud targets: compile time (images, machines, region) and submission (project, bucket,
    identity, network, labels, caching, registry, Kubeflow host, schedule)."""

    model_config = ConfigDict(extra="forbid")

    project: str = ""  # Google Cloud project id (Vertex: submit, schedule)
    pipeline_root: str = ""  # Vertex: gs://BUCKET/PATH; Kubeflow: any root its launcher reads (minio://, gs://)
    service_account: str = ""  # Vertex: the runs' service account (e-mail); "" = Compute Engine default
    network: str = ""  # Vertex: projects/PROJECT_NUMBER/global/networks/NAME to peer with ("" = none)
    encryption_spec_key_name: str = ""  # Vertex: CMEK key of the runs, jobs, models and endpoints ("" = Google's)
    tensorboard: str = ""  # Vertex: projects/.../locations/.../tensorboards/ID the training job writes to
    vertex_experiment: Annotated[str, _rule(names.vertex_experiment)] = ""  # Vertex: the Vertex AI Experiment
    #                                                                         `submit` puts runs in ("" = none)
    labels: dict[str, str] = {}  # labels of the pipeline jobs, schedules and every Vertex job and resource
    enable_caching: bool | None = None  # None = the compiled settings (look-ups never cached, the rest keyed on
    #                                     the data's fingerprint); False = nothing cached; True is refused
    template_registry: str = ""  # https://REGION-kfp.pkg.dev/PROJECT/REPO: publish target, --template-tag source
    kfp_host: str = ""  # Kubeflow Pipelines API endpoint, e.g. http://localhost:8080
    kfp_namespace: KubernetesName = ""  # multi-user Kubeflow: the profile namespace
    kfp_experiment: DisplayName = "tfpipe"
    kfp_service_account: KubernetesSubdomain = ""  # Kubernetes service account of the runs ("" = the deployment's
    #                                                default)
    schedule: ScheduleSettings = ScheduleSettings()
    kubeflow: KubeflowSettings = KubeflowSettings()  # the kubeflow target's engines, volume and resources
    components_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/components:latest"
    trainer_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest"
    trainer_gpu_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/trainer-gpu:latest"  # when accelerator_type is set
    serving_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/serving:latest"  # or a prebuilt .../vertex-ai/prediction/
    serving_gpu_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/serving-gpu:latest"  # with serving_accelerator_type
    location: str = "us-central1"
    machine_type: str = "n1-standard-4"
    accelerator_type: str = ""
    accelerator_count: int = Field(0, ge=0)
    model_display_name: DisplayName = "tfpipe-model"
    model_version_aliases: list[str] = ["champion"]  # moved to each uploaded version; the first one is what
    #                                                   batch prediction uses as "the champion"
    model_labels: dict[str, str] = {}
    endpoint_display_name: DisplayName = "tfpipe-endpoint"
    keep_previous: int = Field(0, ge=0)  # deployed models kept (at 0 %) after a full rollout, for a quick rollback
    serving_machine_type: str = "n1-standard-2"
    serving_min_replicas: int = Field(1, ge=1)
    serving_max_replicas: int = Field(1, ge=1)
    serving_accelerator_type: str = ""
    serving_accelerator_count: int = Field(0, ge=0)
    batch_machine_type: str = "n1-standard-4"
    batch_starting_replicas: int = Field(1, ge=1)
    batch_max_replicas: int = Field(2, ge=1)
    data_prep: DataPrepSettings = DataPrepSettings()  # Vertex: Dataflow or the direct runner for data prep
    step_limits: dict[str, StepLimits] = {}  # Vertex: lightweight steps' CPU and memory limits by step name, e.g.
    #                                         prepare-data (which decodes images on every CPU it gets)

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        if not _REGION.match(value):
            raise ValueError(f"{value!r} is not a Google Cloud region like us-central1 or europe-west4")
        return value

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if value and not _PROJECT.match(value):
            raise ValueError(f"{value!r} is not a project id (6-30 lowercase letters, digits and hyphens)")
        return value

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str) -> str:
        if value and not _SERVICE_ACCOUNT.match(value):
            raise ValueError(f"{value!r} is not a service account e-mail like NAME@PROJECT.iam.gserviceaccount.com")
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        if value and not NETWORK.match(value):
            raise ValueError(f"{value!r} must look like projects/PROJECT_NUMBER/global/networks/NAME")
        return value

    @field_validator("pipeline_root", "kfp_host", "template_registry")
    @classmethod
    def _uri(cls, value: str) -> str:
        if value and not _URI.match(value):
            raise ValueError(f"{value!r} is not a URI (scheme://...)")
        return value.rstrip("/") if value.startswith("http") else value

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
            if not _DNS_LABEL.fullmatch(name):
                raise ValueError(f"{name!r}: keys are step names like prepare-data")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        _check_labels(value)
        return value

    def vertex_labels(self, pipeline_name: str) -> dict[str, str]:
        """The labels of every Vertex AI job and resource a run of `pipeline_name` creates."""
        return {**self.labels, **self.model_labels, PIPELINE_LABEL: pipeline_name}

    @field_validator("components_image", "trainer_image", "trainer_gpu_image", "serving_image", "serving_gpu_image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"{value!r} is not an image URI")
        return value

    @model_validator(mode="after")
    def _vertex_rules(self):
        for alias in self.model_version_aliases:
            if not _ALIAS.fullmatch(alias):
                raise ValueError(f"model_version_aliases: {alias!r} must match {_ALIAS.pattern}")
        if len(set(self.model_version_aliases)) != len(self.model_version_aliases):
            raise ValueError("model_version_aliases must be distinct")
        try:
            _check_labels(self.model_labels)
        except ValueError as e:
            raise ValueError(f"model_labels: {e}") from None
        merged = self.vertex_labels(max(PIPELINE_NAMES.values(), key=len))
        if len(merged) > MAX_LABELS - PIPELINES_SYSTEM_LABELS:
            raise ValueError(
                f"labels and model_labels make {len(merged)} labels on each Vertex AI job and resource (with "
                f"{PIPELINE_LABEL}=<pipeline name>); Vertex allows {MAX_LABELS}, and a pipeline run adds "
                f"{PIPELINES_SYSTEM_LABELS} of its own: keep them to {MAX_LABELS - PIPELINES_SYSTEM_LABELS}"
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
        if not self.model_version_aliases:
            raise ValueError("model_version_aliases: give at least one alias (the first one marks the champion)")
        for field, pattern, what in (
            ("encryption_spec_key_name", KMS_KEY, "projects/P/locations/L/keyRings/R/cryptoKeys/K"),
            ("tensorboard", TENSORBOARD, "projects/P/locations/L/tensorboards/ID"),
        ):
            value = getattr(self, field)
            if value and not (m := pattern.match(value)):
                raise ValueError(f"{field}: {value!r} must look like {what}")
            if value and m["location"] != self.location:
                raise ValueError(
                    f"{field}: {value!r} is in {m['location']}; Vertex AI needs it in the runs' "
                    f"location {self.location}"
                )
        if self.tensorboard and not self.service_account:
            raise ValueError(
                "tensorboard needs service_account: Vertex AI writes to a TensorBoard instance only from "
                "a training job that runs as a service account"
            )
        return self

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

    def images_used(self, target: str, pipeline: str = "training") -> list[str]:
        """The image fields a run of `pipeline` on `target` uses (batch prediction: only the components image)."""
        used = ["components_image"]
        if pipeline != "training":
            return used
        if target == "kubeflow":
            k = self.kubeflow
            if k.training == "operator" or k.tuning == "katib":
                used.append("trainer_gpu_image" if k.worker_resources.gpus else "trainer_image")
            if k.serving == "kserve" and k.predictor == "serving_image":
                used.append("serving_gpu_image" if k.serving_resources.gpus else "serving_image")
        if target == "vertex":
            used += ["trainer_gpu_image" if self.accelerator_type else "trainer_image", self.serving_image_field()]
        return used


class TrainerSettings(BaseModel):
    """What the training application trains, baked into the compiled training pipeline: every trial and the final
    training run `python -m trainer.task --model MODEL`."""

    model_config = ConfigDict(extra="forbid")

    model: str = builder.DEFAULT_BUILDER  # the model builder, package.module:function (docs/guides/model.md)

    @field_validator("model")
    @classmethod
    def _builder(cls, value: str) -> str:
        builder.parse(value)
        return value

    def check_builder(self) -> None:
        """ConfigError unless `model` names a function of a module on this Python path (read, not imported)."""
        try:
            builder.find(self.model)
        except builder.BuilderError as e:
            raise ConfigError(f"invalid configuration: trainer.model: {e}") from None


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parameters: PipelineParameters = PipelineParameters()
    batch: BatchParameters = BatchParameters()
    platform: Platform = Platform()
    study: StudySpec = DEFAULT_STUDY
    trainer: TrainerSettings = TrainerSettings()

    def check_target(self, target: str) -> None:
        """ConfigError unless the training parameters also follow `target`'s own rules (those of every target are
        checked on load): on kubeflow with serving: kserve, `model_name` is the InferenceService's name (unless
        kubeflow.inference_service is set), and a local `model_repository` must lie on the shared volume, where
        KServe's storage initializer reads the versions."""
        kubeflow, parameters = self.platform.kubeflow, self.parameters
        if target != "kubeflow" or kubeflow.serving != "kserve":
            return
        try:
            if not kubeflow.inference_service:
                names.inference_service(parameters.model_name, "parameters.model_name")
        except names.InvalidName as e:
            raise ConfigError(
                f"invalid configuration: {e}: on kubeflow it names the InferenceService (or set "
                "platform.kubeflow.inference_service)"
            ) from None
        repository, mount = parameters.model_repository, kubeflow.volume.mount_path
        if repository and "://" not in repository and not os.path.normpath(repository).startswith(f"{mount}/"):
            raise ConfigError(
                f"invalid configuration: parameters.model_repository: on kubeflow with serving: kserve, a gs:// URI "
                f"or a folder under the volume's mount path {mount} (got {repository!r})"
            )

    def cloud_fields(
        self, target: str, pipeline: str = "training", *, compiling=False, running=False, registry=False
    ) -> list[str]:
        """The fields (`section.field`) a command sends to `target`: those `compiling` the pipeline bakes into the
        template (images, the Vertex jobs' identity, the inputs' gs:// defaults), those `running` it (creating a
        run or a schedule) passes, and the `registry` it publishes to or reads from."""
        vertex = target == "vertex"
        identity = ["service_account", "network", "encryption_spec_key_name"] if vertex else []
        platform = []
        if running:
            platform += ["project", "pipeline_root", *identity] if vertex else ["pipeline_root", "kfp_host"]
        if compiling:
            platform += [*identity, *self.platform.images_used(target, pipeline)]
            platform += ["tensorboard"] if vertex and pipeline == "training" else []
        if registry:
            platform.append("template_registry")
        fields = [f"platform.{name}" for name in dict.fromkeys(platform)]
        if compiling and pipeline == "training":
            fields += [
                f"parameters.{n}" for n in ["data_source"] + ([] if vertex else ["model_repository", "serving_url"])
            ]
        elif compiling:
            fields += [f"batch.{n}" for n in ["instances", "model", "output_prefix" if vertex else "model_repository"]]
        return fields

    def example_values(self, fields: Sequence[str]) -> list[str]:
        """`section.field=value` of each of `fields` that holds an example value (EXAMPLE_VALUE); the pipeline inputs
        only when they name something in the cloud (gs://..., projects/...), not a local path."""
        found = []
        for field in fields:
            section, name = field.split(".")
            value = str(getattr(getattr(self, section), name))
            remote = section == "platform" or "://" in value or value.startswith("projects/")
            if remote and EXAMPLE_VALUE.search(value):
                found.append(f"{field}={value}")
        return found


@dataclass(frozen=True)
class Override:
    """One value set at a dotted path (`platform.schedule.cron`), and where it came from."""

    path: tuple[str, ...]
    value: Any
    source: str  # TFPIPE_PLATFORM__TRAINER_IMAGE, --set platform.trainer_image, ...


def _parse_value(text: str):
    """An override's value: YAML for mappings and lists (`{team: ml}`, `[a, b]`), else the string itself (pydantic
    converts strings to the field's type: `5` to an int, `true` to a bool), so `1234567` stays a string for str
    fields such as image tags and commits."""
    if text.strip()[:1] in ("{", "["):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(value, (dict, list)):
            return value
    return text


def parse_set(assignment: str) -> Override:
    """`--set section.field[.subfield]=value`."""
    key, sep, value = assignment.partition("=")
    path = tuple(part.strip() for part in key.strip().split("."))
    if sep and all(path) and path[0] not in SECTIONS:
        raise ConfigError(f"--set {assignment}: {path[0]!r} is not a section; use one of: {', '.join(SECTIONS)}")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"--set {assignment}: expected SECTION.FIELD=VALUE, e.g. platform.trainer_image=IMAGE")
    return Override(path, _parse_value(value), f"--set {key.strip()}")


def env_overrides(environ: Mapping[str, str]) -> list[Override]:
    """`TFPIPE_<SECTION>__<FIELD>[__<SUBFIELD>]=value` variables (names are case-insensitive after the prefix).
    Read here, not with pydantic-settings: they rank between the profile and `--set`, and an error names the
    variable its value came from."""
    found = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == PROFILE_ENV:
            continue
        section, sep, field = name[len(ENV_PREFIX) :].partition("__")
        if section.lower() not in SECTIONS:
            typo = next((s for s in SECTIONS if section.lower().startswith(s + "_")), None)
            if typo:
                raise ConfigError(
                    f"{name}: separate the section and the field with two underscores, like "
                    f"{ENV_PREFIX}{typo.upper()}__{section[len(typo) + 1 :]}"
                )
            continue  # another tfpipe variable (TFPIPE_SERVING_STATE, ...)
        parts = field.split("__")
        if not sep or not all(parts):
            raise ConfigError(f"{name}: name a field after the section, like {ENV_PREFIX}{section.upper()}__FIELD")
        found.append(Override((section.lower(), *(p.lower() for p in parts)), _parse_value(environ[name]), name))
    return found


def _merge(base: dict, over: Mapping, path: tuple, sources: dict, source: str) -> None:
    """Deep-merge `over` into `base` (mappings merge key by key; anything else replaces)."""
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value, path + (key,), sources, source)
        else:
            base[key] = copy.deepcopy(value)
            sources[path + (key,)] = source


def _assign(raw: dict, override: Override, sources: dict) -> None:
    node = raw
    for i, key in enumerate(override.path[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{override.source}: {'.'.join(override.path[: i + 1])} is not a mapping")
        node = child
    node[override.path[-1]] = copy.deepcopy(override.value)
    sources[override.path] = override.source


def _describe(error: ValidationError, sources: Mapping[tuple, str] | None = None, prefix: str = "") -> str:
    """Every error as `section.field: message`, with where an overriding value came from."""
    messages = []
    for e in error.errors():
        loc = tuple(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] != "value_error" and isinstance(e.get("input"), (str, int, float, bool)):
            message += f" (got {e['input']!r})"
        source = next(
            ((sources or {}).get(loc[:n]) for n in range(len(loc), 0, -1) if (sources or {}).get(loc[:n])), None
        )
        if source:
            message += f" (from {source})"
        messages.append(f"{prefix}{'.'.join(loc) or 'config'}: {message}")
    return "; ".join(messages)


def _read(path: str | Path | None) -> dict:
    if not path:
        return {}
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping with 'parameters', 'platform', ... sections")
    return raw


def _base(raw: Mapping) -> dict:
    """The file's sections, the study seeded with the default study (a partial study section keeps its search
    space)."""
    base = {k: copy.deepcopy(v) for k, v in raw.items() if k != "profiles"}
    for section in SECTIONS:
        if base.get(section) is None:
            base.pop(section, None)
        elif not isinstance(base[section], dict):
            raise ConfigError(f"invalid configuration: {section}: must be a mapping")
    study = DEFAULT_STUDY.model_dump()
    _merge(study, base.get("study") or {}, ("study",), {}, "")
    base["study"] = study
    return base


def _profiles(raw: Mapping) -> dict:
    profiles = raw.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise ConfigError("invalid configuration: profiles: must map profile names to sections")
    for name, body in profiles.items():
        if not isinstance(body, dict):
            raise ConfigError(f"invalid configuration: profiles.{name}: must be a mapping of sections")
        for key, value in body.items():
            if key not in SECTIONS:
                raise ConfigError(
                    f"invalid configuration: profiles.{name}.{key}: not a section; use one of: {', '.join(SECTIONS)}"
                )
            if value is not None and not isinstance(value, dict):
                raise ConfigError(f"invalid configuration: profiles.{name}.{key}: must be a mapping")
    return profiles


def profile_names(path: str | Path | None) -> list[str]:
    return sorted(_profiles(_read(path)))


def load_config(
    path: str | Path | None = None,
    overrides: dict | None = None,
    batch_overrides: dict | None = None,
    *,
    profile: str | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read `path` (YAML) if given; deep-merge the selected profile (`profile`, else `$TFPIPE_PROFILE`) over its
    sections; apply the `TFPIPE_<SECTION>__<FIELD>` variables of `environ` (default: os.environ), then the
    `sets` (`section.field=value`), then parameter `overrides` and batch-pipeline `batch_overrides` (None values
    ignored); validate. Every other profile of the file is validated too."""
    environ = os.environ if environ is None else environ
    raw = _read(path)
    profiles = _profiles(raw)
    profile = profile if profile is not None else environ.get(PROFILE_ENV, "")
    config = _base(raw)
    sources: dict[tuple, str] = {}
    if profile:
        if not path:
            raise ConfigError(f"profile {profile!r}: profiles are defined in a config file; pass --config FILE")
        if profile not in profiles:
            available = ", ".join(sorted(profiles)) or "none"
            raise ConfigError(f"unknown profile {profile!r}: config file {path} defines profiles: {available}")
        _merge(config, {k: v for k, v in profiles[profile].items() if v is not None}, (), sources, f"profile {profile}")
    for override in env_overrides(environ) + [parse_set(item) for item in sets]:
        _assign(config, override, sources)
    for section, values in (("parameters", overrides), ("batch", batch_overrides)):
        for key, value in (values or {}).items():
            if value is not None:
                _assign(config, Override((section, key), value, "the command line"), sources)
    try:
        result = Config.model_validate(config)
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {_describe(e, sources)}") from None
    for name, body in profiles.items():  # a broken profile fails every load, not only the day it is used
        if name != profile:
            other = _base(raw)
            _merge(other, {k: v for k, v in body.items() if v is not None}, (), {}, "")
            try:
                Config.model_validate(other)
            except ValidationError as e:
                raise ConfigError(f"invalid configuration: {_describe(e, prefix=f'profiles.{name}.')}") from None
    return result
