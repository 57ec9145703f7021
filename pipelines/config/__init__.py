"""Run configuration: pipeline parameters (the ML knobs, typed pipeline inputs: parameters.py) and platform settings
(project, images, machines, region, submission and schedule settings: platform.py, the kubeflow target's in
kubeflow.py), the trainer settings (trainer.py), the whole config and what a command sends of it to a target
(sections.py, target_use.py), loaded from a YAML file with profiles, the environment and `--set` overrides
(loading.py). The names and locations follow the rules of core.names (fields.py)."""

from core.names import (
    KMS_KEY,
    LABEL_KEY,
    LABEL_VALUE,
    MAX_LABELS,
    NETWORK,
    NETWORK_ATTACHMENT,
    PERSISTENT_RESOURCE_ID,
    TENSORBOARD,
)
from pipelines.config.errors import ConfigError
from pipelines.config.kubeflow import KubeflowSettings, Resources, Volume
from pipelines.config.loading import env_overrides, load_config, parse_set, profile_names
from pipelines.config.parameters import (
    PIPELINE_NAMES,
    PIPELINES,
    TARGETS,
    BatchParameters,
    PipelineParameters,
    described_by,
)
from pipelines.config.platform import SOURCE_COMMIT_LABEL, Platform, ScheduleSettings
from pipelines.config.sections import EXAMPLE_VALUE, SECTIONS, Config
from pipelines.config.trainer import TrainerSettings

__all__ = [
    "EXAMPLE_VALUE",
    "KMS_KEY",
    "LABEL_KEY",
    "LABEL_VALUE",
    "MAX_LABELS",
    "NETWORK",
    "NETWORK_ATTACHMENT",
    "PERSISTENT_RESOURCE_ID",
    "PIPELINES",
    "PIPELINE_NAMES",
    "SECTIONS",
    "SOURCE_COMMIT_LABEL",
    "TARGETS",
    "TENSORBOARD",
    "BatchParameters",
    "Config",
    "ConfigError",
    "KubeflowSettings",
    "PipelineParameters",
    "Platform",
    "Resources",
    "ScheduleSettings",
    "TrainerSettings",
    "Volume",
    "described_by",
    "env_overrides",
    "load_config",
    "parse_set",
    "profile_names",
]
