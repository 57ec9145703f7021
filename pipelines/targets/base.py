"""The seam's contract, `PlatformOps`, and what every target shares: data prep (keyed on the data's fingerprint),
the champion check, the evaluation gate and TFLite quantization, the same lightweight components everywhere (base
image: the components image). Steps that read or change state outside the run are never cached."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from kfp import dsl
from kfp.dsl import PipelineTask
from kfp.dsl.python_component import PythonComponent

from components import check_champion, evaluate_model, fingerprint_data, prepare_data, quantize_model
from pipelines.config import Platform
from pipelines.targets.inputs import (
    BatchPredictInputs,
    Champion,
    ChampionCheckInputs,
    Channel,
    DeployInputs,
    EvaluateInputs,
    Gate,
    PrepareInputs,
    QuantizeInputs,
    RegisterInputs,
    Repository,
    Trained,
    TrainInputs,
    TuneInputs,
    keywords,
)
from trainer.flags import TrainerSetup


def component(func: Callable[..., Any], image: str) -> PythonComponent:
    return dsl.component(func, base_image=image, install_kfp_package=False)


def uncached(task: PipelineTask) -> PipelineTask:
    """Steps that look up or change state outside the run (registry, endpoint, repository) must run every time."""
    return task.set_caching_options(False)


class PlatformOps(Protocol):
    """The seam: each pipeline step as a target runs it. Each method adds its tasks to the pipeline being defined
    and returns what the DAG hands on."""

    def prepare_data(self, inputs: PrepareInputs) -> PipelineTask: ...

    def find_champion(self, repository: Repository) -> Champion: ...

    def check_champion(self, inputs: ChampionCheckInputs) -> PipelineTask: ...

    def tune(self, inputs: TuneInputs) -> Channel:
        """The final training's hyperparameters (a dict)."""
        ...

    def train(self, inputs: TrainInputs) -> Trained: ...

    def evaluate(self, inputs: EvaluateInputs) -> Gate: ...

    def register(self, inputs: RegisterInputs) -> Channel:
        """The registered model (the artifact `deploy` takes)."""
        ...

    def deploy(self, inputs: DeployInputs) -> None: ...

    def quantize_model(self, inputs: QuantizeInputs) -> PipelineTask: ...

    def batch_predict(self, inputs: BatchPredictInputs) -> PipelineTask: ...


class SameEverywhere(PlatformOps):
    """The steps every target runs as the same lightweight components: data prep (keyed on the data's fingerprint),
    the evaluation gate (against the target's champion) and TFLite quantization."""

    def __init__(self, platform: Platform, pipeline_name: str, trainer: TrainerSetup | None = None):
        image = platform.components_image
        self.platform = platform
        self.image = image
        self.pipeline_name = pipeline_name
        self.trainer = trainer or TrainerSetup()  # what every trial and the training train
        self._fingerprint = component(fingerprint_data.fingerprint_data, image)
        self._prepare = component(prepare_data.prepare_data, image)
        self._evaluate = component(evaluate_model.evaluate_model, image)
        self._check_champion = component(check_champion.check_champion, image)
        self._quantize = component(quantize_model.quantize_model, image)

    def _place(self, task: PipelineTask) -> PipelineTask:
        """Where a task's pod runs and what it gets (the kubeflow target's volume and resources); here: as is."""
        return task

    @abstractmethod
    def find_champion(self, repository: Repository) -> Champion:
        """The never-cached look-up of the champion the gate compares with."""

    def prepare_data(self, inputs: PrepareInputs) -> PipelineTask:
        return self._prepare_data(inputs, {})

    def _prepare_data(self, inputs: PrepareInputs, options: dict[str, Any]) -> PipelineTask:
        """Data prep (with the target's `options`) keyed on a never-cached fingerprint of the source: fresh data
        runs it again, the same data is a cache hit (and so is everything downstream that only depends on it)."""
        fingerprint = self._place(uncached(self._fingerprint(data_source=inputs.data_source)))
        fingerprint.set_display_name("Fingerprint data")
        return self._place(self._prepare(**keywords(inputs), data_fingerprint=fingerprint.output, **options))

    def quantize_model(self, inputs: QuantizeInputs) -> PipelineTask:
        return self._place(self._quantize(**keywords(inputs)))

    def check_champion(self, inputs: ChampionCheckInputs) -> PipelineTask:
        """Stops the run right after data prep when the data do not fit the champion (labels, input) or drifted from
        its training data past the limits."""
        champion = inputs.champion
        task = self._check_champion(
            dataset=inputs.dataset,
            champion_path=champion.path,
            champion_name=champion.name,
            drift_max_class_distance=inputs.drift_max_class_distance,
            drift_max_js_divergence=inputs.drift_max_js_divergence,
            drift_action=inputs.drift_action,
        )
        return self._place(task).set_display_name("Check data against the champion")

    def evaluate(self, inputs: EvaluateInputs) -> Gate:
        """The evaluation gate against the target's champion (`find_champion`)."""
        champion = inputs.champion
        task = self._place(
            self._evaluate(
                model=inputs.trained.model,
                dataset=inputs.dataset,
                accuracy_threshold=inputs.accuracy_threshold,
                champion_tolerance=inputs.champion_tolerance,
                champion_path=champion.path,
                champion_name=champion.name,
                champion_model_uri=champion.model_uri,
            )
        ).set_display_name("Evaluation gate")
        outputs = task.outputs
        return Gate(blessed=outputs["Output"], evaluation=outputs["evaluation"], smoke_checks=outputs["smoke_checks"])


def champion_of(task: PipelineTask) -> Champion:
    """The champion a look-up step outputs (`path`, `name`, `model_uri`)."""
    return Champion(path=task.outputs["path"], name=task.outputs["name"], model_uri=task.outputs["model_uri"])
