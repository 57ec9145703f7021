"""The kubeflow target: Kubeflow's engines, each a config choice (`platform.kubeflow`): training as a TrainJob of
Kubeflow Trainer v2 (`trainjob`), a TFJob of the training operator (`tfjob`), whichever the cluster serves (`auto`),
or the local launcher in the step's pod (`pod`); the study as a Katib Experiment
(`katib`) or the local study (`pod`); serving on a KServe InferenceService (`kserve`), a TF Serving you run (`url`)
or not at all (`none`); the model repository and batch predictor as on local. Every step mounts the shared
PersistentVolumeClaim (kfp-kubernetes) and gets its CPU and memory requests and limits."""

from __future__ import annotations

from typing import Any

from kfp import dsl
from kfp.dsl import PipelineTask

from components import deploy_model_at_url, deploy_model_on_kserve, train_model_on_operator, tune_on_katib
from pipelines.config import ConfigError, Platform
from pipelines.targets.base import component, uncached
from pipelines.targets.inputs import (
    BatchPredictInputs,
    Channel,
    DeployInputs,
    Trained,
    TrainInputs,
    TuneInputs,
    keywords,
)
from pipelines.targets.selfhosted import SelfHostedOps
from trainer.flags import TrainerSetup


class KubeflowOps(SelfHostedOps):
    """The kubeflow target: the self-hosted steps plus Kubeflow's engines, the shared volume and pod resources."""

    def __init__(self, platform: Platform, pipeline_name: str, trainer: TrainerSetup | None = None):
        super().__init__(platform, pipeline_name, trainer)
        self.kubeflow = platform.kubeflow
        image = platform.components_image
        self._train_operator = component(train_model_on_operator.train_model_on_operator, image)
        self._tune_katib = component(tune_on_katib.tune_on_katib, image)
        self._deploy_kserve = component(deploy_model_on_kserve.deploy_model_on_kserve, image)
        self._deploy_url = component(deploy_model_at_url.deploy_model_at_url, image)

    def _place(self, task: PipelineTask) -> PipelineTask:
        """The step's pod: its requests and limits from `platform.kubeflow.step_resources`, the shared volume."""
        from kfp import kubernetes

        r = self.kubeflow.resources_of(task.component_spec.name)
        for value, setter in (
            (r.cpu_request, task.set_cpu_request),
            (r.cpu_limit, task.set_cpu_limit),
            (r.memory_request, task.set_memory_request),
            (r.memory_limit, task.set_memory_limit),
        ):
            if value:
                setter(value)
        if r.gpus:
            task.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(r.gpus)
        volume = self.kubeflow.volume
        if volume.claim_name:
            kubernetes.mount_pvc(task, pvc_name=volume.claim_name, mount_path=volume.mount_path)
        return task

    def _engine_inputs(self) -> dict[str, Any]:
        k = self.kubeflow
        return dict(
            namespace=k.namespace,
            service_account=k.service_account,
            claim_name=k.volume.claim_name,
            mount_path=k.volume.mount_path,
            poll_seconds=float(k.poll_seconds),
        )

    def _engine(self, task: PipelineTask) -> PipelineTask:
        """An engine step's pod: `_place`'s, and the run's name in its environment (components.lib.kube.api.run_id)."""
        from kfp import kubernetes

        from components.lib.kube import api as kube

        return kubernetes.use_field_path_as_env(self._place(task), kube.RUN_ID_ENV, kube.RUN_ID_FIELD)

    def tune(self, inputs: TuneInputs) -> Channel:
        if self.kubeflow.tuning == "pod":
            if inputs.study.warm_start:  # the trials' folders are in the step's pod, not the training's to read
                raise ConfigError(
                    "study.warm_start: platform.kubeflow.tuning pod keeps the trials' checkpoints in the study step's "
                    "pod, where the training cannot read them; use tuning: katib (it keeps the best trial's on the "
                    "volume) or set study.warm_start: false"
                )
            return super().tune(inputs)
        try:
            tune_on_katib.search_space(inputs.study)  # a study Katib cannot express fails at compile time
        except ValueError as e:
            raise ConfigError(f"platform.kubeflow.tuning is katib, but {e}") from None
        k = self.kubeflow
        task = self._engine(
            self._tune_katib(
                dataset=inputs.dataset,
                study_spec=inputs.study.model_dump(),
                enabled=inputs.enabled,
                trial_epochs=inputs.trial_epochs,
                batch_size=inputs.batch_size,
                learning_rate=inputs.learning_rate,
                workers=inputs.workers,
                trainer=self.trainer.as_dict(),
                trainer_image=self.platform.kubeflow_trainer_image(),
                resources=k.worker_resources.requirements(),
                timeout_minutes=k.tuning_timeout_minutes,
                keep_experiment=k.keep_experiment,
                **self._engine_inputs(),
            )
        ).after(inputs.after)
        task.set_display_name("Hyperparameter study (Katib experiment)")
        return task.outputs["Output"]

    def train(self, inputs: TrainInputs) -> Trained:
        if self.kubeflow.training == "pod":
            return super().train(inputs)
        k = self.kubeflow
        task = self._engine(
            self._train_operator(
                dataset=inputs.dataset,
                workers=inputs.workers,
                epochs=inputs.epochs,
                hyperparameters=inputs.hyperparameters,
                trainer=self.trainer.as_dict(),
                max_restarts=inputs.max_restarts,
                trainer_image=self.platform.kubeflow_trainer_image(),
                resources=k.worker_resources.requirements(),
                timeout_minutes=k.training_timeout_minutes,
                engine=k.training,
                **self._engine_inputs(),
            )
        )
        kind = {"auto": "TrainJob or TFJob", "trainjob": "TrainJob", "tfjob": "TFJob"}[k.training]
        task.set_display_name(f"Train ({kind}, MultiWorkerMirroredStrategy)")
        return Trained(task.outputs["model"], task.outputs["training"])

    def deploy(self, inputs: DeployInputs) -> None:
        """`serving: kserve`: an InferenceService with `traffic_percentage` % of the traffic; `url`: check the TF
        Serving at `serving_url`; `none`: no deploy step (the published version is the champion)."""
        k, p = self.kubeflow, self.platform
        if k.serving == "none":
            return
        with dsl.If(inputs.enabled == True, name="deploy-enabled"):  # noqa: E712 (KFP condition)
            if k.serving == "url":
                task = self._place(
                    self._deploy_url(
                        published=inputs.registered,
                        dataset=inputs.dataset,
                        **keywords(inputs.repository),
                        serving_url=inputs.serving_url,
                    )
                )
                name = "Deploy (TF Serving at serving_url)"
            else:
                task = self._deploy_kserve(
                    published=inputs.registered,
                    dataset=inputs.dataset,
                    **keywords(inputs.repository),
                    traffic_percentage=inputs.traffic_percentage,
                    inference_service=k.inference_service,
                    serving_mode=k.serving_mode,
                    serving_image=p.kubeflow_serving_image(),
                    resources=k.serving_resources.requirements(),
                    min_replicas=p.serving_min_replicas,
                    max_replicas=p.serving_max_replicas,
                    keep_previous=p.keep_previous,
                    timeout_minutes=k.serving_timeout_minutes,
                    **self._engine_inputs(),
                )
                task = self._engine(task)
                name = "Deploy (KServe InferenceService)"
            uncached(task).set_display_name(name)

    def batch_predict(self, inputs: BatchPredictInputs) -> PipelineTask:
        return self._place(super().batch_predict(inputs))
