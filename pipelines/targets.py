"""The platform seam: how the platform-service steps (training, model upload) run on each target.

- vertex: GCPC `HyperparameterTuningJobRunOp` + this project's best-trial reader, `CustomTrainingJobOp` with
  worker pools running the trainer image, `ModelUploadOp` fed by an importer of an `UnmanagedContainerModel`
  (prebuilt TF serving image).
- kubeflow / local: this project's components: the local study, the local multi-worker launcher and the versioned
  model repository.
Every other step (data prep, evaluation gate, TFLite quantization) is the same lightweight component on all targets
(base image: the components image).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfp import dsl

from components import (best_trial, evaluate_model, prepare_data, publish_model, quantize_model, run_study,
                        train_model, vertex_training)
from pipelines.config import Platform


@dataclass
class Trained:
    """What the training step hands downstream."""

    model: Any  # Model artifact channel
    training: Any  # Artifact channel: metrics.json, history.jsonl
    model_uri: Any = None  # str channel of the model's URI (Vertex: feeds the serving-container importer)


def _component(func, image: str):
    return dsl.component(func, base_image=image, install_kfp_package=False)


class SelfHostedOps:
    def __init__(self, platform: Platform):
        image = platform.components_image
        self.prepare_data = _component(prepare_data.prepare_data, image)
        self.evaluate_model = _component(evaluate_model.evaluate_model, image)
        self.quantize_model = _component(quantize_model.quantize_model, image)
        self._train = _component(train_model.train_model, image)
        self._tune = _component(run_study.tune_hyperparameters, image)
        self._publish = _component(publish_model.publish_model, image)

    def tune(self, dataset, study, enabled, trial_epochs, batch_size, learning_rate):
        """The final training's hyperparameters (a dict channel), from a local study when `enabled`."""
        task = self._tune(dataset=dataset, study_spec=study.model_dump(), enabled=enabled, trial_epochs=trial_epochs,
                          batch_size=batch_size, learning_rate=learning_rate)
        task.set_display_name("Hyperparameter study (local trials)")
        return task.outputs["Output"]

    def train(self, dataset, workers, epochs, hyperparameters, max_restarts) -> Trained:
        task = self._train(dataset=dataset, workers=workers, epochs=epochs, hyperparameters=hyperparameters,
                           max_restarts=max_restarts)
        task.set_display_name("Train (local multi-worker)")
        return Trained(task.outputs["model"], task.outputs["training"])

    def register(self, trained: Trained, dataset, evaluation, model_repository, model_name, source_commit):
        return self._publish(
            model=trained.model, dataset=dataset, training=trained.training, evaluation=evaluation,
            model_repository=model_repository, model_name=model_name, run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
            source_commit=source_commit,
        ).set_display_name("Publish to model repository")


