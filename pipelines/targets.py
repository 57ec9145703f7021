"""The platform seam: how the platform-service steps (tuning, training, model upload, endpoint deploy, batch
prediction) run on each target.

- vertex: GCPC `HyperparameterTuningJobRunOp` + this project's best-trial reader, `CustomTrainingJobOp` with
  worker pools running the trainer image, the champion from the Model Registry (the version holding the champion
  alias), `ModelUploadOp` fed by an importer of an `UnmanagedContainerModel` (this project's serving image by
  default; a new version of the registry model with the configured display name when it exists),
  `EndpointCreateOp` or an importer of the existing `VertexEndpoint` + `ModelDeployOp` (dedicated resources, canary
  traffic split) + the rollout's end (undeploy the previous models, move the champion alias),
  `ModelBatchPredictOp` on a registry model version. Every job and resource gets the run's service account,
  network, CMEK key and labels where its op takes them.
- local: this project's components: the local study, the local multi-worker launcher, the versioned model
  repository (its newest version is the champion), the TF-Serving-compatible endpoint and the local batch predictor.
- kubeflow: Kubeflow's engines, each a config choice (`platform.kubeflow`): training as a TFJob of the training
  operator (`operator`) or the local launcher in the step's pod (`pod`); the study as a Katib Experiment (`katib`)
  or the local study (`pod`); serving on a KServe InferenceService (`kserve`), a TF Serving you run (`url`) or not at
  all (`none`); the model repository and batch predictor as on local. Every step mounts the shared
  PersistentVolumeClaim (kfp-kubernetes) and gets its CPU and memory requests and limits.
`PlatformOps` is the seam's contract; `VertexOps` and `SelfHostedOps` (with `KubeflowOps`, its kubeflow variant)
implement it, each building only the components it runs. Steps that read or change state outside the run
(champion and registry look-ups, upload, endpoint, deploy, batch prediction) are never cached; the rest are, keyed
on the data's fingerprint.
Every other step (data prep, evaluation gate, TFLite quantization) is the same lightweight component on all targets
(base image: the components image).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

from kfp import dsl

from components import (
    check_batch_prediction_job,
    check_champion,
    crown_vertex_model,
    default_hyperparameters,
    deploy_model,
    deploy_model_at_url,
    deploy_model_on_kserve,
    evaluate_model,
    find_endpoint,
    find_model,
    find_registry_champion,
    find_repository_champion,
    fingerprint_data,
    finish_vertex_rollout,
    import_trained_model,
    merge_hyperparameters,
    plan_batch_prediction,
    plan_traffic_split,
    plan_vertex_training,
    prepare_data,
    publish_model,
    quantize_model,
    read_best_trial,
    run_batch_prediction,
    train_model,
    train_model_on_operator,
    tune_hyperparameters,
    tune_on_katib,
)
from components.lib.study.spec import StudySpec
from pipelines.config import ConfigError, Platform
from trainer.builder import DEFAULT_BUILDER

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


def _uncached(task):
    """Steps that look up or change state outside the run (registry, endpoint, repository) must run every time."""
    return task.set_caching_options(False)


class PlatformOps(Protocol):
    """The seam: each pipeline step as a target runs it. Arguments are the pipeline's channels (or constants); each
    method adds its tasks to the pipeline being defined and returns what the DAG hands on."""

    def prepare_data(self, *, data_source: Any, **options: Any) -> dsl.PipelineTask: ...

    def find_champion(self, *, model_repository: Any, model_name: Any) -> dsl.PipelineTask: ...

    def check_champion(self, *, dataset: Any, champion: dsl.PipelineTask) -> dsl.PipelineTask: ...

    def tune(
        self,
        *,
        dataset: Any,
        study: StudySpec,
        enabled: Any,
        trial_epochs: Any,
        batch_size: Any,
        learning_rate: Any,
        after: dsl.PipelineTask,
    ) -> Any: ...

    def train(self, *, dataset: Any, workers: Any, epochs: Any, hyperparameters: Any, max_restarts: Any) -> Trained: ...

    def evaluate(
        self,
        *,
        trained: Trained,
        dataset: Any,
        accuracy_threshold: Any,
        champion_tolerance: Any,
        champion: dsl.PipelineTask,
    ) -> dsl.PipelineTask: ...

    def register(
        self,
        *,
        trained: Trained,
        dataset: Any,
        evaluation: Any,
        model_repository: Any,
        model_name: Any,
        source_commit: Any,
    ) -> Any: ...

    def deploy(
        self,
        *,
        enabled: Any,
        registered: Any,
        dataset: Any,
        traffic_percentage: Any,
        model_repository: Any,
        model_name: Any,
        serving_url: Any,
        rest_port: Any,
        grpc_port: Any,
    ) -> None: ...

    def quantize_model(self, **inputs: Any) -> dsl.PipelineTask: ...

    def batch_predict(
        self,
        *,
        instances: Any,
        instances_format: Any,
        model: Any,
        model_repository: Any,
        model_name: Any,
        batch_size: Any,
        key_field: Any,
        included_fields: Any,
        excluded_fields: Any,
        instance_type: Any,
        max_error_fraction: Any,
        signature_name: Any,
        output_prefix: Any,
    ) -> dsl.PipelineTask: ...


class _SameEverywhere(ABC):
    """The steps every target runs as the same lightweight components: data prep (keyed on the data's fingerprint),
    the evaluation gate (against the target's champion) and TFLite quantization."""

    def __init__(self, platform: Platform, pipeline_name: str, model_builder: str = DEFAULT_BUILDER):
        image = platform.components_image
        self.platform = platform
        self.image = image
        self.pipeline_name = pipeline_name
        self.model_builder = model_builder  # what every trial and the training train (trainer --model)
        self._fingerprint = _component(fingerprint_data.fingerprint_data, image)
        self._prepare = _component(prepare_data.prepare_data, image)
        self._evaluate = _component(evaluate_model.evaluate_model, image)
        self._check_champion = _component(check_champion.check_champion, image)
        self._quantize = _component(quantize_model.quantize_model, image)

    def _place(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """Where a task's pod runs and what it gets (the kubeflow target's volume and resources); here: as is."""
        return task

    @abstractmethod
    def find_champion(self, model_repository: Any, model_name: Any) -> dsl.PipelineTask:
        """The never-cached look-up of the champion the gate compares with: `path`, `name` and `model_uri`."""

    def prepare_data(self, data_source, **options):
        """Data prep keyed on a never-cached fingerprint of the source: fresh data runs it again, the same data is
        a cache hit (and so is everything downstream that only depends on it)."""
        fingerprint = self._place(_uncached(self._fingerprint(data_source=data_source)))
        fingerprint.set_display_name("Fingerprint data")
        return self._place(self._prepare(data_source=data_source, data_fingerprint=fingerprint.output, **options))

    def quantize_model(self, **inputs):
        return self._place(self._quantize(**inputs))

    def check_champion(self, dataset, champion):
        """Stops the run right after data prep when the data do not fit the champion (labels, input)."""
        task = self._check_champion(
            dataset=dataset, champion_path=champion.outputs["path"], champion_name=champion.outputs["name"]
        )
        return self._place(task).set_display_name("Check data against the champion")

    def evaluate(self, trained: Trained, dataset, accuracy_threshold, champion_tolerance, champion):
        """The evaluation gate against the target's champion (`find_champion`); its `Output` is the blessing."""
        return self._place(
            self._evaluate(
                model=trained.model,
                dataset=dataset,
                accuracy_threshold=accuracy_threshold,
                champion_tolerance=champion_tolerance,
                champion_path=champion.outputs["path"],
                champion_name=champion.outputs["name"],
                champion_model_uri=champion.outputs["model_uri"],
            )
        ).set_display_name("Evaluation gate")


class SelfHostedOps(_SameEverywhere):
    """The local target (and the kubeflow target's `pod` engines): this project's own components."""

    def __init__(self, platform: Platform, pipeline_name: str, model_builder: str = DEFAULT_BUILDER):
        super().__init__(platform, pipeline_name, model_builder)
        image = platform.components_image
        self._champion = _component(find_repository_champion.find_repository_champion, image)
        self._train = _component(train_model.train_model, image)
        self._tune = _component(tune_hyperparameters.tune_hyperparameters, image)
        self._publish = _component(publish_model.publish_model, image)
        self._deploy = _component(deploy_model.deploy_model, image)

    def tune(self, dataset, study, enabled, trial_epochs, batch_size, learning_rate, after):
        """The final training's hyperparameters (a dict channel), from a local study when `enabled`."""
        task = self._place(
            self._tune(
                dataset=dataset,
                study_spec=study.model_dump(),
                enabled=enabled,
                trial_epochs=trial_epochs,
                batch_size=batch_size,
                learning_rate=learning_rate,
                model_builder=self.model_builder,
            )
        ).after(after)
        task.set_display_name("Hyperparameter study (local trials)")
        return task.outputs["Output"]

    def train(self, dataset, workers, epochs, hyperparameters, max_restarts) -> Trained:
        task = self._place(
            self._train(
                dataset=dataset,
                workers=workers,
                epochs=epochs,
                hyperparameters=hyperparameters,
                model_builder=self.model_builder,
                max_restarts=max_restarts,
            )
        )
        task.set_display_name("Train (local multi-worker)")
        return Trained(task.outputs["model"], task.outputs["training"])

    def find_champion(self, model_repository, model_name):
        """The never-cached look-up of the champion the gate compares with: the repository's newest version."""
        task = self._place(self._champion(model_repository=model_repository, model_name=model_name))
        return _uncached(task.set_display_name("Find champion (model repository)"))

    def register(self, trained: Trained, dataset, evaluation, model_repository, model_name, source_commit):
        """Publish the blessed model; returns the registered model's artifact channel (what `deploy` takes)."""
        task = _uncached(
            self._place(
                self._publish(
                    model=trained.model,
                    dataset=dataset,
                    training=trained.training,
                    evaluation=evaluation,
                    model_repository=model_repository,
                    model_name=model_name,
                    run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                    source_commit=source_commit,
                )
            ).set_display_name("Publish to model repository")
        )
        return task.outputs["published"]

    def deploy(
        self,
        enabled,
        registered,
        dataset,
        traffic_percentage,
        model_repository,
        model_name,
        serving_url,
        rest_port,
        grpc_port,
    ):
        """When `enabled`, serve the published version (TF Serving layout; the server switches to the newest
        version, so `traffic_percentage` does not apply). The published version is the champion either way."""
        with dsl.If(enabled == True, name="deploy-enabled"):  # noqa: E712 (KFP condition)
            _uncached(
                self._deploy(
                    published=registered,
                    dataset=dataset,
                    model_repository=model_repository,
                    model_name=model_name,
                    serving_url=serving_url,
                    rest_port=rest_port,
                    grpc_port=grpc_port,
                ).set_display_name("Deploy (TF Serving endpoint)")
            )

    def batch_predict(
        self,
        instances,
        instances_format,
        model,
        model_repository,
        model_name,
        batch_size,
        key_field,
        included_fields,
        excluded_fields,
        instance_type,
        max_error_fraction,
        signature_name,
        output_prefix,
    ):
        """The local batch predictor on a repository version (predictions in its `predictions` artifact, so
        `output_prefix` does not apply); it fails when more than `max_error_fraction` of the instances failed."""
        return _component(run_batch_prediction.run_batch_prediction, self.image)(
            model_repository=model_repository,
            model_name=model_name,
            model=model,
            instances=instances,
            instances_format=instances_format,
            batch_size=batch_size,
            key_field=key_field,
            included_fields=included_fields,
            excluded_fields=excluded_fields,
            instance_type=instance_type,
            max_error_fraction=max_error_fraction,
            signature_name=signature_name,
        ).set_display_name("Batch prediction (local predictor)")


class VertexOps(_SameEverywhere):
    """The vertex target: GCPC ops and the Vertex AI API for the platform services."""

    def __init__(self, platform: Platform, pipeline_name: str, model_builder: str = DEFAULT_BUILDER):
        super().__init__(platform, pipeline_name, model_builder)
        # labels of every Vertex resource and job: the runs' labels, the model labels, the pipeline's name
        self.labels = platform.vertex_labels(pipeline_name)
        image = platform.components_image
        self._plan = _component(plan_vertex_training.plan_vertex_training, image)
        self._import = _component(import_trained_model.import_trained_model, image)
        self._defaults = _component(default_hyperparameters.default_hyperparameters, image)
        self._merge = _component(merge_hyperparameters.merge_hyperparameters, image)
        self._best = _component(read_best_trial.read_best_trial, image)
        self._champion = _component(find_registry_champion.find_registry_champion, image)
        self._find_model = _component(find_model.find_model, image)
        self._find_endpoint = _component(find_endpoint.find_endpoint, image)
        self._split = _component(plan_traffic_split.plan_traffic_split, image)
        self._plan_batch = _component(plan_batch_prediction.plan_batch_prediction, image)
        self._finish = _component(finish_vertex_rollout.finish_vertex_rollout, image)
        self._crown = _component(crown_vertex_model.crown_vertex_model, image)
        from components import deploy_vertex_model  # GCPC's types: imported for vertex only

        self._deploy = deploy_vertex_model.deploy_vertex_model(image)

    def _place(self, task):
        """A lightweight step's CPU and memory limits from `platform.step_limits` (Vertex picks the machine)."""
        limits = self.platform.step_limits.get(task.component_spec.name)
        if limits and limits.cpu_limit:
            task.set_cpu_limit(limits.cpu_limit)
        if limits and limits.memory_limit:
            task.set_memory_limit(limits.memory_limit)
        return task

    def prepare_data(self, data_source, **options):
        """Data prep as the other targets run it, on Dataflow unless `platform.data_prep.runner` is "direct" or the
        step finds fewer than `dataflow_min_records` records: the job as the runs' service account, on their network,
        with their CMEK key and labels, the components image on its workers; temp and staging under the pipeline
        root (beside the dataset when none is set)."""
        p, prep = self.platform, self.platform.data_prep
        root = p.pipeline_root.rstrip("/")
        dataflow = {
            "project": p.project,
            "region": prep.region or p.location,
            "service_account": p.service_account,
            "network": p.network.rsplit("/", 1)[-1],  # Dataflow takes the network's name
            "subnetwork": prep.subnetwork,
            "kms_key": p.encryption_spec_key_name,
            "labels": self.labels,
            "machine_type": prep.machine_type,
            "max_workers": prep.max_workers,
            "sdk_container_image": p.components_image,
            "temp_location": f"{root}/dataflow/temp" if root else "",
            "staging_location": f"{root}/dataflow/staging" if root else "",
            "endpoint": prep.endpoint,
        }
        if prep.runner == "dataflow":
            options.update(dataflow_options=dataflow, dataflow_min_records=prep.dataflow_min_records)
        return super().prepare_data(data_source, runner=prep.runner, **options)

    @property
    def identity(self) -> dict:
        """The run's identity for the jobs that take it: service account, VPC network, CMEK key."""
        p = self.platform
        return dict(
            service_account=p.service_account, network=p.network, encryption_spec_key_name=p.encryption_spec_key_name
        )

    def _plan_pools(self, dataset, workers, epochs, hyperparameters, tuned_parameters, purpose):
        p = self.platform
        return self._plan(
            dataset=dataset,
            trainer_image=p.training_image(),
            machine_type=p.machine_type,
            accelerator_type=p.accelerator_type,
            accelerator_count=p.accelerator_count,
            workers=workers,
            epochs=epochs,
            hyperparameters=hyperparameters,
            tuned_parameters=tuned_parameters,
            model_builder=self.model_builder,
            pipeline_name=self.pipeline_name,
            purpose=purpose,
        )

    def tune(self, dataset, study, enabled, trial_epochs, batch_size, learning_rate, after):
        """Vertex AI tuning job when `enabled` (trials run the trainer image; the best trial's values override the
        pipeline's), else the pipeline's values."""
        from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import HyperparameterTuningJobRunOp

        p = self.platform
        with dsl.If(enabled == True, name="tuning-enabled"):  # noqa: E712 (KFP condition)
            defaults = self._defaults(batch_size=batch_size, learning_rate=learning_rate).after(after)
            defaults.set_display_name("Hyperparameters (fixed part)")
            plan = self._plan_pools(
                dataset, 1, trial_epochs, defaults.output, [q.parameter_id for q in study.parameters], "tune"
            )
            plan.set_display_name("Plan trial worker pool")
            job = HyperparameterTuningJobRunOp(
                display_name=plan.outputs["display_name"],
                base_output_directory=plan.outputs["base_output_directory"],
                worker_pool_specs=plan.outputs["worker_pool_specs"],
                study_spec_metrics=study.study_spec_metrics(),
                study_spec_parameters=study.study_spec_parameters(),
                max_trial_count=study.max_trial_count,
                parallel_trial_count=study.parallel_trial_count,
                max_failed_trial_count=study.max_failed_trial_count,
                location=p.location,
                study_spec_algorithm=study.vertex_algorithm() or "ALGORITHM_UNSPECIFIED",
                study_spec_measurement_selection_type=f"{study.measurement.upper()}_MEASUREMENT",
                **self.identity,
            ).set_display_name("Hyperparameter tuning job")
            best = self._best(gcp_resources=job.outputs["gcp_resources"], metric_id=study.metric_id, goal=study.goal)
            best.set_display_name("Best trial")
            tuned = self._merge(defaults=defaults.output, best=best.outputs["best_parameters"])
            tuned.set_display_name("Hyperparameters (tuned)")
        with dsl.Else(name="tuning-disabled"):
            fixed = self._defaults(batch_size=batch_size, learning_rate=learning_rate).after(after)
            fixed.set_display_name("Hyperparameters")
        return dsl.OneOf(tuned.output, fixed.output)

    def train(self, dataset, workers, epochs, hyperparameters, max_restarts) -> Trained:
        from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp

        p = self.platform
        plan = self._plan_pools(dataset, workers, epochs, hyperparameters, [], "train")
        plan.set_display_name("Plan worker pools")
        job = CustomTrainingJobOp(
            display_name=plan.outputs["display_name"],
            location=p.location,
            worker_pool_specs=plan.outputs["worker_pool_specs"],
            base_output_directory=plan.outputs["base_output_directory"],
            # max_restarts is the local launcher's; on Vertex the whole job restarts with a worker
            restart_job_on_worker_restart=True,
            tensorboard=p.tensorboard,
            labels=self.labels,
            **self.identity,
        ).set_display_name("Train (Vertex custom job, MultiWorkerMirroredStrategy)")
        imported = self._import(job_dir=plan.outputs["job_dir"], gcp_resources=job.outputs["gcp_resources"])
        imported.set_display_name("Import trained model")
        return Trained(imported.outputs["model"], imported.outputs["training"], imported.outputs["model_uri"])

    def find_champion(self, model_repository, model_name):
        """The never-cached look-up of the registry version holding the champion alias."""
        p = self.platform
        task = self._champion(
            display_name=p.model_display_name, alias=p.champion_alias, project=PROJECT, location=p.location
        )
        return _uncached(task.set_display_name("Find champion (Model Registry)"))

    def register(self, trained: Trained, dataset, evaluation, model_repository, model_name, source_commit):
        """Upload to the Model Registry: a new version of the model with the configured display name when it
        exists, else a new model; returns the uploaded `VertexModel` (resourceName `.../models/ID@VERSION`). No
        alias moves here: the deploy step moves them once the version serves (or right away without a deploy)."""
        from google_cloud_pipeline_components.types.artifact_types import UnmanagedContainerModel, VertexModel
        from google_cloud_pipeline_components.v1.model import ModelUploadOp

        p = self.platform
        unmanaged = dsl.importer(
            artifact_uri=trained.model_uri,
            artifact_class=UnmanagedContainerModel,
            metadata={"containerSpec": p.serving_container_spec()},
        ).set_display_name("Serving container spec")
        upload = dict(
            display_name=p.model_display_name,
            location=p.location,
            unmanaged_container_model=unmanaged.outputs["artifact"],
            labels=self.labels,
            encryption_spec_key_name=p.encryption_spec_key_name,
        )
        found = _uncached(self._find_model(display_name=p.model_display_name, project=PROJECT, location=p.location))
        found.set_display_name("Find registry model")
        with dsl.If(found.outputs["resource_name"] != "", name="model-exists"):
            parent = dsl.importer(
                artifact_uri=found.outputs["resource_uri"],
                artifact_class=VertexModel,
                metadata={"resourceName": found.outputs["resource_name"]},
            ).set_display_name("Registry model")
            version = _uncached(ModelUploadOp(parent_model=parent.outputs["artifact"], **upload))
            version.set_display_name("Upload new model version")
        with dsl.Else(name="model-missing"):
            first = _uncached(ModelUploadOp(**upload)).set_display_name("Upload to Vertex Model Registry")
        return dsl.OneOf(version.outputs["model"], first.outputs["model"])

    def deploy(
        self,
        enabled,
        registered,
        dataset,
        traffic_percentage,
        model_repository,
        model_name,
        serving_url,
        rest_port,
        grpc_port,
    ):
        """When `enabled`: deploy the uploaded version on the endpoint with the configured display name (created
        when missing), on dedicated resources, with `traffic_percentage` % of the traffic (the rest stays on the
        endpoint's current models), then finish the rollout (at 100 %: undeploy the others but `keep_previous`,
        move the champion aliases). Otherwise move the aliases to the uploaded version now."""
        from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint
        from google_cloud_pipeline_components.v1.endpoint import EndpointCreateOp

        p = self.platform
        aliases = list(p.model_version_aliases)
        with dsl.If(enabled == True, name="deploy-enabled"):  # noqa: E712 (KFP condition)
            found = _uncached(
                self._find_endpoint(display_name=p.endpoint_display_name, project=PROJECT, location=p.location)
            )
            found.set_display_name("Find endpoint")
            with dsl.If(found.outputs["resource_name"] != "", name="endpoint-exists"):
                existing = dsl.importer(
                    artifact_uri=found.outputs["resource_uri"],
                    artifact_class=VertexEndpoint,
                    metadata={"resourceName": found.outputs["resource_name"]},
                ).set_display_name("Existing endpoint")
            with dsl.Else(name="endpoint-missing"):
                created = _uncached(
                    EndpointCreateOp(
                        display_name=p.endpoint_display_name,
                        location=p.location,
                        labels=self.labels,
                        encryption_spec_key_name=p.encryption_spec_key_name,
                    )
                )
                created.set_display_name("Create endpoint")
            endpoint = dsl.OneOf(existing.outputs["artifact"], created.outputs["endpoint"])
            split = _uncached(
                self._split(endpoint_name=found.outputs["resource_name"], traffic_percentage=traffic_percentage)
            )
            split.set_display_name("Traffic split")
            deployed = _uncached(
                self._deploy(
                    model=registered,
                    endpoint=endpoint,
                    deployed_model_display_name=p.model_display_name,
                    traffic_split=split.output,
                    machine_type=p.serving_machine_type,
                    min_replica_count=p.serving_min_replicas,
                    max_replica_count=p.serving_max_replicas,
                    accelerator_type=p.serving_accelerator_type,
                    accelerator_count=p.serving_accelerator_count,
                    service_account=p.service_account,
                )
            ).set_display_name("Deploy to endpoint")
            finish = _uncached(
                self._finish(
                    endpoint=endpoint,
                    model=registered,
                    traffic_percentage=traffic_percentage,
                    keep_previous=p.keep_previous,
                    aliases=aliases,
                ).after(deployed)
            )
            finish.set_display_name("Finish rollout (undeploy previous, move champion alias)")
        with dsl.Else(name="deploy-disabled"):
            crown = _uncached(self._crown(model=registered, aliases=aliases))
            crown.set_display_name("Move champion alias")

    def batch_predict(
        self,
        instances,
        instances_format,
        model,
        model_repository,
        model_name,
        batch_size,
        key_field,
        included_fields,
        excluded_fields,
        instance_type,
        max_error_fraction,
        signature_name,
        output_prefix,
    ):
        """A Vertex batch prediction job on a registry model version (`model` "": the champion alias), with the
        instance config the plan step derives from the options and the model's feature columns and the signature
        it picks (as `model_parameters`, honoured by this project's serving container), then a step that
        reads the job's counts and fails when more than `max_error_fraction` of the instances failed (the job itself
        succeeds whatever its instances do). Never cached: the instances behind a glob and the champion change
        between runs."""
        from google_cloud_pipeline_components.types.artifact_types import VertexModel
        from google_cloud_pipeline_components.v1.batch_predict_job import ModelBatchPredictOp

        p = self.platform
        plan = self._plan_batch(
            model=model,
            display_name=p.model_display_name,
            alias=p.champion_alias,
            instances=instances,
            output_prefix=output_prefix,
            project=PROJECT,
            location=p.location,
            run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
            instances_format=instances_format,
            key_field=key_field,
            included_fields=included_fields,
            excluded_fields=excluded_fields,
            instance_type=instance_type,
            signature_name=signature_name,
        )
        _uncached(plan).set_display_name("Resolve model version and inputs")
        version = dsl.importer(
            artifact_uri=plan.outputs["model_uri"],
            artifact_class=VertexModel,
            metadata={"resourceName": plan.outputs["model_name"]},
        ).set_display_name("Model version")
        job = _uncached(
            ModelBatchPredictOp(
                job_display_name=plan.outputs["job_display_name"],
                location=p.location,
                model=version.outputs["artifact"],
                gcs_source_uris=plan.outputs["gcs_source_uris"],
                instances_format=instances_format,
                predictions_format="jsonl",
                gcs_destination_output_uri_prefix=plan.outputs["output_prefix"],
                key_field=key_field,
                included_fields=plan.outputs["included_fields"],
                excluded_fields=plan.outputs["excluded_fields"],
                instance_type=plan.outputs["instance_type"],
                model_parameters=plan.outputs["model_parameters"],
                manual_batch_tuning_parameters_batch_size=batch_size,
                machine_type=p.batch_machine_type,
                starting_replica_count=p.batch_starting_replicas,
                max_replica_count=p.batch_max_replicas,
                service_account=p.service_account,
                encryption_spec_key_name=p.encryption_spec_key_name,
                labels=self.labels,
            )
        ).set_display_name("Vertex batch prediction job")
        check = _component(check_batch_prediction_job.check_batch_prediction_job, self.image)(
            gcp_resources=job.outputs["gcp_resources"], max_error_fraction=max_error_fraction
        )
        _uncached(check).set_display_name("Check the job's error budget")
        return job


class KubeflowOps(SelfHostedOps):
    """The kubeflow target: the self-hosted steps plus Kubeflow's engines, the shared volume and pod resources."""

    def __init__(self, platform: Platform, pipeline_name: str, model_builder: str = DEFAULT_BUILDER):
        super().__init__(platform, pipeline_name, model_builder)
        self.kubeflow = platform.kubeflow
        image = platform.components_image
        self._train_operator = _component(train_model_on_operator.train_model_on_operator, image)
        self._tune_katib = _component(tune_on_katib.tune_on_katib, image)
        self._deploy_kserve = _component(deploy_model_on_kserve.deploy_model_on_kserve, image)
        self._deploy_url = _component(deploy_model_at_url.deploy_model_at_url, image)

    def _place(self, task):
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

    def _engine_inputs(self) -> dict:
        k = self.kubeflow
        return dict(
            namespace=k.namespace,
            service_account=k.service_account,
            claim_name=k.volume.claim_name,
            mount_path=k.volume.mount_path,
            poll_seconds=float(k.poll_seconds),
        )

    def _engine(self, task):
        """An engine step's pod: `_place`'s, and the run's name in its environment (components.lib.kube.api.run_id)."""
        from kfp import kubernetes

        from components.lib.kube import api as kube

        return kubernetes.use_field_path_as_env(self._place(task), kube.RUN_ID_ENV, kube.RUN_ID_FIELD)

    def tune(self, dataset, study, enabled, trial_epochs, batch_size, learning_rate, after):
        if self.kubeflow.tuning == "pod":
            return super().tune(dataset, study, enabled, trial_epochs, batch_size, learning_rate, after)
        try:
            tune_on_katib.search_space(study)  # a study Katib cannot express fails at compile time
        except ValueError as e:
            raise ConfigError(f"platform.kubeflow.tuning is katib, but {e}") from None
        k = self.kubeflow
        task = self._engine(
            self._tune_katib(
                dataset=dataset,
                study_spec=study.model_dump(),
                enabled=enabled,
                trial_epochs=trial_epochs,
                batch_size=batch_size,
                learning_rate=learning_rate,
                model_builder=self.model_builder,
                trainer_image=self.platform.kubeflow_trainer_image(),
                resources=k.worker_resources.requirements(),
                timeout_minutes=k.tuning_timeout_minutes,
                **self._engine_inputs(),
            )
        ).after(after)
        task.set_display_name("Hyperparameter study (Katib experiment)")
        return task.outputs["Output"]

    def train(self, dataset, workers, epochs, hyperparameters, max_restarts) -> Trained:
        if self.kubeflow.training == "pod":
            return super().train(dataset, workers, epochs, hyperparameters, max_restarts)
        k = self.kubeflow
        task = self._engine(
            self._train_operator(
                dataset=dataset,
                workers=workers,
                epochs=epochs,
                hyperparameters=hyperparameters,
                model_builder=self.model_builder,
                max_restarts=max_restarts,
                trainer_image=self.platform.kubeflow_trainer_image(),
                resources=k.worker_resources.requirements(),
                timeout_minutes=k.training_timeout_minutes,
                **self._engine_inputs(),
            )
        )
        task.set_display_name("Train (TFJob, MultiWorkerMirroredStrategy)")
        return Trained(task.outputs["model"], task.outputs["training"])

    def deploy(
        self,
        enabled,
        registered,
        dataset,
        traffic_percentage,
        model_repository,
        model_name,
        serving_url,
        rest_port,
        grpc_port,
    ):
        """`serving: kserve`: an InferenceService with `traffic_percentage` % of the traffic; `url`: check the TF
        Serving at `serving_url`; `none`: no deploy step (the published version is the champion)."""
        k, p = self.kubeflow, self.platform
        if k.serving == "none":
            return
        with dsl.If(enabled == True, name="deploy-enabled"):  # noqa: E712 (KFP condition)
            if k.serving == "url":
                task = self._place(
                    self._deploy_url(
                        published=registered,
                        dataset=dataset,
                        model_repository=model_repository,
                        model_name=model_name,
                        serving_url=serving_url,
                    )
                )
                name = "Deploy (TF Serving at serving_url)"
            else:
                inputs = self._engine_inputs()
                task = self._deploy_kserve(
                    published=registered,
                    dataset=dataset,
                    model_repository=model_repository,
                    model_name=model_name,
                    traffic_percentage=traffic_percentage,
                    inference_service=k.inference_service,
                    predictor_kind=k.predictor,
                    serving_image=p.kubeflow_serving_image(),
                    runtime_version=k.tensorflow_runtime_version,
                    resources=k.serving_resources.requirements(),
                    min_replicas=p.serving_min_replicas,
                    max_replicas=p.serving_max_replicas,
                    keep_previous=p.keep_previous,
                    timeout_minutes=k.serving_timeout_minutes,
                    **inputs,
                )
                task = self._engine(task)
                name = "Deploy (KServe InferenceService)"
            _uncached(task).set_display_name(name)

    def batch_predict(self, **inputs):
        return self._place(super().batch_predict(**inputs))


def make_ops(target: str, platform: Platform, pipeline_name: str, model_builder: str = DEFAULT_BUILDER) -> PlatformOps:
    """The target's ops; `model_builder` (`package.module:function`) is the model its trials and training train."""
    implementations: dict[str, type[VertexOps] | type[SelfHostedOps]] = {"vertex": VertexOps, "kubeflow": KubeflowOps}
    return implementations.get(target, SelfHostedOps)(platform, pipeline_name, model_builder)
