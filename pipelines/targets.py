"""The platform seam: how the platform-service steps (tuning, training, model upload, endpoint deploy, batch
prediction) run on each target.

- vertex: GCPC `HyperparameterTuningJobRunOp` + this project's best-trial reader, `CustomTrainingJobOp` with
  worker pools running the trainer image, `ModelUploadOp` fed by an importer of an `UnmanagedContainerModel`
  (prebuilt TF serving image; a new version of the registry model with the configured display name when it
  exists), `EndpointCreateOp` or an importer of the existing `VertexEndpoint` + `ModelDeployOp` (dedicated
  resources, canary traffic split), `ModelBatchPredictOp` on a registry model version.
- kubeflow / local: this project's components: the local study, the local multi-worker launcher, the versioned
  model repository, the TF-Serving-compatible endpoint and the local batch predictor.
Every other step (data prep, evaluation gate, TFLite quantization) is the same lightweight component on all targets
(base image: the components image).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfp import dsl

from components import (batch_predict, best_trial, deploy_model, evaluate_model, prepare_data, publish_model,
                        quantize_model, run_study, train_model, vertex_registry, vertex_training)
from pipelines.config import Platform

# the project of the running Vertex pipeline (what GCPC ops default `project` to)
PROJECT = "{{$.pipeline_google_cloud_project_id}}"


@dataclass
class Trained:
    """What the training step hands downstream."""

    model: Any  # Model artifact channel
    training: Any  # Artifact channel: metrics.json, history.jsonl
    model_uri: Any = None  # str channel of the model's URI (Vertex: feeds the serving-container importer)


def _component(func, image: str):
    return dsl.component(func, base_image=image, install_kfp_package=False)


class SelfHostedOps:
    def __init__(self, platform: Platform, pipeline_name: str = "tfpipe-training"):
        image = platform.components_image
        self.image = image
        self.pipeline_name = pipeline_name
        self.prepare_data = _component(prepare_data.prepare_data, image)
        self.evaluate_model = _component(evaluate_model.evaluate_model, image)
        self.quantize_model = _component(quantize_model.quantize_model, image)
        self._train = _component(train_model.train_model, image)
        self._tune = _component(run_study.tune_hyperparameters, image)
        self._publish = _component(publish_model.publish_model, image)
        self._deploy = _component(deploy_model.deploy_model, image)

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
        """Publish the blessed model; returns the registered model's artifact channel (what `deploy` takes)."""
        task = self._publish(
            model=trained.model, dataset=dataset, training=trained.training, evaluation=evaluation,
            model_repository=model_repository, model_name=model_name, run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
            source_commit=source_commit,
        ).set_display_name("Publish to model repository")
        return task.outputs["published"]

    def deploy(self, registered, dataset, traffic_percentage, model_repository, model_name, serving_url, rest_port,
               grpc_port):
        """Serve the published version (TF Serving layout; the server switches to the newest version, so
        `traffic_percentage` does not apply)."""
        return self._deploy(
            published=registered, dataset=dataset, model_repository=model_repository, model_name=model_name,
            serving_url=serving_url, rest_port=rest_port, grpc_port=grpc_port,
        ).set_display_name("Deploy (TF Serving endpoint)")

    def batch_predict(self, instances, instances_format, model, model_repository, model_name, batch_size, key_field,
                      output_prefix):
        """The local batch predictor on a repository version (predictions in its `predictions` artifact, so
        `output_prefix` does not apply)."""
        return _component(batch_predict.run_batch_prediction, self.image)(
            model_repository=model_repository, model_name=model_name, model=model, instances=instances,
            instances_format=instances_format, batch_size=batch_size, key_field=key_field,
        ).set_display_name("Batch prediction (local predictor)")