class VertexOps(SelfHostedOps):
    def __init__(self, platform: Platform):
        super().__init__(platform)
        self.platform = platform
        self._plan = _component(vertex_training.plan_vertex_training, platform.components_image)
        self._import = _component(vertex_training.import_trained_model, platform.components_image)
        self._defaults = _component(vertex_training.default_hyperparameters, platform.components_image)
        self._merge = _component(vertex_training.merge_hyperparameters, platform.components_image)
        self._best = _component(best_trial.read_best_trial, platform.components_image)

    def tune(self, dataset, study, enabled, trial_epochs, batch_size, learning_rate):
        """Vertex AI tuning job when `enabled` (trials run the trainer image; the best trial's values override the
        pipeline's), else the pipeline's values."""
        from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import (
            HyperparameterTuningJobRunOp, serialize_metrics, serialize_parameters)

        p = self.platform
        with dsl.If(enabled == True, name="tuning-enabled"):  # noqa: E712 (KFP condition)
            defaults = self._defaults(batch_size=batch_size, learning_rate=learning_rate)
            defaults.set_display_name("Hyperparameters (fixed part)")
            plan = self._plan(dataset=dataset, trainer_image=p.trainer_image, machine_type=p.machine_type,
                              accelerator_type=p.accelerator_type, accelerator_count=p.accelerator_count, workers=1,
                              epochs=trial_epochs, hyperparameters=defaults.output,
                              tuned_parameters=[q.parameter_id for q in study.parameters])
            plan.set_display_name("Plan trial worker pool")
            job = HyperparameterTuningJobRunOp(
                display_name=f"{dsl.PIPELINE_JOB_NAME_PLACEHOLDER}-tune",
                base_output_directory=plan.outputs["base_output_directory"],
                worker_pool_specs=plan.outputs["worker_pool_specs"],
                study_spec_metrics=serialize_metrics(study.vertex_metrics()),
                study_spec_parameters=serialize_parameters(study.vertex_parameters()),
                max_trial_count=study.max_trial_count,
                parallel_trial_count=study.parallel_trial_count,
                max_failed_trial_count=study.max_failed_trial_count,
                location=p.location,
                study_spec_algorithm=study.vertex_algorithm() or "ALGORITHM_UNSPECIFIED",
                study_spec_measurement_selection_type=f"{study.measurement.upper()}_MEASUREMENT",
            ).set_display_name("Hyperparameter tuning job")
            best = self._best(gcp_resources=job.outputs["gcp_resources"], metric_id=study.metric_id, goal=study.goal)
            best.set_display_name("Best trial")
            tuned = self._merge(defaults=defaults.output, best=best.outputs["best_parameters"])
            tuned.set_display_name("Hyperparameters (tuned)")
        with dsl.Else(name="tuning-disabled"):
            fixed = self._defaults(batch_size=batch_size, learning_rate=learning_rate)
            fixed.set_display_name("Hyperparameters")
        return dsl.OneOf(tuned.output, fixed.output)

    def train(self, dataset, workers, epochs, hyperparameters, max_restarts) -> Trained:
        from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp

        p = self.platform
        plan = self._plan(dataset=dataset, trainer_image=p.trainer_image, machine_type=p.machine_type,
                          accelerator_type=p.accelerator_type, accelerator_count=p.accelerator_count,
                          workers=workers, epochs=epochs, hyperparameters=hyperparameters, tuned_parameters=[])
        plan.set_display_name("Plan worker pools")
        job = CustomTrainingJobOp(
            display_name=f"{dsl.PIPELINE_JOB_NAME_PLACEHOLDER}-train",
            location=p.location,
            worker_pool_specs=plan.outputs["worker_pool_specs"],
            base_output_directory=plan.outputs["base_output_directory"],
            # max_restarts is the local launcher's; on Vertex the whole job restarts with a worker
            restart_job_on_worker_restart=True,
        ).set_display_name("Train (Vertex custom job, MultiWorkerMirroredStrategy)")
        imported = self._import(job_dir=plan.outputs["job_dir"], gcp_resources=job.outputs["gcp_resources"])
        imported.set_display_name("Import trained model")
        return Trained(imported.outputs["model"], imported.outputs["training"], imported.outputs["model_uri"])

    def register(self, trained: Trained, dataset, evaluation, model_repository, model_name, source_commit):
        from google_cloud_pipeline_components.types.artifact_types import UnmanagedContainerModel
        from google_cloud_pipeline_components.v1.model import ModelUploadOp

        unmanaged = dsl.importer(
            artifact_uri=trained.model_uri,
            artifact_class=UnmanagedContainerModel,
            metadata={"containerSpec": {"imageUri": self.platform.serving_image}},
        ).set_display_name("Serving container spec")
        return ModelUploadOp(
            display_name=self.platform.model_display_name,
            location=self.platform.location,
            unmanaged_container_model=unmanaged.outputs["artifact"],
            labels={"pipeline": "tfpipe-training"},
        ).set_display_name("Upload to Vertex Model Registry")


def make_ops(target: str, platform: Platform) -> SelfHostedOps:
    return VertexOps(platform) if target == "vertex" else SelfHostedOps(platform)
