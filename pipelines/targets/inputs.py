"""The typed inputs of the platform seam's steps (`PlatformOps`), each defined once, and the values the steps hand
on. A `Channel` is a value known when the pipeline runs (a pipeline input or a task's output); constants keep their
own type. Fields are named as the steps' components take them, so `keywords` hands a group on as it is."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeAlias

from kfp.dsl import PipelineTask
from kfp.dsl.pipeline_channel import PipelineChannel

from components.lib.study.spec import StudySpec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Channel: TypeAlias = PipelineChannel


def keywords(group: DataclassInstance) -> dict[str, Any]:
    """A group's fields as keyword arguments of a component (each value as is: channels stay channels)."""
    return {field.name: getattr(group, field.name) for field in fields(group)}


@dataclass(frozen=True)
class Repository:
    """The model's place on the self-hosted targets: the model repository and the model's name in it (Vertex uses
    the registry model with the configured display name instead)."""

    model_repository: Channel
    model_name: Channel


@dataclass(frozen=True)
class Champion:
    """The champion the gate compares with (`find_champion`): its path, name and model URI ("" when none)."""

    path: Channel
    name: Channel
    model_uri: Channel


@dataclass(frozen=True)
class Trained:
    """What the training step hands downstream."""

    model: Channel  # Model artifact
    training: Channel  # Artifact: metrics.json, history.jsonl
    model_uri: Channel | None = None  # the model's URI (Vertex: feeds the serving-container importer)


@dataclass(frozen=True)
class Gate:
    """The evaluation gate's verdict: `blessed` (bool), the `evaluation` artifact and the candidate's
    `smoke_checks` (`smoke.write_checks`)."""

    blessed: Channel
    evaluation: Channel
    smoke_checks: Channel


@dataclass(frozen=True)
class PrepareInputs:
    """Data prep: the source and how to split and check it."""

    data_source: Channel
    num_workers: Channel
    val_fraction: Channel
    test_fraction: Channel
    image_size: Channel
    label_column: Channel
    max_corrupt_fraction: Channel
    split_salt: Channel


@dataclass(frozen=True)
class ChampionCheckInputs:
    """The prepared dataset, the champion it must fit (labels, input) and the data drift limits."""

    dataset: Channel
    champion: Champion
    drift_max_class_distance: Channel
    drift_max_js_divergence: Channel
    drift_action: Channel


@dataclass(frozen=True)
class TuneInputs:
    """The hyperparameter study: its spec, whether it runs, the values it starts from, and the final training's
    workers, whose global batch its trials train at."""

    dataset: Channel
    study: StudySpec
    enabled: Channel
    trial_epochs: Channel
    batch_size: Channel
    learning_rate: Channel
    workers: Channel
    after: PipelineTask  # the step the study waits for


@dataclass(frozen=True)
class TrainInputs:
    """The final training."""

    dataset: Channel
    workers: Channel
    epochs: Channel
    hyperparameters: Channel  # dict: what `tune` returns
    max_restarts: Channel


@dataclass(frozen=True)
class EvaluateInputs:
    """The evaluation gate: the trained model against the thresholds and the champion."""

    trained: Trained
    dataset: Channel
    accuracy_threshold: Channel
    champion_tolerance: Channel
    champion: Champion


@dataclass(frozen=True)
class RegisterInputs:
    """The blessed model, registered with its evaluation and provenance."""

    trained: Trained
    dataset: Channel
    evaluation: Channel
    repository: Repository
    source_commit: Channel


@dataclass(frozen=True)
class DeployInputs:
    """The registered model's deploy, when `enabled`."""

    enabled: Channel
    registered: Channel  # what `register` returns
    dataset: Channel
    smoke_checks: Channel  # the gate's, of the registered candidate (the Vertex AI deploy's check)
    traffic_percentage: Channel
    repository: Repository
    serving_url: Channel
    rest_port: Channel
    grpc_port: Channel
    version_policy: Channel  # the local server's aspired-version policy
    tls: ServingTls


@dataclass(frozen=True)
class ServingTls:
    """The self-hosted server's TLS: its SSLConfig file, and the CA and client certificate files of the checks."""

    ssl_config_file: Channel
    ca_file: Channel
    client_cert_file: Channel


@dataclass(frozen=True)
class QuantizeInputs:
    """TFLite quantization of the trained model."""

    model: Channel
    dataset: Channel
    mode: Channel
    max_accuracy_drop: Channel
    compare_all_modes: Channel
    int8_io: Channel
    allow_flex: Channel
    qat: Channel
    qat_epochs: Channel
    qat_learning_rate: Channel


@dataclass(frozen=True)
class InstanceOptions:
    """How the instances are read and fed to the model, as both batch predictors take them."""

    instances_format: Channel
    key_field: Channel
    included_fields: Channel
    excluded_fields: Channel
    instance_type: Channel
    signature_name: Channel


@dataclass(frozen=True)
class BatchPredictInputs:
    """Batch prediction: the instances, the model version (`model` "": the champion) and the error budget."""

    instances: Channel
    model: Channel
    repository: Repository
    batch_size: Channel
    options: InstanceOptions
    max_error_fraction: Channel
    output_prefix: Channel
