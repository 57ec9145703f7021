"""The local target (and the kubeflow target's `pod` engines): this project's own components: the local study, the
local multi-worker launcher, the versioned model repository (its newest version is the champion), the
TF-Serving-compatible endpoint and the local batch predictor."""

from __future__ import annotations

from kfp import dsl
from kfp.dsl import PipelineTask

from components import (
    deploy_model,
    find_repository_champion,
    publish_model,
    run_batch_prediction,
    train_model,
    tune_hyperparameters,
)
from pipelines.config import Platform
from pipelines.targets.base import SameEverywhere, champion_of, component, uncached
from pipelines.targets.inputs import (
    BatchPredictInputs,
    Champion,
    Channel,
    DeployInputs,
    RegisterInputs,
    Repository,
    Trained,
    TrainInputs,
    TuneInputs,
    keywords,
)
from trainer.flags import TrainerSetup


class SelfHostedOps(SameEverywhere):
    """The local target (and the kubeflow target's `pod` engines): this project's own components."""

    def __init__(self, platform: Platform, pipeline_name: str, trainer: TrainerSetup | None = None):
        super().__init__(platform, pipeline_name, trainer)
        image = platform.components_image
        self._champion = component(find_repository_champion.find_repository_champion, image)
        self._train = component(train_model.train_model, image)
        self._tune = component(tune_hyperparameters.tune_hyperparameters, image)
        self._publish = component(publish_model.publish_model, image)
        self._deploy = component(deploy_model.deploy_model, image)

    def tune(self, inputs: TuneInputs) -> Channel:
        """The final training's hyperparameters (a dict), from a local study when `enabled`."""
        task = self._place(
            self._tune(
                dataset=inputs.dataset,
                study_spec=inputs.study.model_dump(),
                enabled=inputs.enabled,
                trial_epochs=inputs.trial_epochs,
                batch_size=inputs.batch_size,
                learning_rate=inputs.learning_rate,
                workers=inputs.workers,
                trainer=self.trainer.as_dict(),
            )
        ).after(inputs.after)
        task.set_display_name("Hyperparameter study (local trials)")
        return task.outputs["Output"]

    def train(self, inputs: TrainInputs) -> Trained:
        task = self._place(
            self._train(
                dataset=inputs.dataset,
                workers=inputs.workers,
                epochs=inputs.epochs,
                hyperparameters=inputs.hyperparameters,
                trainer=self.trainer.as_dict(),
                max_restarts=inputs.max_restarts,
            )
        )
        task.set_display_name("Train (local multi-worker)")
        return Trained(task.outputs["model"], task.outputs["training"])

    def find_champion(self, repository: Repository) -> Champion:
        """The never-cached look-up of the champion the gate compares with: the repository's newest version."""
        task = self._place(self._champion(**keywords(repository)))
        return champion_of(uncached(task.set_display_name("Find champion (model repository)")))

    def register(self, inputs: RegisterInputs) -> Channel:
        """Publish the blessed model; returns the registered model's artifact (what `deploy` takes)."""
        task = uncached(
            self._place(
                self._publish(
                    model=inputs.trained.model,
                    dataset=inputs.dataset,
                    training=inputs.trained.training,
                    evaluation=inputs.evaluation,
                    **keywords(inputs.repository),
                    run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                    source_commit=inputs.source_commit,
                )
            ).set_display_name("Publish to model repository")
        )
        return task.outputs["published"]

    def deploy(self, inputs: DeployInputs) -> None:
        """When `enabled`, serve the published version (TF Serving layout; the server switches to the newest
        version, so `traffic_percentage` does not apply). The published version is the champion either way."""
        with dsl.If(inputs.enabled == True, name="deploy-enabled"):  # noqa: E712 (KFP condition)
            uncached(
                self._deploy(
                    published=inputs.registered,
                    dataset=inputs.dataset,
                    **keywords(inputs.repository),
                    serving_url=inputs.serving_url,
                    rest_port=inputs.rest_port,
                    grpc_port=inputs.grpc_port,
                    version_policy=inputs.version_policy,
                    ssl_config_file=inputs.tls.ssl_config_file,
                    ca_file=inputs.tls.ca_file,
                    client_cert_file=inputs.tls.client_cert_file,
                ).set_display_name("Deploy (TF Serving endpoint)")
            )

    def batch_predict(self, inputs: BatchPredictInputs) -> PipelineTask:
        """The local batch predictor on a repository version (predictions in its `predictions` artifact, so
        `output_prefix` does not apply); it fails when more than `max_error_fraction` of the instances failed."""
        return component(run_batch_prediction.run_batch_prediction, self.image)(
            **keywords(inputs.repository),
            model=inputs.model,
            instances=inputs.instances,
            batch_size=inputs.batch_size,
            **keywords(inputs.options),
            max_error_fraction=inputs.max_error_fraction,
        ).set_display_name("Batch prediction (local predictor)")
