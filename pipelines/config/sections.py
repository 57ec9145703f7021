"""The whole configuration, section by section, and what a command sends of it to a target."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from pipelines.config.parameters import BatchParameters, PipelineParameters
from pipelines.config.platform import Platform
from pipelines.config.target_use import TARGET_USE
from pipelines.config.trainer import TrainerSettings

SECTIONS = ("parameters", "batch", "platform", "study", "trainer")
# An example value a command must not send to the cloud: the project ids of the shipped tfpipe.yaml and the names
# made from them (gs://my-project-tfpipe; a generated id like my-project-384512 is a real one), the docs' upper-case
# placeholders (the default images' PROJECT), and the RFC 2606 example domains (YOU@example.com, kfp.example.com)
EXAMPLE_VALUE = re.compile(
    r"(?<![\w-])(?:my-project|my-dev-project)(?!\w|-[0-9])"
    r"|(?<![A-Za-z0-9])(?:PROJECT|BUCKET|REGION|REPO)(?![A-Za-z0-9])"
    r"|(?<![\w-])example\.(?:com|org|net)(?![\w-])"
)


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parameters: PipelineParameters = PipelineParameters()
    batch: BatchParameters = BatchParameters()
    platform: Platform = Platform()
    study: StudySpec = DEFAULT_STUDY
    trainer: TrainerSettings = TrainerSettings()

    def check_target(self, target: str) -> None:
        """ConfigError unless the training parameters also follow `target`'s own rules (those of every target are
        checked on load), e.g. on kubeflow with serving: kserve, `model_name` names the InferenceService."""
        TARGET_USE[target].check_parameters(self.platform, self.parameters)

    def cloud_fields(
        self, target: str, pipeline: str = "training", *, compiling=False, running=False, registry=False
    ) -> list[str]:
        """The fields (`section.field`) a command sends to `target`: those `compiling` the pipeline bakes into the
        template (images, the Vertex jobs' identity, the inputs' gs:// defaults), those `running` it (creating a
        run or a schedule) passes, and the `registry` it publishes to or reads from."""
        use = TARGET_USE[target]
        platform: list[str] = []
        if running:
            platform += [*use.submitted, *use.identity]
        if compiling:
            platform += [*use.identity, *self.platform.images_used(target, pipeline)]
            platform += list(use.compiled_training) if pipeline == "training" else []
        if registry:
            platform.append("template_registry")
        fields = [f"platform.{name}" for name in dict.fromkeys(platform)]
        if compiling and pipeline == "training":
            fields += [f"parameters.{name}" for name in use.training_inputs]
        elif compiling:
            fields += [f"batch.{name}" for name in use.batch_inputs]
        return fields

    def example_values(self, fields: Sequence[str]) -> list[str]:
        """`section.field=value` of each of `fields` that holds an example value (EXAMPLE_VALUE); the pipeline inputs
        only when they name something in the cloud (gs://..., projects/...), not a local path."""
        found = []
        for field in fields:
            section, name = field.split(".")
            value = str(getattr(getattr(self, section), name))
            remote = section == "platform" or "://" in value or value.startswith("projects/")
            if remote and EXAMPLE_VALUE.search(value):
                found.append(f"{field}={value}")
        return found
