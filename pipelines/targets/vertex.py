"""The vertex target: GCPC's tuning launcher (trials placed as the training job) + this project's best-trial reader,
`CustomTrainingJobOp` with worker pools running the trainer image, the champion from the Model Registry (the version holding the champion
alias), the version already holding the trained artifacts or `ModelUploadOp` fed by an importer of an
`UnmanagedContainerModel` (a new version of the registry model with the configured display name), or the model
created with an ID of its own when there is none; the endpoint found or created the same way (GCPC's upload and
endpoint ops take no ID: two runs at once would make two) + the deploy (dedicated resources, canary traffic split) +
the rollout's end (undeploy the previous models, move the champion alias), `ModelBatchPredictOp` on a registry model
version. Every job and resource gets the run's service
account, network, CMEK key and labels where its op takes them."""

from __future__ import annotations

from typing import Any

from kfp import dsl
from kfp.dsl import PipelineTask

from components import (
    check_batch_prediction_job,
    claim_output_directory,
    create_model,
    crown_vertex_model,
    default_hyperparameters,
    ensure_endpoint,
    find_model,
    find_registry_champion,
    finish_vertex_rollout,
    import_trained_model,
    merge_hyperparameters,
    plan_batch_prediction,
    plan_traffic_split,
    plan_vertex_training,
    read_best_trial,
    verify_vertex_deploy,
)
from pipelines.config import Platform
from pipelines.config.platform import PREBUILT_SERVING
from pipelines.targets.base import SameEverywhere, champion_of, component, uncached
from pipelines.targets.inputs import (
    BatchPredictInputs,
    Champion,
    Channel,
    DeployInputs,
    PrepareInputs,
    RegisterInputs,
    Repository,
    Trained,
    TrainInputs,
    TuneInputs,
    keywords,
)
from trainer.flags import TrainerSetup

# the project of the running Vertex pipeline (what GCPC ops default `project` to)
PROJECT = "{{$.pipeline_google_cloud_project_id}}"


