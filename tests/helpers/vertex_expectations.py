"""What this project sends to Vertex AI, field by field: one set of checks used by the GAPIC-boundary tests
(tests/contract/vertex/test_requests.py: GCPC launchers run on compiled tasks against stubs) and by the rehearsal tests
(tests/contract/vertex/test_rehearsal.py: the requests a rehearsal recorded). Each takes the request as a dict with proto field
names (enums by name) and the Platform the pipeline was compiled with."""

import re

from pipelines.config import Platform


def resource_labels(platform: Platform, pipeline: str = "tfpipe-training") -> dict:
    return {**platform.labels, **platform.model_labels, "pipeline": pipeline}


def _identity(spec: dict, platform: Platform, network: bool = True) -> None:
    assert spec.get("service_account", "") == platform.service_account
    if network:
        assert spec.get("network", "") == platform.network


def _cmek(resource: dict, platform: Platform) -> None:
    assert resource.get("encryption_spec", {}).get("kms_key_name", "") == platform.encryption_spec_key_name


def check_custom_job(request: dict, platform: Platform, workers: int) -> None:
    job = request["custom_job"]
    assert job["display_name"].endswith("-train")
    assert job.get("labels") == resource_labels(platform)
    _cmek(job, platform)
    spec = job["job_spec"]
    _identity(spec, platform)
    assert spec.get("tensorboard", "") == platform.tensorboard
    # a folder of its own under its plan's root, named after the run that claimed it
    *_, root, folder = spec["base_output_directory"]["output_uri_prefix"].rstrip("/").split("/")
    assert root == "job_dir" and re.fullmatch("[a-z0-9-]+", folder), folder
    assert spec["scheduling"]["restart_job_on_worker_restart"] is True
    _capacity(spec, platform)
    pools = spec["worker_pool_specs"]
    assert [int(p["replica_count"]) for p in pools] == ([1, workers - 1] if workers > 1 else [1])
    for pool in pools:
        assert pool["machine_spec"]["machine_type"] == platform.machine_type
        assert pool["container_spec"]["image_uri"] == platform.training_image()
        assert pool["container_spec"]["command"] == ["python", "-m", "trainer.task"]
        assert pool["container_spec"]["args"][0] == "--data-dir"


def _capacity(spec: dict, platform: Platform) -> None:
    """The custom job's capacity: the strategy, the wait only with FLEX_START (Vertex's 24 hours when unset), the
    persistent resource's ID, the PSC interface."""
    capacity = platform.training_capacity
    wait = {"max_wait_duration": capacity.max_wait_duration or "86400s"} if capacity.strategy == "FLEX_START" else {}
    assert {k: v for k, v in spec["scheduling"].items() if k in ("strategy", "max_wait_duration")} == {
        "strategy": capacity.strategy,
        **wait,
    }
    resource = platform.persistent_resource_id.rsplit("/", 1)[-1]
    assert spec.get("persistent_resource_id", "") == resource
    attachment = platform.psc_network_attachment
    assert spec.get("psc_interface_config", {}) == ({"network_attachment": attachment} if attachment else {})


def check_tuning_job(request: dict, platform: Platform, study) -> None:
    job = request["hyperparameter_tuning_job"]
    assert job["display_name"].endswith("-tune")
    _cmek(job, platform)
    _identity(job["trial_job_spec"], platform)
    assert (int(job["max_trial_count"]), int(job["parallel_trial_count"]), int(job["max_failed_trial_count"])) == (
        study.max_trial_count,
        study.parallel_trial_count,
        study.max_failed_trial_count,
    )
    assert [(m["metric_id"], m["goal"]) for m in job["study_spec"]["metrics"]] == [
        (study.metric_id, study.goal.upper())
    ]
    assert [p["parameter_id"] for p in job["study_spec"]["parameters"]] == [p.parameter_id for p in study.parameters]
    assert job["study_spec"]["measurement_selection_type"] == f"{study.measurement.upper()}_MEASUREMENT"
    [pool] = job["trial_job_spec"]["worker_pool_specs"]
    assert int(pool["replica_count"]) == 1 and pool["container_spec"]["image_uri"] == platform.training_image()
    _trial_capacity(job["trial_job_spec"], platform)


def _trial_capacity(spec: dict, platform: Platform) -> None:
    """The tuning job's trials: the training job's capacity, each part only when set (on-demand: no scheduling)."""
    capacity = platform.training_capacity
    wait = {"max_wait_duration": capacity.max_wait_duration} if capacity.max_wait_duration else {}
    standard = capacity.strategy == "STANDARD"
    assert spec.get("scheduling", {}) == ({} if standard else {"strategy": capacity.strategy, **wait})
    assert spec.get("persistent_resource_id", "") == platform.persistent_resource_id.rsplit("/", 1)[-1]
    attachment = platform.psc_network_attachment
    assert spec.get("psc_interface_config", {}) == ({"network_attachment": attachment} if attachment else {})


def check_batch_job(request: dict, platform: Platform) -> None:
    job = request["batch_prediction_job"]
    assert job["display_name"].endswith("-batch")
    assert "@" in job["model"]  # a pinned version, never "whatever is default now"
    assert job.get("service_account", "") == platform.service_account
    _cmek(job, platform)
    assert job.get("labels") == resource_labels(platform, "tfpipe-batch-prediction")
    resources = job["dedicated_resources"]
    assert resources["machine_spec"]["machine_type"] == platform.batch_machine_type
    accelerator = resources["machine_spec"].get("accelerator_type", "ACCELERATOR_TYPE_UNSPECIFIED")
    assert (accelerator, int(resources["machine_spec"].get("accelerator_count", 0))) == (
        platform.batch_accelerator_type or "ACCELERATOR_TYPE_UNSPECIFIED",
        platform.batch_accelerator_count,
    )
    assert (int(resources["starting_replica_count"]), int(resources["max_replica_count"])) == (
        platform.batch_starting_replicas,
        platform.batch_max_replicas,
    )


def check_upload(request: dict, platform: Platform, source_commit: str = "") -> None:
    """The upload of a model version by a run with `source_commit` (its label; an empty one is left out)."""
    model = request["model"]
    assert model["display_name"] == platform.model_display_name
    commit = {"source_commit": source_commit} if source_commit else {}
    assert model.get("labels") == {**resource_labels(platform), **commit}
    _cmek(model, platform)
    assert not model.get("version_aliases")  # the alias moves only once the version serves
    container = model["container_spec"]
    assert container["image_uri"] == platform.serving_container_spec()["imageUri"]  # the GPU image with accelerators
    expected_ports = platform.serving_container_spec().get("ports", [])
    assert [int(p["container_port"]) for p in container.get("ports", [])] == [
        p["containerPort"] for p in expected_ports
    ]


def check_endpoint_create(request: dict, platform: Platform) -> None:
    assert request["display_name"] == platform.endpoint_display_name
    assert request.get("labels") == resource_labels(platform)
    _cmek(request, platform)
    assert not request.get("network")  # a peered endpoint holds one model: no canary


def check_deploy(request: dict, platform: Platform) -> None:
    deployed = request["deployed_model"]
    assert "@" in deployed["model"]
    assert deployed["display_name"] == platform.model_display_name
    assert deployed.get("service_account", "") == platform.service_account
    resources = deployed["dedicated_resources"]
    assert resources["machine_spec"]["machine_type"] == platform.serving_machine_type
    assert (int(resources["min_replica_count"]), int(resources["max_replica_count"])) == (
        platform.serving_min_replicas,
        platform.serving_max_replicas,
    )
    assert sum(int(v) for v in request["traffic_split"].values()) == 100
