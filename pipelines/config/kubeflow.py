"""The kubeflow target's settings (`platform.kubeflow`): the Kubeflow engine of each heavy step, where its objects
go, the shared volume and the resources of every pod."""

from __future__ import annotations

import os
import re
import warnings
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core import names
from pipelines.config.errors import ConfigError
from pipelines.config.fields import InferenceService, KubernetesSubdomain
from pipelines.config.parameters import PipelineParameters

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")  # Kubernetes CPU/memory quantities
_DNS_LABEL = names.DNS_LABEL
DEFAULT_STEP = "default"
TRAINING_RENAMED = (
    "platform.kubeflow.training: operator is deprecated, read as tfjob: write tfjob, or auto to train as a TrainJob "
    "where the cluster serves Kubeflow Trainer v2"
)  # kubeflow.step_resources key for every step without its own entry


class Resources(BaseModel):
    """Kubernetes requests and limits of one container ("" = not set: the namespace's defaults apply)."""

    model_config = ConfigDict(extra="forbid")

    cpu_request: str = Field(
        "", description="CPU request, a Kubernetes quantity like 500m or 2 (empty: the namespace's default)."
    )
    cpu_limit: str = Field(
        "", description="CPU limit, a Kubernetes quantity like 500m or 2 (empty: the namespace's default)."
    )
    memory_request: str = Field(
        "", description="Memory request, a Kubernetes quantity like 512Mi or 1Gi (empty: the namespace's default)."
    )
    memory_limit: str = Field(
        "", description="Memory limit, a Kubernetes quantity like 512Mi or 4Gi (empty: the namespace's default)."
    )
    gpus: int = Field(
        0,
        ge=0,
        description="NVIDIA GPUs (nvidia.com/gpu), set as a limit; Kubernetes makes the request equal (0: none).",
    )

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


