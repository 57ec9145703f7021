"""What each target takes from the configuration, as data: the fields a command sends to it and the rules its own
settings add to the training parameters. The config asks this table instead of testing the target's name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.config.parameters import PipelineParameters
    from pipelines.config.platform import Platform


def _no_images(platform: Platform) -> list[str]:
    return []


def _no_rules(platform: Platform, parameters: PipelineParameters) -> None:
    return None


@dataclass(frozen=True)
class TargetUse:
    """One target's use of the config, by field name (Platform's, or the pipeline inputs')."""

    submitted: tuple[str, ...] = ()  # platform fields that creating a run or a schedule passes
    identity: tuple[str, ...] = ()  # platform fields of the jobs' identity: compiled in, and passed with each run
    compiled_training: tuple[str, ...] = ()  # further platform fields the training pipeline bakes in
    training_inputs: tuple[str, ...] = ()  # training inputs whose compiled defaults may name places in the cloud
    batch_inputs: tuple[str, ...] = ()  # the same of the batch prediction pipeline
    # the image fields the training pipeline runs besides the components image (every step's)
    training_images: Callable[[Platform], list[str]] = _no_images
    # ConfigError unless the training parameters follow the rules the target's settings add
    check_parameters: Callable[[Platform, PipelineParameters], None] = _no_rules


TARGET_USE = {
    "vertex": TargetUse(
        submitted=("project", "pipeline_root"),
        identity=("service_account", "network", "encryption_spec_key_name"),
        compiled_training=("tensorboard", "persistent_resource_id", "psc_network_attachment"),
        training_inputs=("data_source",),
        batch_inputs=("instances", "model", "output_prefix"),
        training_images=lambda platform: platform.vertex_training_images(),
        check_parameters=lambda platform, parameters: platform.check_vertex_parameters(parameters),
    ),
    "kubeflow": TargetUse(
        submitted=("pipeline_root", "kfp_host"),
        training_inputs=("data_source", "model_repository", "serving_url"),
        batch_inputs=("instances", "model", "model_repository"),
        training_images=lambda platform: platform.kubeflow.training_images(),
        check_parameters=lambda platform, parameters: platform.kubeflow.check_parameters(parameters),
    ),
    "local": TargetUse(),  # runs on this machine: nothing compiled or submitted, no rule of its own
}
