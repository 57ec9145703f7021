"""The Vertex AI hyperparameter tuning job: Google Cloud Pipeline Components' own tuning launcher, from GCPC's image
(CreateHyperparameterTuningJob, then the job polled to the end, `gcp_resources` written), with GCPC 2.22's
`HyperparameterTuningJobRunOp` payload plus where the trials run: `trial_job_spec.scheduling` (strategy, wait),
`trial_job_spec.persistent_resource_id` and `trial_job_spec.psc_interface_config`, inputs GCPC's op lacks. The
launcher drops empty fields from the request, so these inputs left at "" send what GCPC's op sends."""

from google_cloud_pipeline_components import _image, _placeholders
from kfp import dsl
from kfp.dsl import ConcatPlaceholder, OutputPath

LAUNCHER = "google_cloud_pipeline_components.container.v1.hyperparameter_tuning_job.launcher"


@dsl.container_component
def hyperparameter_tuning_job(
    display_name: str,
    base_output_directory: str,
    worker_pool_specs: list,
    study_spec_metrics: list,
    study_spec_parameters: list,
    max_trial_count: int,
    parallel_trial_count: int,
    gcp_resources: OutputPath(str),
    max_failed_trial_count: int = 0,
    location: str = "us-central1",
    study_spec_algorithm: str = "ALGORITHM_UNSPECIFIED",
    study_spec_measurement_selection_type: str = "BEST_MEASUREMENT",
    encryption_spec_key_name: str = "",
    service_account: str = "",
    network: str = "",
    strategy: str = "",
    max_wait_duration: str = "",
    persistent_resource_id: str = "",
    psc_network_attachment: str = "",
    project: str = _placeholders.PROJECT_ID_PLACEHOLDER,
):
    """KFP step (Vertex): create a hyperparameter tuning job and wait for it to end; its trials run as
    `service_account`, on `network` or through `psc_network_attachment`, with `strategy` or on a persistent resource
    (empty values are left out of the request, as GCPC leaves them).

    Args:
        display_name: The tuning job's display name.
        base_output_directory: Cloud Storage folder of the job; each trial writes under a subfolder named by its ID.
        worker_pool_specs: The trials' WorkerPoolSpecs (JSON of Vertex's message).
        study_spec_metrics: The study's StudySpec.MetricSpecs (JSON of Vertex's message).
        study_spec_parameters: The study's StudySpec.ParameterSpecs (JSON of Vertex's message).
        max_trial_count: Trials in all.
        parallel_trial_count: Trials at once.
        max_failed_trial_count: Failed trials that fail the job (0: Vertex decides).
        location: Region of the job.
        study_spec_algorithm: The study's search algorithm (StudySpec.Algorithm).
        study_spec_measurement_selection_type: Which measurement of a trial counts (BEST_MEASUREMENT or
            LAST_MEASUREMENT).
        encryption_spec_key_name: Cloud KMS key of the job and what it creates (empty: Google's).
        service_account: The service account the trials run as (empty: Vertex's default).
        network: VPC network the trials peer with, projects/PROJECT_NUMBER/global/networks/NAME (empty: none).
        strategy: The trials' Scheduling.Strategy: SPOT or FLEX_START (empty: on-demand machines).
        max_wait_duration: FLEX_START only: the longest a trial waits for its machines, like 1800s (empty: Vertex's
            default).
        persistent_resource_id: ID of the persistent resource the trials run on (empty: machines of their own).
        psc_network_attachment: Network attachment of the trials' Private Service Connect interface, instead of
            `network` (empty: none).
        project: Project of the job (default: the pipeline run's).

    Returns:
        gcp_resources: The job's resource name, as GCPC's GcpResources JSON.
    """
    return dsl.ContainerSpec(
        image=_image.GCPC_IMAGE_TAG,
        command=["python3", "-u", "-m", LAUNCHER],
        args=[
            "--type",
            "HyperparameterTuningJob",
            "--payload",
            ConcatPlaceholder(
                [
                    '{"display_name": "',
                    display_name,
                    '", "study_spec": {"metrics": ',
                    study_spec_metrics,
                    ', "parameters": ',
                    study_spec_parameters,
                    ', "algorithm": "',
                    study_spec_algorithm,
                    '", "measurement_selection_type": "',
                    study_spec_measurement_selection_type,
                    '"}, "max_trial_count": ',
                    max_trial_count,
                    ', "parallel_trial_count": ',
                    parallel_trial_count,
                    ', "max_failed_trial_count": ',
                    max_failed_trial_count,
                    ', "trial_job_spec": {"worker_pool_specs": ',
                    worker_pool_specs,
                    ', "service_account": "',
                    service_account,
                    '", "network": "',
                    network,
                    '", "base_output_directory": {"output_uri_prefix": "',
                    base_output_directory,
                    '"}, "scheduling": {"strategy": "',
                    strategy,
                    '", "max_wait_duration": "',
                    max_wait_duration,
                    '"}, "persistent_resource_id": "',
                    persistent_resource_id,
                    '", "psc_interface_config": {"network_attachment": "',
                    psc_network_attachment,
                    '"}}, "encryption_spec": {"kms_key_name": "',
                    encryption_spec_key_name,
                    '"}}',
                ]
            ),
            "--project",
            project,
            "--location",
            location,
            "--gcp_resources",
            gcp_resources,
        ],
    )