class VertexOps(SameEverywhere):
    """The vertex target: GCPC ops and the Vertex AI API for the platform services."""

    def __init__(self, platform: Platform, pipeline_name: str, trainer: TrainerSetup | None = None):
        super().__init__(platform, pipeline_name, trainer)
        # labels of every Vertex resource and job: the runs' labels, the model labels, the pipeline's name
        self.labels = platform.vertex_labels(pipeline_name)
        image = platform.components_image
        self._plan = component(plan_vertex_training.plan_vertex_training, image)
        self._claim_dir = component(claim_output_directory.claim_output_directory, image)
        self._import = component(import_trained_model.import_trained_model, image)
        self._defaults = component(default_hyperparameters.default_hyperparameters, image)
        self._merge = component(merge_hyperparameters.merge_hyperparameters, image)
        self._best = component(read_best_trial.read_best_trial, image)
        self._champion = component(find_registry_champion.find_registry_champion, image)
        self._find_model = component(find_model.find_model, image)
        self._ensure_endpoint = component(ensure_endpoint.ensure_endpoint, image)
        self._create_model = component(create_model.create_model, image)
        self._split = component(plan_traffic_split.plan_traffic_split, image)
        self._plan_batch = component(plan_batch_prediction.plan_batch_prediction, image)
        self._finish = component(finish_vertex_rollout.finish_vertex_rollout, image)
        self._crown = component(crown_vertex_model.crown_vertex_model, image)
        self._verify = component(verify_vertex_deploy.verify_vertex_deploy, image)
        from components import deploy_vertex_model  # GCPC's types: imported for vertex only

        self._deploy = deploy_vertex_model.deploy_vertex_model(image)

    def _place(self, task: PipelineTask) -> PipelineTask:
        """A lightweight step's CPU and memory limits from `platform.step_limits` (Vertex picks the machine)."""
        limits = self.platform.step_limits.get(task.component_spec.name)
        if limits and limits.cpu_limit:
            task.set_cpu_limit(limits.cpu_limit)
        if limits and limits.memory_limit:
            task.set_memory_limit(limits.memory_limit)
        return task

    def prepare_data(self, inputs: PrepareInputs) -> PipelineTask:
        """Data prep as the other targets run it, on Dataflow unless `platform.data_prep.runner` is "direct" or the
        step finds fewer than `dataflow_min_records` records: the job as the runs' service account, on their network,
        with their CMEK key and labels, the components image on its workers; temp and staging under the pipeline
        root (beside the dataset when none is set)."""
        p, prep = self.platform, self.platform.data_prep
        root = p.pipeline_root.rstrip("/")
        network, subnetwork = p.dataflow_network()
        dataflow = {
            "project": p.project,
            "region": prep.region or p.location,
            "service_account": p.service_account,
            "network": network,
            "subnetwork": subnetwork,
            "kms_key": p.encryption_spec_key_name,
            "labels": self.labels,
            "machine_type": prep.machine_type,
            "max_workers": prep.max_workers,
            "sdk_container_image": p.components_image,
            "temp_location": f"{root}/dataflow/temp" if root else "",
            "staging_location": f"{root}/dataflow/staging" if root else "",
            "endpoint": prep.endpoint,
        }
        options: dict[str, Any] = {"runner": prep.runner}
        if prep.runner == "dataflow":
            options.update(dataflow_options=dataflow, dataflow_min_records=prep.dataflow_min_records)
        return self._prepare_data(inputs, options)

    @property
    def identity(self) -> dict[str, str]:
        """The run's identity for the jobs that take it: service account, VPC network, CMEK key."""
        p = self.platform
        return dict(
            service_account=p.service_account, network=p.network, encryption_spec_key_name=p.encryption_spec_key_name
        )

    def _plan_pools(
        self,
        dataset: Channel,
        workers: Channel | int,
        epochs: Channel,
        hyperparameters: Channel,
        tuned_parameters: list[str],
        purpose: str,
        job_settings: dict,
        batch_workers: Channel | int = 0,
    ) -> PipelineTask:
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
            batch_workers=batch_workers,
            trainer=self.trainer.as_dict(),
            pipeline_name=self.pipeline_name,
            purpose=purpose,
            job_settings=job_settings,
        )

    def _claim(self, plan: PipelineTask) -> PipelineTask:
        """The job's output folder under the plan's root (never cached: a run beside another gets its own)."""
        task = self._claim_dir(root=plan.outputs["base_output_directory"], run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER)
        return uncached(task).set_display_name("Claim the job's output folder")

    def tune(self, inputs: TuneInputs) -> Channel:
        """Vertex AI tuning job when `enabled` (trials run the trainer image; the best trial's values override the
        pipeline's), else the pipeline's values. The trials run as the training job does: with its capacity
        (`training_capacity`), persistent resource and PSC interface, each passed only when set (GCPC's launcher with
        the fields its 2.22 op lacks; every setting also keys the plan's cache)."""
        from components import hyperparameter_tuning_job

        p, study = self.platform, inputs.study
        with dsl.If(inputs.enabled == True, name="tuning-enabled"):  # noqa: E712 (KFP condition)
            defaults = self._defaults(batch_size=inputs.batch_size, learning_rate=inputs.learning_rate).after(
                inputs.after
            )
            defaults.set_display_name("Hyperparameters (fixed part)")
            study_job = dict(
                study_spec_metrics=study.study_spec_metrics(),
                study_spec_parameters=study.study_spec_parameters(),
                max_trial_count=study.max_trial_count,
                parallel_trial_count=study.parallel_trial_count,
                max_failed_trial_count=study.max_failed_trial_count,
                location=p.location,
                study_spec_algorithm=study.vertex_algorithm() or "ALGORITHM_UNSPECIFIED",
                study_spec_measurement_selection_type=f"{study.measurement.upper()}_MEASUREMENT",
                **self.identity,
                **p.trial_placement(),
            )
            plan = self._plan_pools(
                inputs.dataset,
                1,
                inputs.trial_epochs,
                defaults.output,
                [q.parameter_id for q in study.parameters],
                "tune",
                study_job,
                batch_workers=inputs.workers,
            )
            plan.set_display_name("Plan trial worker pool")
            claim = self._claim(plan)
            job = hyperparameter_tuning_job.hyperparameter_tuning_job(
                display_name=plan.outputs["display_name"],
                base_output_directory=claim.output,
                worker_pool_specs=plan.outputs["worker_pool_specs"],
                **study_job,
            ).set_display_name("Hyperparameter tuning job")
            best = self._best(
                gcp_resources=job.outputs["gcp_resources"],
                metric_id=study.metric_id,
                goal=study.goal,
                root=plan.outputs["base_output_directory"],
                directory=claim.output,
                warm_start=study.warm_start,
            )
            best.set_display_name("Best trial")
            tuned = self._merge(
                defaults=defaults.output,
                best=best.outputs["best_parameters"],
                warm_start_from=best.outputs["warm_start_from"],
            )
            tuned.set_display_name("Hyperparameters (tuned)")
        with dsl.Else(name="tuning-disabled"):
            fixed = self._defaults(batch_size=inputs.batch_size, learning_rate=inputs.learning_rate).after(inputs.after)
            fixed.set_display_name("Hyperparameters")
        return dsl.OneOf(tuned.output, fixed.output)

    def train(self, inputs: TrainInputs) -> Trained:
        """A Vertex AI custom job on the planned worker pools, with the run's identity, the configured capacity
        (`training_capacity`), persistent resource and PSC interface (every setting also keys the plan's cache)."""
        from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp

        p = self.platform
        job_settings = dict(
            location=p.location,
            # max_restarts is the local launcher's; on Vertex the whole job restarts with a worker (a preempted
            # Spot worker too: the trainer resumes from its last epoch's checkpoint)
            restart_job_on_worker_restart=True,
            tensorboard=p.tensorboard,
            labels=self.labels,
            **p.training_capacity.scheduling(),
            persistent_resource_id=p.training_persistent_resource(),
            psc_interface_config=p.psc_interface_config(),
            **self.identity,
        )
        plan = self._plan_pools(
            inputs.dataset, inputs.workers, inputs.epochs, inputs.hyperparameters, [], "train", job_settings
        )
        plan.set_display_name("Plan worker pools")
        claim = self._claim(plan)
        job = CustomTrainingJobOp(
            display_name=plan.outputs["display_name"],
            worker_pool_specs=plan.outputs["worker_pool_specs"],
            base_output_directory=claim.output,
            **job_settings,
        ).set_display_name("Train (Vertex custom job, MultiWorkerMirroredStrategy)")
        imported = self._import(
            job_dir=plan.outputs["job_dir"], directory=claim.output, gcp_resources=job.outputs["gcp_resources"]
        )
        imported.set_display_name("Import trained model")
        return Trained(imported.outputs["model"], imported.outputs["training"], imported.outputs["model_uri"])

    def find_champion(self, repository: Repository) -> Champion:
        """The never-cached look-up of the registry version holding the champion alias (the registry model with the
        configured display name: `repository` does not apply)."""
        p = self.platform
        task = self._champion(
            display_name=p.model_display_name, alias=p.champion_alias, project=PROJECT, location=p.location
        )
        return champion_of(uncached(task.set_display_name("Find champion (Model Registry)")))

    def register(self, inputs: RegisterInputs) -> Channel:
        """Upload to the Model Registry: a new version of the model with the configured display name when it
        exists, else a new model; the version that holds the trained model's artifacts when there is one (a cached
        training's model is not uploaded again). Returns the `VertexModel` (resourceName `.../models/ID@VERSION`).
        An uploaded version's labels: the run's, and `source_commit` (a label value: checked at compile and submit;
        an empty one is left out), as the find-model step outputs them (a task output, resolved like any other). No
        alias moves here: the deploy step moves them once the version serves (or right away without a deploy)."""
        from google_cloud_pipeline_components.types.artifact_types import UnmanagedContainerModel, VertexModel
        from google_cloud_pipeline_components.v1.model import ModelUploadOp

        p = self.platform
        found = uncached(
            self._find_model(
                display_name=p.model_display_name,
                artifact_uri=inputs.trained.model_uri,
                project=PROJECT,
                location=p.location,
                labels=self.labels,
                source_commit=inputs.source_commit,
            )
        )
        found.set_display_name("Find registry model")
        unmanaged = dsl.importer(
            artifact_uri=inputs.trained.model_uri,
            artifact_class=UnmanagedContainerModel,
            metadata={"containerSpec": p.serving_container_spec()},
        ).set_display_name("Serving container spec")
        upload = dict(
            display_name=p.model_display_name,
            location=p.location,
            unmanaged_container_model=unmanaged.outputs["artifact"],
            labels=found.outputs["labels"],
            encryption_spec_key_name=p.encryption_spec_key_name,
        )
        with dsl.If(found.outputs["version_name"] != "", name="version-registered"):
            registered = dsl.importer(
                artifact_uri=found.outputs["version_uri"],
                artifact_class=VertexModel,
                metadata={"resourceName": found.outputs["version_name"]},
            ).set_display_name("Registered version")
        with dsl.Elif(found.outputs["resource_name"] != "", name="model-exists"):
            parent = dsl.importer(
                artifact_uri=found.outputs["resource_uri"],
                artifact_class=VertexModel,
                metadata={"resourceName": found.outputs["resource_name"]},
            ).set_display_name("Registry model")
            version = uncached(ModelUploadOp(parent_model=parent.outputs["artifact"], **upload))
            version.set_display_name("Upload new model version")
        with dsl.Else(name="model-missing"):
            first = uncached(
                self._create_model(
                    display_name=p.model_display_name,
                    artifact_uri=inputs.trained.model_uri,
                    container_spec=p.serving_container_spec(),
                    project=PROJECT,
                    location=p.location,
                    labels=found.outputs["labels"],
                    encryption_key=p.encryption_spec_key_name,
                    pipeline_job_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                )
            ).set_display_name("Create the registry model")
            created = dsl.importer(
                artifact_uri=first.outputs["resource_uri"],
                artifact_class=VertexModel,
                metadata={"resourceName": first.outputs["resource_name"]},
            ).set_display_name("New registry model")
        return dsl.OneOf(registered.outputs["artifact"], version.outputs["model"], created.outputs["artifact"])

    def deploy(self, inputs: DeployInputs) -> None:
        """When `enabled`: deploy the version on the endpoint with the configured display name (created when
        missing), on dedicated resources, with `traffic_percentage` % of the traffic (a canary's share taken from
        the champion's deployed model, replacing an earlier canary), unless it is deployed already (then only its
        traffic is set); a new deployed model must then answer the gate's `smoke_checks` through the endpoint's
        predict API as the candidate did (else it is undeployed and the split from before restored) before the
        rollout finishes (undeploy the replaced canary; at 100 %: the others but `keep_previous`, and move the
        champion aliases). Otherwise move the aliases to the version now."""
        from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint

        p = self.platform
        aliases = list(p.model_version_aliases)
        with dsl.If(inputs.enabled == True, name="deploy-enabled"):  # noqa: E712 (KFP condition)
            found = uncached(
                self._ensure_endpoint(
                    display_name=p.endpoint_display_name,
                    project=PROJECT,
                    location=p.location,
                    labels=self.labels,
                    encryption_key=p.encryption_spec_key_name,
                )
            )
            found.set_display_name("Find or create the endpoint")
            endpoint = dsl.importer(
                artifact_uri=found.outputs["resource_uri"],
                artifact_class=VertexEndpoint,
                metadata={"resourceName": found.outputs["resource_name"]},
            ).set_display_name("Endpoint")
            plan = uncached(
                self._split(
                    model=inputs.registered,
                    endpoint_name=found.outputs["resource_name"],
                    traffic_percentage=inputs.traffic_percentage,
                    alias=p.champion_alias,
                )
            )
            plan.set_display_name("Plan the deploy (traffic split)")
            finish = dict(
                endpoint=endpoint.outputs["artifact"],
                model=inputs.registered,
                traffic_percentage=inputs.traffic_percentage,
                keep_previous=p.keep_previous,
                aliases=aliases,
            )
            with dsl.If(plan.outputs["deployed_model_id"] == "", name="version-not-deployed"):
                deployed = uncached(
                    self._deploy(
                        model=inputs.registered,
                        endpoint=endpoint.outputs["artifact"],
                        deployed_model_display_name=p.model_display_name,
                        traffic_split=plan.outputs["traffic_split"],
                        machine_type=p.serving_machine_type,
                        min_replica_count=p.serving_min_replicas,
                        max_replica_count=p.serving_max_replicas,
                        accelerator_type=p.serving_accelerator_type,
                        accelerator_count=p.serving_accelerator_count,
                        service_account=p.service_account,
                    )
                ).set_display_name("Deploy to endpoint")
                verified = uncached(
                    self._verify(
                        endpoint=endpoint.outputs["artifact"],
                        model=inputs.registered,
                        smoke_checks=inputs.smoke_checks,
                        previous_split=plan.outputs["previous_split"],
                        default_signature_only=PREBUILT_SERVING in getattr(p, p.serving_image_field()),
                    ).after(deployed)
                )
                verified.set_display_name("Verify through the endpoint (undeploy on failure)")
                after_deploy = uncached(self._finish(**finish, traffic_split={}).after(verified))
                after_deploy.set_display_name("Finish rollout (undeploy replaced canary and previous, move alias)")
            with dsl.Else(name="version-deployed"):
                again = uncached(self._finish(**finish, traffic_split=plan.outputs["traffic_split"]))
                again.set_display_name("Finish rollout (version deployed already)")
        with dsl.Else(name="deploy-disabled"):
            crown = uncached(self._crown(model=inputs.registered, aliases=aliases))
            crown.set_display_name("Move champion alias")

    def batch_predict(self, inputs: BatchPredictInputs) -> PipelineTask:
        """A Vertex batch prediction job on a registry model version (`model` "": the champion alias), with the
        instance config the plan step derives from the options and the model's feature columns and the signature
        it picks (as `model_parameters`, honoured by this project's serving container), then a step that
        reads the job's counts and fails when more than `max_error_fraction` of the instances failed (the job itself
        succeeds whatever its instances do). Never cached: the instances behind a glob and the champion change
        between runs. `repository` does not apply."""
        from google_cloud_pipeline_components.types.artifact_types import VertexModel
        from google_cloud_pipeline_components.v1.batch_predict_job import ModelBatchPredictOp

        p, options = self.platform, inputs.options
        accelerators = (
            {"accelerator_type": p.batch_accelerator_type, "accelerator_count": p.batch_accelerator_count}
            if p.batch_accelerator_type
            else {}
        )
        plan = self._plan_batch(
            model=inputs.model,
            display_name=p.model_display_name,
            alias=p.champion_alias,
            instances=inputs.instances,
            output_prefix=inputs.output_prefix,
            project=PROJECT,
            location=p.location,
            run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
            **keywords(options),
        )
        uncached(plan).set_display_name("Resolve model version and inputs")
        version = dsl.importer(
            artifact_uri=plan.outputs["model_uri"],
            artifact_class=VertexModel,
            metadata={"resourceName": plan.outputs["model_name"]},
        ).set_display_name("Model version")
        job = uncached(
            ModelBatchPredictOp(
                job_display_name=plan.outputs["job_display_name"],
                location=p.location,
                model=version.outputs["artifact"],
                gcs_source_uris=plan.outputs["gcs_source_uris"],
                bigquery_source_input_uri=plan.outputs["bigquery_source_input_uri"],
                instances_format=options.instances_format,
                predictions_format=plan.outputs["predictions_format"],
                gcs_destination_output_uri_prefix=plan.outputs["output_prefix"],
                bigquery_destination_output_uri=plan.outputs["bigquery_destination_output_uri"],
                key_field=options.key_field,
                included_fields=plan.outputs["included_fields"],
                excluded_fields=plan.outputs["excluded_fields"],
                instance_type=plan.outputs["instance_type"],
                model_parameters=plan.outputs["model_parameters"],
                manual_batch_tuning_parameters_batch_size=inputs.batch_size,
                machine_type=p.batch_machine_type,
                **accelerators,
                starting_replica_count=p.batch_starting_replicas,
                max_replica_count=p.batch_max_replicas,
                service_account=p.service_account,
                encryption_spec_key_name=p.encryption_spec_key_name,
                labels=self.labels,
            )
        ).set_display_name("Vertex batch prediction job")
        check = component(check_batch_prediction_job.check_batch_prediction_job, self.image)(
            gcp_resources=job.outputs["gcp_resources"], max_error_fraction=inputs.max_error_fraction
        )
        uncached(check).set_display_name("Check the job's error budget")
        return job