class VertexOps(SelfHostedOps):
    def __init__(self, platform: Platform, pipeline_name: str = "tfpipe-training"):
        super().__init__(platform, pipeline_name)
        self.platform = platform
        # Vertex resource labels: the config's, plus the pipeline's name
        self.labels = {**platform.model_labels, "pipeline": pipeline_name}
        self._plan = _component(vertex_training.plan_vertex_training, platform.components_image)
        self._import = _component(vertex_training.import_trained_model, platform.components_image)
        self._defaults = _component(vertex_training.default_hyperparameters, platform.components_image)
        self._merge = _component(vertex_training.merge_hyperparameters, platform.components_image)
        self._best = _component(best_trial.read_best_trial, platform.components_image)
        self._find_model = _component(vertex_registry.find_model, platform.components_image)
        self._find_endpoint = _component(vertex_registry.find_endpoint, platform.components_image)
        self._split = _component(vertex_registry.plan_traffic_split, platform.components_image)
        self._plan_batch = _component(vertex_registry.plan_batch_prediction, platform.components_image)

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
        """Upload to the Model Registry: a new version of the model with the configured display name when it
        exists, else a new model; returns the uploaded `VertexModel` (resourceName `.../models/ID@VERSION`)."""
        from google_cloud_pipeline_components.types.artifact_types import UnmanagedContainerModel, VertexModel
        from google_cloud_pipeline_components.v1.model import ModelUploadOp

        p = self.platform
        unmanaged = dsl.importer(
            artifact_uri=trained.model_uri,
            artifact_class=UnmanagedContainerModel,
            metadata={"containerSpec": {"imageUri": p.serving_image}},
        ).set_display_name("Serving container spec")
        upload = dict(display_name=p.model_display_name, location=p.location,
                      unmanaged_container_model=unmanaged.outputs["artifact"],
                      version_aliases=list(p.model_version_aliases),
                      labels=self.labels)
        found = self._find_model(display_name=p.model_display_name, project=PROJECT, location=p.location)
        found.set_display_name("Find registry model").set_caching_options(False)  # look-ups must see today's state
        with dsl.If(found.outputs["resource_name"] != "", name="model-exists"):
            parent = dsl.importer(
                artifact_uri=found.outputs["resource_uri"], artifact_class=VertexModel,
                metadata={"resourceName": found.outputs["resource_name"]},
            ).set_display_name("Registry model")
            version = ModelUploadOp(parent_model=parent.outputs["artifact"], **upload)
            version.set_display_name("Upload new model version")
        with dsl.Else(name="model-missing"):
            first = ModelUploadOp(**upload).set_display_name("Upload to Vertex Model Registry")
        return dsl.OneOf(version.outputs["model"], first.outputs["model"])

    def deploy(self, registered, dataset, traffic_percentage, model_repository, model_name, serving_url, rest_port,
               grpc_port):
        """Deploy the uploaded version on the endpoint with the configured display name (created when missing),
        on dedicated resources, with `traffic_percentage` % of the traffic (the rest stays on the endpoint's
        current models)."""
        from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint
        from google_cloud_pipeline_components.v1.endpoint import EndpointCreateOp, ModelDeployOp

        p = self.platform
        found = self._find_endpoint(display_name=p.endpoint_display_name, project=PROJECT, location=p.location)
        found.set_display_name("Find endpoint").set_caching_options(False)
        with dsl.If(found.outputs["resource_name"] != "", name="endpoint-exists"):
            existing = dsl.importer(
                artifact_uri=found.outputs["resource_uri"], artifact_class=VertexEndpoint,
                metadata={"resourceName": found.outputs["resource_name"]},
            ).set_display_name("Existing endpoint")
        with dsl.Else(name="endpoint-missing"):
            created = EndpointCreateOp(display_name=p.endpoint_display_name, location=p.location,
                                       labels=self.labels)
            created.set_display_name("Create endpoint")
        split = self._split(endpoint_name=found.outputs["resource_name"], traffic_percentage=traffic_percentage)
        split.set_display_name("Traffic split").set_caching_options(False)
        return ModelDeployOp(
            model=registered,
            endpoint=dsl.OneOf(existing.outputs["artifact"], created.outputs["endpoint"]),
            deployed_model_display_name=p.model_display_name,
            traffic_split=split.output,
            dedicated_resources_machine_type=p.serving_machine_type,
            dedicated_resources_min_replica_count=p.serving_min_replicas,
            dedicated_resources_max_replica_count=p.serving_max_replicas,
            dedicated_resources_accelerator_type=p.serving_accelerator_type,
            dedicated_resources_accelerator_count=p.serving_accelerator_count,
        ).set_display_name("Deploy to endpoint")

    def batch_predict(self, instances, instances_format, model, model_repository, model_name, batch_size, key_field,
                      output_prefix):
        """A Vertex batch prediction job on a registry model version (`model` "": the champion alias)."""
        from google_cloud_pipeline_components.types.artifact_types import VertexModel
        from google_cloud_pipeline_components.v1.batch_predict_job import ModelBatchPredictOp

        p = self.platform
        plan = self._plan_batch(model=model, display_name=p.model_display_name,
                                alias=(p.model_version_aliases or [""])[0], instances=instances,
                                output_prefix=output_prefix, project=PROJECT, location=p.location)
        plan.set_display_name("Resolve model version and inputs").set_caching_options(False)
        version = dsl.importer(artifact_uri=plan.outputs["model_uri"], artifact_class=VertexModel,
                               metadata={"resourceName": plan.outputs["model_name"]}).set_display_name("Model version")
        return ModelBatchPredictOp(
            job_display_name=f"{dsl.PIPELINE_JOB_NAME_PLACEHOLDER}-batch",
            location=p.location,
            model=version.outputs["artifact"],
            gcs_source_uris=plan.outputs["gcs_source_uris"],
            instances_format=instances_format,
            predictions_format="jsonl",
            gcs_destination_output_uri_prefix=plan.outputs["output_prefix"],
            key_field=key_field,
            manual_batch_tuning_parameters_batch_size=batch_size,
            machine_type=p.batch_machine_type,
            starting_replica_count=p.batch_starting_replicas,
            max_replica_count=p.batch_max_replicas,
            labels=self.labels,
        ).set_display_name("Vertex batch prediction job")


def make_ops(target: str, platform: Platform, pipeline_name: str = "tfpipe-training") -> SelfHostedOps:
    return (VertexOps if target == "vertex" else SelfHostedOps)(platform, pipeline_name)
