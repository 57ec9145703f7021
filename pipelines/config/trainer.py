"""The trainer settings (`trainer:`): what the training application trains, and how."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from pipelines.config.errors import ConfigError
from trainer import builder, flags

# the pipeline's own inputs: `parameters.batch_size` and `parameters.learning_rate` reach every training
PIPELINE_HYPERPARAMETERS = ("batch_size", "learning_rate")


class TrainerSettings(BaseModel):
    """What the training application trains, baked into the compiled training pipeline: every trial and the final
    training run `python -m trainer.task --model MODEL [--mixed-precision POLICY] [--NAME VALUE ...]`."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        builder.DEFAULT_BUILDER,
        description="The model builder, package.module:function, that every trial and the final training build.",
    )
    mixed_precision: Literal[flags.PRECISIONS] = Field(  # type: ignore[valid-type]
        "none",
        description="Keras's mixed-precision policy of every trial and the final training: none (float32), "
        "mixed_float16 (GPUs) or mixed_bfloat16 (recent CPUs, TPUs); the model's output layer stays float32.",
    )
    hyperparameters: dict[str, int | float | bool | str] = Field(
        {},
        description="Fixed values of hyperparameters the model's builder or the trainer declares (batch_size and "
        "learning_rate are pipeline parameters), e.g. {n_hidden: 3, optimizer: sgd}; a study parameter of the same "
        "name overrides its value in the trials and, when the study runs, in the final training.",
    )

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

    def found(self) -> bool:
        """Whether `model` names a function of a module on this Python path."""
        try:
            self.check_builder()
        except ConfigError:
            return False
        return True

    def check_hyperparameters(self, study: StudySpec) -> TrainerSettings:
        """These settings with `hyperparameters` typed by their declaration (the builder's signature and the
        trainer's own, read from the sources); ConfigError naming an unknown or mistyped value or study
        parameter; also when `model` names no function on this Python path (`flags.declared` finds it first)."""
        try:
            declaration = flags.declared(self.model)
        except builder.BuilderError as e:
            raise ConfigError(f"invalid configuration: trainer.model: {e}") from None
        default_study = study.parameters == DEFAULT_STUDY.parameters
        for parameter in study.parameters:
            where = f"invalid configuration: study.parameters.{parameter.parameter_id}"
            try:
                declaration[parameter.parameter_id].check_parameter(parameter)
            except KeyError as e:
                default = " (a parameter of the default study: set study.parameters)" if default_study else ""
                raise ConfigError(f"{where}{default}: {e.args[0]}") from None
            except ValueError as e:
                raise ConfigError(f"{where}: {e}") from None
        typed = {}
        for name, value in self.hyperparameters.items():
            where = f"invalid configuration: trainer.hyperparameters.{name}"
            if name in PIPELINE_HYPERPARAMETERS:
                raise ConfigError(f"{where}: a pipeline parameter; set parameters.{name} instead")
            try:
                typed[name] = declaration[name].parse(value)
            except KeyError as e:
                raise ConfigError(f"{where}: {e.args[0]}") from None
            except ValueError as e:
                raise ConfigError(f"{where}: {e}") from None
        return self.model_copy(update={"hyperparameters": typed})

    def setup(self, metric: str = flags.DEFAULT_METRIC) -> flags.TrainerSetup:
        """The typed value the pipeline's training and tuning steps take (as a dict); `metric`: the study's."""
        return flags.TrainerSetup(self.model, self.mixed_precision, dict(self.hyperparameters), metric)
