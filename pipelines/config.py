"""Run configuration: pipeline parameters (the ML knobs, typed pipeline inputs) and platform settings (images,
machines, region: fixed at compile time). Loaded from a YAML file with `parameters:` (training pipeline),
`batch:` (batch prediction pipeline), `platform:` and `study:` sections."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from components.study_spec import DEFAULT_STUDY, StudySpec

TARGETS = ("vertex", "kubeflow", "local")
PIPELINES = ("training", "batch_prediction")
INSTANCES_FORMATS = ("jsonl", "csv", "tf-record", "tf-record-gzip", "file-list")
# Vertex AI naming rules (Model.version_aliases, resource labels)
_ALIAS = re.compile(r"^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


class ConfigError(ValueError):
    """The configuration is invalid (user-facing message)."""


class PipelineParameters(BaseModel):
    """Inputs of the training pipeline, with their defaults (also the compiled pipeline's defaults)."""

    model_config = ConfigDict(extra="forbid")

    data_source: str = "builtin:digits"
    workers: int = Field(2, ge=1, le=64)
    epochs: int = Field(15, ge=1)
    batch_size: int = Field(32, ge=1)
    learning_rate: float = Field(0.003, gt=0)
    val_fraction: float = Field(0.1, gt=0, lt=1)
    test_fraction: float = Field(0.1, gt=0, lt=1)
    image_size: int = Field(0, ge=0)
    label_column: str = "label"
    max_corrupt_fraction: float = Field(0.05, ge=0, le=1)
    split_salt: str = ""
    max_restarts: int = Field(2, ge=0)
    accuracy_threshold: float = Field(0.9, ge=0, le=1)
    champion_tolerance: float = Field(0.01, ge=0)
    model_repository: str = ""
    model_name: str = "tfpipe-model"
    source_commit: str = ""
    tune: bool = True
    tuning_trial_epochs: int = Field(2, ge=1)
    tflite_mode: Literal["float32", "dynamic", "float16", "int8"] = "dynamic"
    tflite_max_accuracy_drop: float = Field(1.0, ge=0)
    tflite_compare_all_modes: bool = True
    tflite_int8_io: bool = False
    tflite_allow_flex: bool = False
    deploy: bool = True  # deploy the registered model (Vertex endpoint / TF Serving on the repository)
    traffic_percentage: int = Field(100, ge=1, le=100)  # Vertex: the new deployed model's share (canary < 100)
    serving_url: str = ""  # self-hosted: a TF Serving watching model_repository; "" = start the local server
    rest_port: int = Field(8501, ge=0, le=65535)  # 0: any free port
    grpc_port: int = Field(8500, ge=0, le=65535)

    @model_validator(mode="after")
    def _fractions(self):
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        if self.rest_port == self.grpc_port != 0:
            raise ValueError(f"rest_port and grpc_port must differ (both {self.rest_port})")
        return self


class BatchParameters(BaseModel):
    """Inputs of the batch prediction pipeline, with their defaults. `instances` has no compiled default (an empty
    value here leaves the compiled pipeline input required)."""

    model_config = ConfigDict(extra="forbid")

    instances: str = ""  # comma-separated paths or globs (Vertex: gs:// URIs)
    instances_format: Literal["jsonl", "csv", "tf-record", "tf-record-gzip", "file-list"] = "jsonl"
    model: str = ""  # "" = the champion; else a version (self-hosted: number or path; Vertex: version id, alias
    #                  or a projects/.../models/...[@version] resource name)
    model_repository: str = ""
    model_name: str = "tfpipe-model"
    batch_size: int = Field(64, ge=1)
    key_field: str = ""
    output_prefix: str = ""  # Vertex: gs:// prefix of the output directory ("" = under the pipeline root)

    def pipeline_arguments(self) -> dict:
        """The values as pipeline inputs (an empty `instances` is left out: the input stays required)."""
        return {k: v for k, v in self.model_dump().items() if k != "instances" or v}


class Platform(BaseModel):
    """Compile-time settings of the cloud targets."""

    model_config = ConfigDict(extra="forbid")

    components_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/components:latest"
    trainer_image: str = "us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest"
    serving_image: str = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    location: str = "us-central1"
    machine_type: str = "n1-standard-4"
    accelerator_type: str = ""
    accelerator_count: int = Field(0, ge=0)
    model_display_name: str = "tfpipe-model"
    model_version_aliases: list[str] = ["champion"]  # moved to each uploaded version; the first one is what
    #                                                   batch prediction uses as "the champion"
    model_labels: dict[str, str] = {}
    endpoint_display_name: str = "tfpipe-endpoint"
    serving_machine_type: str = "n1-standard-2"
    serving_min_replicas: int = Field(1, ge=1)
    serving_max_replicas: int = Field(1, ge=1)
    serving_accelerator_type: str = ""
    serving_accelerator_count: int = Field(0, ge=0)
    batch_machine_type: str = "n1-standard-4"
    batch_starting_replicas: int = Field(1, ge=1)
    batch_max_replicas: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _vertex_rules(self):
        for alias in self.model_version_aliases:
            if not _ALIAS.match(alias):
                raise ValueError(f"model_version_aliases: {alias!r} must match {_ALIAS.pattern}")
        if len(set(self.model_version_aliases)) != len(self.model_version_aliases):
            raise ValueError("model_version_aliases must be distinct")
        for key, value in self.model_labels.items():
            if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
                raise ValueError(f"model_labels: {key}={value!r}: keys must match {_LABEL_KEY.pattern} and values "
                                 f"{_LABEL_VALUE.pattern}")
        if self.serving_max_replicas < self.serving_min_replicas:
            raise ValueError(f"serving_max_replicas ({self.serving_max_replicas}) must be >= serving_min_replicas "
                             f"({self.serving_min_replicas})")
        if self.batch_max_replicas < self.batch_starting_replicas:
            raise ValueError(f"batch_max_replicas ({self.batch_max_replicas}) must be >= batch_starting_replicas "
                             f"({self.batch_starting_replicas})")
        if bool(self.serving_accelerator_type) != bool(self.serving_accelerator_count):
            raise ValueError("serving_accelerator_type and serving_accelerator_count must be set together")
        return self


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parameters: PipelineParameters = PipelineParameters()
    batch: BatchParameters = BatchParameters()
    platform: Platform = Platform()
    study: StudySpec = DEFAULT_STUDY


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "config"
    return f"{field}: {first['msg']}" + (f" (got {first['input']!r})" if "input" in first else "")


def load_config(path: str | Path | None = None, overrides: dict | None = None,
                batch_overrides: dict | None = None) -> Config:
    """Read `path` (YAML) if given, apply parameter `overrides` and batch-pipeline `batch_overrides` (None values
    ignored), validate."""
    raw: dict = {}
    if path:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config file {path} must hold a mapping with 'parameters' and/or 'platform'")
    def merged(section: str, values: dict | None) -> dict:
        return {**(raw.get(section) or {}), **{k: v for k, v in (values or {}).items() if v is not None}}

    try:
        return Config.model_validate({**raw, "parameters": merged("parameters", overrides),
                                      "batch": merged("batch", batch_overrides), "platform": raw.get("platform") or {}})
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {_describe(e)}") from None
