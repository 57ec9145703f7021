"""Run configuration: pipeline parameters (the ML knobs, typed pipeline inputs) and platform settings (images,
machines, region: fixed at compile time). Loaded from a YAML file with `parameters:` and `platform:` sections."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from components.study_spec import DEFAULT_STUDY, StudySpec

TARGETS = ("vertex", "kubeflow", "local")


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

    @model_validator(mode="after")
    def _fractions(self):
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        return self


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


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parameters: PipelineParameters = PipelineParameters()
    platform: Platform = Platform()
    study: StudySpec = DEFAULT_STUDY


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "config"
    return f"{field}: {first['msg']}" + (f" (got {first['input']!r})" if "input" in first else "")


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> Config:
    """Read `path` (YAML) if given, apply parameter `overrides` (None values ignored), validate."""
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
    params = {**(raw.get("parameters") or {}), **{k: v for k, v in (overrides or {}).items() if v is not None}}
    try:
        return Config.model_validate({**raw, "parameters": params, "platform": raw.get("platform") or {}})
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {_describe(e)}") from None