class Volume(BaseModel):
    """The PersistentVolumeClaim every kubeflow step, TFJob replica, Katib trial and KServe predictor shares: data
    sources, staged data sets, training outputs and the model repository live on it."""

    model_config = ConfigDict(extra="forbid")

    claim_name: KubernetesSubdomain = Field(
        "tfpipe",
        description=(
            "The PersistentVolumeClaim every step and engine pod mounts (ReadWriteMany when TFJob replicas land on "
            "several nodes); empty: no volume, then only training: pod, tuning: pod and serving: url or none."
        ),
    )
    mount_path: str = Field(
        "/mnt/tfpipe",
        description=(
            "Where every pod mounts the volume, an absolute path other than /; compiled templates keep the model "
            "repository under it (<mount_path>/model-repository)."
        ),
    )

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

    training: Literal["auto", "trainjob", "tfjob", "pod"] = Field(
        "auto",
        description=(
            "The training engine: auto, a TrainJob when the cluster serves Kubeflow Trainer v2, else a TFJob when it "
            "serves the training operator (the step checks at run time and logs its choice); trainjob, a TrainJob "
            "on the TrainingRuntime of manifests/kubeflow/trainer-v2; tfjob, a TFJob of the training operator v1.9 "
            "(operator, its former name, is read as tfjob with a warning); pod, the workers as processes in the "
            "step's own pod (one node)."
        ),
    )

    @field_validator("training", mode="before")
    @classmethod
    def _renamed(cls, value):
        if value == "operator":
            warnings.warn(TRAINING_RENAMED, FutureWarning, stacklevel=2)
            return "tfjob"
        return value

    tuning: Literal["katib", "pod"] = Field(
        "katib",
        description=(
            "The hyperparameter study's engine: katib, a Katib Experiment; pod, the trials as processes in the step's "
            "own pod."
        ),
    )
    serving: Literal["kserve", "url", "none"] = Field(
        "kserve",
        description=(
            "How the model is served: kserve, an InferenceService; url, check the TF Serving at the serving_url "
            "parameter; none, publish only (the newest repository version is the champion)."
        ),
    )
    namespace: str = Field(
        "", description="Namespace of the TFJob, Experiment and InferenceService (empty: the run's namespace)."
    )
    service_account: str = Field(
        "",
        description=(
            "Kubernetes service account of the TFJob's, Experiment's and InferenceService's pods (empty: the "
            "namespace's default)."
        ),
    )
    volume: Volume = Field(
        Volume(),
        description=(
            "The PersistentVolumeClaim every step and engine pod mounts: the data sources, staged data sets, "
            "training outputs and the model repository live on it."
        ),
    )
    step_resources: dict[str, Resources] = Field(
        default_factory=_default_step_resources,
        description=(
            "Resources of each step's container by step name (prepare-data, train-model-on-operator, ...); the "
            "`default` entry applies to the steps without their own. train-model and tune-hyperparameters "
            "(training: pod, tuning: pod) run several processes and get more by default."
        ),
    )
    worker_resources: Resources = Field(
        Resources(cpu_request="2", memory_request="4Gi", memory_limit="8Gi"),
        description="Resources of each TFJob replica and Katib trial; gpus > 0 runs them on trainer_gpu_image.",
    )
    serving_resources: Resources = Field(
        Resources(cpu_request="1", memory_request="2Gi", memory_limit="4Gi"),
        description=(
            "Resources of each KServe predictor replica; gpus > 0 runs the predictor on serving_gpu_image "
            "(predictor: serving_image)."
        ),
    )
    predictor: Literal["serving_image"] = Field(
        "serving_image",
        description=(
            "KServe's predictor: serving_image, this project's serving image as a custom container, serving the one "
            "version its revision mounts (so a canary and a rollback each serve their own version); tensorflow "
            "(KServe's TF Serving runtime) is refused, as it serves the newest version under the model's folder."
        ),
    )
    serving_mode: Literal["auto", "knative", "standard"] = Field(
        "auto",
        description=(
            "KServe's deployment mode of the InferenceService: auto, the cluster's (KServe's status.deploymentMode "
            "of the InferenceService, the config map's default for a new one); knative or standard to require it "
            "(a new InferenceService asks for it; one in the other mode is refused). A canary (traffic_percentage "
            "< 100) needs Knative mode, or Standard mode on KServe 0.20 or later (spec.canary)."
        ),
    )
    inference_service: InferenceService = Field(
        "", description="The InferenceService's name (empty: the model_name parameter)."
    )
    poll_seconds: float = Field(
        10, gt=0, description="How often the engine steps read their object's status, in seconds."
    )
    training_timeout_minutes: int = Field(
        24 * 60,
        ge=1,
        description="Minutes the TFJob may take; the training step fails when it has not finished by then.",
    )
    tuning_timeout_minutes: int = Field(
        24 * 60,
        ge=1,
        description="Minutes the Katib Experiment may take; the tuning step fails when it has not finished by then.",
    )
    keep_experiment: bool = Field(
        False,
        description=(
            "Keep the Katib Experiment (its trials, their Jobs and pods' logs) once the study has ended, to inspect "
            "it; by default the tuning step deletes it, so experiments do not pile up in the namespace."
        ),
    )
    serving_timeout_minutes: int = Field(
        15,
        ge=1,
        description="Minutes the new InferenceService revision has to become Ready; past them it is rolled back.",
    )

    @field_validator("predictor", mode="before")
    @classmethod
    def _predictor(cls, value: object) -> object:
        if value == "tensorflow":
            raise ValueError(
                "tensorflow (KServe's TF Serving runtime) is not supported: TF Serving serves the newest numbered "
                "version under the model's folder, so a canary and the revision a failed rollout restores would serve "
                "the same version (and its releases trail the trainer's TensorFlow); use predictor: serving_image, "
                "this project's serving image, which serves one version per revision"
            )
        return value

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
            for field, engines in (
                ("training", ("auto", "trainjob", "tfjob")),
                ("tuning", ("katib",)),
                ("serving", ("kserve",)),
            )
            if getattr(self, field) in engines
        ]
        if needs and not self.volume.claim_name:
            raise ValueError(
                f"{', '.join(needs)} need volume.claim_name: the engines' pods read the data and the "
                "models from that PersistentVolumeClaim (or choose pod / url / none)"
            )
        return self

    def resources_of(self, step: str) -> Resources:
        return self.step_resources.get(step) or self.step_resources.get(DEFAULT_STEP) or Resources()

    def training_images(self) -> list[str]:
        """The image fields (Platform's) the training pipeline's engine pods run, besides the components image: the
        trainer's for a TFJob or Katib trials, the serving image's for KServe's custom predictor (GPU variants when
        they get GPUs)."""
        used = []
        if self.training != "pod" or self.tuning == "katib":
            used.append("trainer_gpu_image" if self.worker_resources.gpus else "trainer_image")
        if self.serving == "kserve":
            used.append("serving_gpu_image" if self.serving_resources.gpus else "serving_image")
        return used

    def check_parameters(self, parameters: PipelineParameters) -> None:
        """ConfigError unless the training parameters suit these settings: with serving: kserve, `model_name` is
        the InferenceService's name (unless inference_service is set), and a local `model_repository` must lie on
        the shared volume, where KServe's storage initializer reads the versions."""
        if self.serving != "kserve":
            return
        try:
            if not self.inference_service:
                names.inference_service(parameters.model_name, "parameters.model_name")
        except names.InvalidName as e:
            raise ConfigError(
                f"invalid configuration: {e}: on kubeflow it names the InferenceService (or set "
                "platform.kubeflow.inference_service)"
            ) from None
        repository, mount = parameters.model_repository, self.volume.mount_path
        if repository and "://" not in repository and not os.path.normpath(repository).startswith(f"{mount}/"):
            raise ConfigError(
                f"invalid configuration: parameters.model_repository: on kubeflow with serving: kserve, a gs:// URI "
                f"or a folder under the volume's mount path {mount} (got {repository!r})"
            )
