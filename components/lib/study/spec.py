"""One hyperparameter study definition for every target.

Parameters follow `google.cloud.aiplatform.hyperparameter_tuning`: double and integer ranges with a scale
(linear / log / reverse_log), categorical values and discrete values; one metric with a goal; trial budgets and an
algorithm (default / grid / random). `study_spec_metrics()` and `study_spec_parameters()` are
`HyperparameterTuningJobRunOp`'s `study_spec_metrics` / `study_spec_parameters` inputs: the JSON of Vertex's
`StudySpec.MetricSpec` / `ParameterSpec` protos, enums by name.
"""

import warnings
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer.flags import METRIC_GOALS

TRAINING_METRIC = (
    "study.metric_id {0} is the training split's {0} (Keras's name), which favours the trial that overfits most; "
    "val_{0} is the validation split's"
)

Scale = Literal["linear", "log", "reverse_log"]
_SCALE_TYPES = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE", "reverse_log": "UNIT_REVERSE_LOG_SCALE"}


class _Parameter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parameter_id: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")


class _Range(_Parameter):
    scale: Scale = "linear"

    @model_validator(mode="after")
    def _bounds(self):
        if self.min >= self.max:
            raise ValueError(f"{self.parameter_id}: min ({self.min}) must be < max ({self.max})")
        if self.scale != "linear" and self.min <= 0:
            raise ValueError(f"{self.parameter_id}: {self.scale} scale needs min > 0, got {self.min}")
        return self


class DoubleParameter(_Range):
    type: Literal["double"] = "double"
    min: float
    max: float


class IntegerParameter(_Range):
    type: Literal["integer"] = "integer"
    min: int
    max: int


class CategoricalParameter(_Parameter):
    type: Literal["categorical"] = "categorical"
    values: list[str]

    @model_validator(mode="after")
    def _values(self):
        if not self.values or len(set(self.values)) != len(self.values):
            raise ValueError(f"{self.parameter_id}: categories must be non-empty and distinct, got {self.values}")
        return self


class DiscreteParameter(_Parameter):
    type: Literal["discrete"] = "discrete"
    values: list[float]
    scale: Scale = "linear"

    @model_validator(mode="after")
    def _values(self):
        if not self.values or len(set(self.values)) != len(self.values):
            raise ValueError(f"{self.parameter_id}: discrete values must be non-empty and distinct, got {self.values}")
        self.values = sorted(self.values)
        return self


Parameter = Annotated[
    DoubleParameter | IntegerParameter | CategoricalParameter | DiscreteParameter, Field(discriminator="type")
]


