"""The production-like Platform the compiled-pipeline tests compile for (tests/contract/vertex/): every field a
cloud run sends set, with its run identity and labels as the jobs carry them, and the Kubeflow target's in-pod
variant."""

from pipelines.config import Platform

PLATFORM = Platform(
    components_image="example.com/tfpipe/components:abc",
    trainer_image="example.com/tfpipe/trainer:abc",
    serving_image="example.com/serving:2",
    serving_gpu_image="example.com/serving-gpu:2",
    machine_type="n1-standard-8",
    location="europe-west4",
    model_display_name="digits",
    model_version_aliases=["champion", "blue"],
    model_labels={"team": "ml-platform"},
    endpoint_display_name="digits-endpoint",
    serving_machine_type="n1-highcpu-4",
    serving_min_replicas=2,
    serving_max_replicas=5,
    serving_accelerator_type="NVIDIA_TESLA_T4",
    serving_accelerator_count=1,
    batch_machine_type="n1-highmem-8",
    batch_starting_replicas=3,
    batch_max_replicas=7,
    service_account="runner@my-project.iam.gserviceaccount.com",
    network="projects/123456789/global/networks/vpc",
    encryption_spec_key_name="projects/my-project/locations/europe-west4/keyRings/ml/cryptoKeys/tfpipe",
    tensorboard="projects/my-project/locations/europe-west4/tensorboards/42",
    labels={"env": "prod"},
    keep_previous=1,
)
SA, NETWORK, KEY = PLATFORM.service_account, PLATFORM.network, PLATFORM.encryption_spec_key_name
IDENTITY = {"service_account": SA, "network": NETWORK, "encryption_spec_key_name": KEY}
LABELS = {"env": "prod", "team": "ml-platform", "pipeline": "tfpipe-training"}


# the kubeflow target with today's in-pod steps (a cluster with Kubeflow Pipelines only)
IN_POD = PLATFORM.model_copy(
    update={"kubeflow": PLATFORM.kubeflow.model_copy(update={"training": "pod", "tuning": "pod", "serving": "url"})}
)
