"""The pipelines' inputs: the training pipeline's parameters and the batch prediction pipeline's, with their
defaults and descriptions (the compiled inputs' own), the pipelines and their compiled names, the targets."""

from __future__ import annotations

import inspect
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from components.lib.batch.instance_formats import InstancesFormat
from pipelines.config.fields import DataSource, Instances, Location, ModelName, OutputPrefix, Url

TARGETS = ("vertex", "kubeflow", "local")
# the pipelines (`--pipeline`) and their compiled names (also their package names in a template registry)
PIPELINE_NAMES = {"training": "tfpipe-training", "batch_prediction": "tfpipe-batch-prediction"}
PIPELINES = tuple(PIPELINE_NAMES)


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
            "Local launcher: restarts of the worker group after a lost worker (a worker's error is not retried). "
            "Kubeflow TFJob: 0 fails the job on any failed replica; above 0, a replica killed by a signal (exit code "
            ">= 128) gets a new pod with no count limit until training_timeout_minutes, and any other exit code "
            "fails the job."
        ),
    )
    accuracy_threshold: float = Field(
        0.9, ge=0, le=1, description=("Evaluation gate: the test accuracy the model must reach to be blessed.")
    )
    champion_tolerance: float = Field(
        0.01, ge=0, description=("Evaluation gate: how far below the champion's test accuracy the model may be.")
    )
    drift_max_class_distance: float = Field(
        0.15,
        ge=0,
        le=1,
        description=(
            "Data drift check: the largest L-infinity distance accepted between the class shares of the champion's "
            "training split and this data's."
        ),
    )
    drift_max_js_divergence: float = Field(
        0.2,
        ge=0,
        le=1,
        description=(
            "Data drift check: the largest Jensen-Shannon divergence (base 2) accepted between the champion's "
            "training data and this data, for each numeric feature's histogram and the image sizes'."
        ),
    )
    drift_action: Literal["stop", "warn"] = Field(
        "stop", description="Data drift check: past a limit, stop the run before the study, or warn and go on."
    )
    model_repository: Location = Field(
        "",
        description=(
            "Self-hosted: the versioned model repository (empty: runs/model_repository for local runs, "
            "<volume mount path>/model-repository for compiled kubeflow templates)."
        ),
    )
    model_name: ModelName = Field("tfpipe-model", description="Self-hosted: the model's name in the repository.")
    source_commit: str = Field(
        "",
        description=(
            "Commit recorded with the published version (local runs: git HEAD; Vertex: the version's label "
            "source_commit, a label value)."
        ),
    )
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
    tflite_qat: bool = Field(
        False,
        description=(
            "int8 mode: when the post-training int8 model misses the accuracy gate, fine-tune the model with fake "
            "quantization (quantization-aware training), convert it to int8 and gate that instead."
        ),
    )
    tflite_qat_epochs: int = Field(2, ge=1, description="Epochs of quantization-aware fine-tuning on the train split.")
    tflite_qat_learning_rate: float = Field(
        1e-4, gt=0, description="Adam learning rate of quantization-aware fine-tuning."
    )
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
    serving_ssl_config_file: str = Field(
        "",
        description=(
            "Local server: TF Serving's SSLConfig text file (PEM text of server_key, server_cert, custom_ca; "
            "client_verify) to serve gRPC and REST over TLS (empty: plaintext)."
        ),
    )
    serving_version_policy: Literal["availability-preserving", "resource-preserving"] = Field(
        "availability-preserving",
        description=(
            "Local server: how a new version replaces the old (TF Serving's aspired-version policy): load it, then "
            "unload the old; or resource-preserving, for a model that does not fit in memory twice: unload the old "
            "first (requests get NOT_FOUND until the new one is loaded). A running server with the other policy is "
            "refused."
        ),
    )
    serving_ca_file: str = Field(
        "",
        description="Self-hosted deploy check of a TLS server: the CA file of its certificate (empty: the system's).",
    )
    serving_client_cert_file: str = Field(
        "",
        description=(
            "Self-hosted deploy check of a server with client_verify: PEM file of a client certificate and its key."
        ),
    )

    @model_validator(mode="after")
    def _fractions(self):
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        if self.rest_port == self.grpc_port != 0:
            raise ValueError(f"rest_port and grpc_port must differ (both {self.rest_port})")
        if self.tflite_qat and self.tflite_mode != "int8":
            raise ValueError(f"tflite_qat fine-tunes for int8: it needs tflite_mode int8, not {self.tflite_mode}")
        return self


class BatchParameters(BaseModel):
    """Inputs of the batch prediction pipeline, with their defaults; each field's description is its compiled
    input's description. `instances` has no compiled default (an empty value here leaves the compiled pipeline input
    required)."""

    model_config = ConfigDict(extra="forbid")

    instances: Instances = Field(
        "",
        description=(
            "The instances: comma-separated paths or globs (Vertex: gs:// URIs), or with instances_format bigquery "
            "a BigQuery table bq://PROJECT.DATASET.TABLE (Vertex only)."
        ),
    )
    instances_format: InstancesFormat = Field(
        "jsonl",
        description="Format of the instances: jsonl, csv, tf-record, tf-record-gzip, file-list or bigquery (Vertex).",
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
    output_prefix: OutputPrefix = Field(
        "",
        description=(
            "Vertex: gs:// prefix of the output directory (JSON Lines), or a BigQuery project bq://PROJECT or "
            "dataset bq://PROJECT.DATASET that gets the predictions and errors tables (empty: under the pipeline "
            "root)."
        ),
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
        table = self.instances.strip().startswith("bq://")
        if self.instances and table and self.instances_format != "bigquery":
            raise ValueError(
                f"instances {self.instances} is a BigQuery table: set instances_format bigquery "
                f"({self.instances_format} instances are files)"
            )
        if self.instances and not table and self.instances_format == "bigquery":
            raise ValueError(
                "instances_format bigquery reads a BigQuery table: give instances as bq://PROJECT.DATASET.TABLE"
            )
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