class StudySpec(BaseModel):
    """A hyperparameter study: what to search, what to optimize, and the trial budget."""

    model_config = ConfigDict(extra="forbid")

    metric_id: str = Field(
        "val_accuracy",
        description="The metric the study optimizes, as the trainer logs it each epoch: val_accuracy, val_loss "
        "(on the validation split), accuracy, loss (on the training split). Each trial reports it under this name "
        "(`CLOUD_ML_HP_METRIC_TAG`).",
    )
    goal: Literal["maximize", "minimize"] = Field(
        "maximize",
        description="Whether the best trial has the highest or the lowest metric; must suit the metric (an accuracy "
        "is maximized, a loss minimized).",
    )
    parameters: list[Parameter] = Field(min_length=1)
    max_trial_count: int = Field(4, ge=1)
    parallel_trial_count: int = Field(2, ge=1)
    # Vertex's definition: the study fails once this many trials have failed. Vertex's 0 ("Vertex decides") is
    # refused: the self-hosted study has no equivalent.
    max_failed_trial_count: int = 1
    algorithm: Literal["default", "grid", "random"] = "default"
    measurement: Literal["last", "best"] = "last"  # which of a trial's hypertune reports counts
    warm_start: bool = Field(
        False,
        description="Start the final training from the best trial's best checkpoint (its `checkpoints/best`: the "
        "weights of its best epoch by metric_id) instead of fresh weights; the local and vertex targets, and kubeflow "
        "with tuning: katib.",
    )

    @field_validator("metric_id")
    @classmethod
    def _logged_metric(cls, value: str) -> str:
        if value not in METRIC_GOALS:
            raise ValueError(f"the trainer logs no metric {value!r}; it logs {', '.join(METRIC_GOALS)}")
        if f"val_{value}" in METRIC_GOALS:
            warnings.warn(TRAINING_METRIC.format(value), UserWarning, stacklevel=2)
        return value

    @model_validator(mode="after")
    def _goal_suits_metric(self):
        if self.goal != METRIC_GOALS[self.metric_id]:
            raise ValueError(
                f"goal {self.goal} would pick the worst trial by {self.metric_id}: use goal "
                f"{METRIC_GOALS[self.metric_id]}"
            )
        return self

    @field_validator("max_failed_trial_count")
    @classmethod
    def _failure_limit(cls, value: int) -> int:
        if value < 1:
            raise ValueError(
                f"must be at least 1 (the study fails once this many trials have failed), got {value}; "
                "0 (Vertex decides) has no self-hosted equivalent"
            )
        return value

    @model_validator(mode="after")
    def _budget(self):
        if self.parallel_trial_count > self.max_trial_count:
            raise ValueError(
                f"parallel_trial_count ({self.parallel_trial_count}) must be <= max_trial_count "
                f"({self.max_trial_count})"
            )
        ids = [p.parameter_id for p in self.parameters]
        if len(set(ids)) != len(ids):
            raise ValueError(f"parameter ids must be distinct, got {ids}")
        doubles = [p.parameter_id for p in self.parameters if p.type == "double"]
        if self.algorithm == "grid" and doubles:
            raise ValueError(
                "algorithm grid takes integer, categorical and discrete parameters only (Vertex's "
                f"GRID_SEARCH refuses double ranges); double: {', '.join(doubles)} (list their values "
                "as type: discrete)"
            )
        return self

    def study_spec_metrics(self) -> list[dict]:
        """`HyperparameterTuningJobRunOp`'s `study_spec_metrics`: `[{"metric_id": ..., "goal": "MAXIMIZE"}]`, the
        JSON of Vertex's `StudySpec.MetricSpec` (the goal by its enum name)."""
        from google.cloud.aiplatform_v1.types import study

        return [_proto_json(study.StudySpec.MetricSpec(metric_id=self.metric_id, goal=self.goal.upper()))]

    def study_spec_parameters(self) -> list[dict]:
        """`HyperparameterTuningJobRunOp`'s `study_spec_parameters`: the JSON of Vertex's `StudySpec.ParameterSpec`
        of each parameter, in order (scale types by their enum names; int64 bounds as strings, as in proto3 JSON):
        what `hyperparameter_tuning`'s specs build (`_to_parameter_spec`), without importing the SDK. A categorical
        parameter has no scale (SCALE_TYPE_UNSPECIFIED, left out)."""
        from google.cloud.aiplatform_v1.types import study

        P = study.StudySpec.ParameterSpec
        specs = []
        for p in self.parameters:
            if isinstance(p, DoubleParameter):
                value = {"double_value_spec": P.DoubleValueSpec(min_value=p.min, max_value=p.max)}
            elif isinstance(p, IntegerParameter):
                value = {"integer_value_spec": P.IntegerValueSpec(min_value=p.min, max_value=p.max)}
            elif isinstance(p, CategoricalParameter):
                value = {"categorical_value_spec": P.CategoricalValueSpec(values=p.values)}
            else:
                value = {"discrete_value_spec": P.DiscreteValueSpec(values=p.values)}
            scale = {} if isinstance(p, CategoricalParameter) else {"scale_type": _SCALE_TYPES[p.scale]}
            specs.append(_proto_json(P(parameter_id=p.parameter_id, **value, **scale)))
        return specs

    def vertex_algorithm(self) -> str | None:
        """Vertex's `algorithm` field: unset for the default (Vizier GP bandit)."""
        return {"default": None, "grid": "GRID_SEARCH", "random": "RANDOM_SEARCH"}[self.algorithm]


def _proto_json(message) -> dict:
    """A proto-plus message as proto3 JSON with the proto field names: enums by name, default values left out."""
    from google.protobuf import json_format

    return json_format.MessageToDict(type(message).pb(message), preserving_proto_field_name=True)


DEFAULT_STUDY = StudySpec(
    parameters=[
        DoubleParameter(parameter_id="learning_rate", min=1e-4, max=3e-2, scale="log"),
        IntegerParameter(parameter_id="hidden_units", min=32, max=256, scale="log"),
        DiscreteParameter(parameter_id="dropout", values=[0.0, 0.1, 0.2, 0.3]),
    ],
)


def trial_flags(trial_epochs: int, hyperparameters: dict, workers: int, study: StudySpec) -> dict:
    """The trainer flags of every trial: its epochs, the pipeline's `hyperparameters` (`pipeline_hyperparameters`:
    the batch size per replica, the learning rate) but those `study` tunes (each trial's own value), and the final
    training's `workers`, whose global batch a trial trains at (`--batch-workers`): the learning rate it tunes is the
    one for that batch."""
    tuned = {p.parameter_id for p in study.parameters}
    fixed = {k: v for k, v in hyperparameters.items() if k not in tuned}
    return {"epochs": trial_epochs, **fixed, "batch_workers": workers}


def pipeline_hyperparameters(batch_size: int, learning_rate: float) -> dict:
    """The pipeline's own hyperparameters: the final training's when no study runs."""
    return {"batch_size": batch_size, "learning_rate": learning_rate}


def with_best_trial(hyperparameters: dict, best: dict, warm_start_from: str = "") -> dict:
    """The final training's hyperparameters after a study: the pipeline's, overridden by the best trial's values,
    and the trainer's `warm_start_from` (a kept checkpoint folder) when given."""
    return {**hyperparameters, **best, **({"warm_start_from": warm_start_from} if warm_start_from else {})}


def write_skipped_study(directory: str) -> None:
    """The tuning output of a study that does not run: `trials.json` saying so (the run report reads it)."""
    import json
    import os

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "trials.json"), "w") as f:
        json.dump({"enabled": False, "trials": []}, f)


def best_trial_message(trial_id, metric_id: str, metric: float, hyperparameters: dict) -> str:
    """The tuning steps' last log line: the best trial and what the final training takes."""
    from core.units import assignments, value

    return f"best trial {trial_id}: {metric_id}={value(metric)}; training with {assignments(hyperparameters)}"
