"""The trainer settings (`trainer:`): what the training application trains."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.config.errors import ConfigError
from trainer import builder


class TrainerSettings(BaseModel):
    """What the training application trains, baked into the compiled training pipeline: every trial and the final
    training run `python -m trainer.task --model MODEL`."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        builder.DEFAULT_BUILDER,
        description="The model builder, package.module:function, that every trial and the final training build.",
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
