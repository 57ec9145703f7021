import json

import pytest
import yaml
from google.auth.credentials import AnonymousCredentials
from google_cloud_pipeline_components._image import GCPC_IMAGE_TAG

from components.lib.study.spec import DEFAULT_STUDY
from components.plan_vertex_training import worker_pool_specs
from pipelines.config import ConfigError, Platform, load_config
from pipelines.templates import TemplateError, parse_params
from pipelines.training import build_pipeline
from tests.helpers.compiled import compiled_docs, compiled_file, dag
from tests.helpers.gcpc import Launch
from tests.helpers.platforms import IDENTITY, IN_POD, KEY, LABELS, PLATFORM, SA

PROJECT = "{{$.pipeline_google_cloud_project_id}}"


def compile_spec(target, tmp_path, pipeline="training", platform=None):
    platform = platform or (IN_POD if target == "kubeflow" else PLATFORM)
    path = compiled_file(tmp_path, target, pipeline, platform)
    return path, compiled_docs(target, pipeline, platform)[0]  # the pipeline spec (then the platform spec)


def params(task):
    """A task's parameter inputs: constants as values, the rest as their reference."""
    return {
        k: v["runtimeValue"]["constant"] if "runtimeValue" in v else v
        for k, v in task["inputs"].get("parameters", {}).items()
    }


def deps(tasks, name):
    return sorted(tasks[name].get("dependentTasks", []))


def root_inputs(spec):
    """The pipeline's parameter inputs: type, default, optional (their descriptions: test_input_descriptions)."""
    return {
        name: {k: v for k, v in d.items() if k != "description"}
        for name, d in spec["root"]["inputDefinitions"]["parameters"].items()
    }


def images(spec):
    return {
        name: e["container"]["image"] for name, e in spec["deploymentSpec"]["executors"].items() if "container" in e
    }


def test_vertex_dag(tmp_path):
    _, spec = compile_spec("vertex", tmp_path)
    root = dag(spec)
    assert set(root) == {
        "fingerprint-data",
        "prepare-data",
        "check-champion",
        "condition-branches-1",
        "plan-vertex-training-2",
        "claim-output-directory-2",
        "custom-training-job",
        "import-trained-model",
        "find-registry-champion",
        "evaluate-model",
        "condition-4",
    }
    # fresh data, fresh run: prepare-data (cached) is keyed on the never-cached fingerprint of the source
    assert root["fingerprint-data"]["cachingOptions"] == {}
    assert params(root["fingerprint-data"]) == {"data_source": {"componentInputParameter": "data_source"}}
    assert params(root["prepare-data"])["data_fingerprint"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "fingerprint-data"}
    }
    assert root["prepare-data"]["cachingOptions"] == {"enableCache": True}
    # the champion check after data prep; the tuning (or fixed) branch waits for it
    assert deps(root, "check-champion") == ["find-registry-champion", "prepare-data"]
    assert deps(root, "condition-branches-1") == ["check-champion", "prepare-data"]
    assert deps(root, "plan-vertex-training-2") == ["condition-branches-1", "prepare-data"]
    assert deps(root, "claim-output-directory-2") == ["plan-vertex-training-2"]
    assert deps(root, "custom-training-job") == ["claim-output-directory-2", "plan-vertex-training-2"]
    assert deps(root, "import-trained-model") == [
        "claim-output-directory-2",
        "custom-training-job",
        "plan-vertex-training-2",
    ]
    # the job's folder under the plan's root: claimed on every run (a run beside another gets its own folder)
    claimed = {"taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "claim-output-directory-2"}}
    assert root["claim-output-directory-2"]["cachingOptions"] == {}
    assert params(root["claim-output-directory-2"]) == {
        "root": {
            "taskOutputParameter": {
                "outputParameterKey": "base_output_directory",
                "producerTask": "plan-vertex-training-2",
            }
        },
        "run_name": "{{$.pipeline_job_name}}",
    }
    assert params(root["import-trained-model"]) == {
        "directory": claimed,
        "gcp_resources": {
            "taskOutputParameter": {"outputParameterKey": "gcp_resources", "producerTask": "custom-training-job"}
        },
    }
    assert deps(root, "evaluate-model") == ["find-registry-champion", "import-trained-model", "prepare-data"]
    job = root["custom-training-job"]
    planned = {
        key: {"taskOutputParameter": {"outputParameterKey": key, "producerTask": "plan-vertex-training-2"}}
        for key in ("worker_pool_specs", "display_name")
    }
    # the run's identity, labels and TensorBoard on the custom job; its display name from the run's name
    settings = {
        "location": "europe-west4",
        "restart_job_on_worker_restart": True,
        "tensorboard": PLATFORM.tensorboard,
        "labels": LABELS,
        # on-demand machines of its own: GCPC leaves the wait out of the request unless the strategy is FLEX_START
        "strategy": "STANDARD",
        "max_wait_duration": "86400s",
        "persistent_resource_id": "",
        "psc_interface_config": {},
        **IDENTITY,
    }
    assert params(job) == {**planned, "base_output_directory": claimed, **settings}
    plan_inputs = params(root["plan-vertex-training-2"])
    # the job's settings key the plan's cache: other settings, another root (no job writes another's folder)
    assert plan_inputs["job_settings"] == settings
    assert plan_inputs["trainer_image"] == "example.com/tfpipe/trainer:abc"
    assert plan_inputs["machine_type"] == "n1-standard-8"
    assert plan_inputs["workers"] == {"componentInputParameter": "workers"}
    assert plan_inputs["batch_workers"] == 0  # its own
    # the pipeline's name, not the run's: the step and the jobs after it stay cacheable
    assert (plan_inputs["pipeline_name"], plan_inputs["purpose"]) == ("tfpipe-training", "train")
    # the final training takes the hyperparameters of whichever tuning branch ran (dsl.OneOf)
    assert plan_inputs["hyperparameters"]["taskOutputParameter"] == {
        "outputParameterKey": "pipelinechannel--condition-branches-1-oneof-1",
        "producerTask": "condition-branches-1",
    }
    # the gate compares with the registry's champion, looked up on every run
    champion = root["find-registry-champion"]
    assert champion["cachingOptions"] == {}
    assert params(champion) == {
        "display_name": "digits",
        "alias": "champion",
        "project": PROJECT,
        "location": "europe-west4",
    }
    assert params(root["evaluate-model"]) == {
        "accuracy_threshold": {"componentInputParameter": "accuracy_threshold"},
        "champion_tolerance": {"componentInputParameter": "champion_tolerance"},
        **{
            f"champion_{key}": {
                "taskOutputParameter": {"outputParameterKey": key, "producerTask": "find-registry-champion"}
            }
            for key in ("path", "name", "model_uri")
        },
    }
    assert root["evaluate-model"]["cachingOptions"] == {"enableCache": True}  # a pure function of its inputs
    # its outputs: the metrics, the verdict and the candidate's smoke checks (for the deploy's check)
    outputs = spec["components"]["comp-evaluate-model"]["outputDefinitions"]
    assert set(outputs["artifacts"]) == {"metrics", "classification_metrics", "evaluation", "smoke_checks"}
    assert outputs["artifacts"]["smoke_checks"]["artifactType"]["schemaTitle"] == "system.Artifact"
    # the gate: upload and quantization run only when evaluate-model's output is true
    condition = root["condition-4"]
    assert (
        condition["triggerPolicy"]["condition"]
        == "inputs.parameter_values['pipelinechannel--evaluate-model-Output'] == true"
    )
    inner = dag(spec, condition["componentRef"]["name"])
    assert set(inner) == {"importer", "find-model", "condition-branches-5", "condition-branches-9", "quantize-model"}
    assert deps(inner, "condition-branches-5") == ["find-model", "importer"]
    assert deps(inner, "condition-branches-9") == ["condition-branches-5"]
    quantize = inner["quantize-model"]["inputs"]
    assert quantize["artifacts"]["model"] == {"componentInputArtifact": "pipelinechannel--import-trained-model-model"}
    assert quantize["parameters"]["mode"]["componentInputParameter"] == "pipelinechannel--tflite_mode"
    imgs = images(spec)
    for name in (
        "exec-prepare-data",
        "exec-plan-vertex-training",
        "exec-import-trained-model",
        "exec-evaluate-model",
        "exec-quantize-model",
        "exec-read-best-trial",
        "exec-merge-hyperparameters",
        "exec-find-model",
        "exec-ensure-endpoint",
        "exec-create-model",
        "exec-plan-traffic-split",
        "exec-find-registry-champion",
        "exec-finish-vertex-rollout",
        "exec-crown-vertex-model",
        "exec-deploy-vertex-model",  # GCPC's deploy launcher, from the components image
    ):
        assert imgs[name] == "example.com/tfpipe/components:abc"
    for name in ("exec-custom-training-job", "exec-model-upload"):
        assert imgs[name].startswith("gcr.io/ml-pipeline/google-cloud-pipeline-components")
    importer = spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]
    assert importer["typeSchema"]["schemaTitle"] == "google.UnmanagedContainerModel"
    # this project's serving image, its GPU variant as the deployment gets a T4: Vertex's custom-container contract
    # on port 8080
    assert importer["metadata"] == {
        "containerSpec": {"imageUri": "example.com/serving-gpu:2", "ports": [{"containerPort": 8080}]}
    }
    cpu = PLATFORM.model_copy(update={"serving_accelerator_type": "", "serving_accelerator_count": 0})
    assert cpu.serving_container_spec()["imageUri"] == "example.com/serving:2"
    # lightweight steps must not pip-install kfp at runtime: the components image carries the compiler's kfp
    assert "pip install" not in " ".join(
        spec["deploymentSpec"]["executors"]["exec-evaluate-model"]["container"]["command"]
    )


def test_vertex_gpu_training_uses_the_gpu_trainer_image_and_prebuilt_serving_images_need_only_their_uri(tmp_path):

    platform = PLATFORM.model_copy(
        update={
            "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 1,
            "trainer_gpu_image": "example.com/tfpipe/trainer-gpu:abc",
            "serving_image": "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15",
        }
    )
    spec = compiled_docs("vertex", "training", platform)[0]
    for plan in (dag(spec)["plan-vertex-training-2"], dag(spec, "comp-condition-2")["plan-vertex-training"]):
        assert params(plan)["trainer_image"] == "example.com/tfpipe/trainer-gpu:abc"
        assert (params(plan)["accelerator_type"], params(plan)["accelerator_count"]) == ("NVIDIA_TESLA_T4", 1)
    assert spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]["metadata"] == {
        "containerSpec": {"imageUri": "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15"}
    }


@pytest.mark.parametrize(
    "update, settings",
    [
        (
            {
                "training_capacity": {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
                "network": "",
                "psc_network_attachment": "projects/my-project/regions/europe-west4/networkAttachments/tfpipe",
            },
            {
                "strategy": "FLEX_START",
                "max_wait_duration": "1800s",
                "persistent_resource_id": "",
                "psc_interface_config": {
                    "network_attachment": "projects/my-project/regions/europe-west4/networkAttachments/tfpipe"
                },
                "network": "",
            },
        ),
        (
            {"persistent_resource_id": "projects/my-project/locations/europe-west4/persistentResources/gpu-pool"},
            {
                "strategy": "STANDARD",
                "max_wait_duration": "86400s",
                "persistent_resource_id": "gpu-pool",
                "psc_interface_config": {},
                "network": PLATFORM.network,
            },
        ),
        (
            {"training_capacity": {"strategy": "SPOT"}},
            {
                "strategy": "SPOT",
                "max_wait_duration": "86400s",
                "persistent_resource_id": "",
                "psc_interface_config": {},
                "network": PLATFORM.network,
            },
        ),
    ],
)
def test_vertex_training_job_gets_its_capacity_persistent_resource_and_psc_interface(update, settings):
    """The custom job takes them, and they key the plan's cache (another capacity: another output root)."""
    platform = Platform.model_validate({**PLATFORM.model_dump(), **update})
    spec = compiled_docs("vertex", "training", platform)[0]
    job = params(dag(spec)["custom-training-job"])
    assert {k: job[k] for k in settings} == settings
    job_settings = params(dag(spec)["plan-vertex-training-2"])["job_settings"]
    assert {k: job_settings[k] for k in settings} == settings


def tuning_payload(spec: dict, tmp_path) -> dict:
    """The request body the compiled tuning task hands GCPC's launcher (`--payload`, its placeholders resolved)."""
    launch = Launch(spec, dag(spec, "comp-condition-2")["hyperparameter-tuning-job"], TUNING_OUTPUTS, {}, tmp_path)
    return json.loads(launch.args[launch.args.index("--payload") + 1])


def gcpc_tuning_payload(values: dict, tmp_path) -> dict:
    """The payload GCPC 2.22's own HyperparameterTuningJobRunOp builds from the same inputs."""
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import HyperparameterTuningJobRunOp
    from kfp import compiler, dsl

    @dsl.pipeline(name="gcpc-tuning")
    def pipeline():
        HyperparameterTuningJobRunOp(**values)

    path = tmp_path / "gcpc.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    spec = yaml.safe_load(path.read_text())
    launch = Launch(spec, dag(spec)["hyperparameter-tuning-job"], {}, {}, tmp_path / "gcpc")
    return json.loads(launch.args[launch.args.index("--payload") + 1])


# the plan's and the claim's outputs the tuning task takes, and the run's project
TUNING_OUTPUTS = {
    "worker_pool_specs": [{"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 1}],
    "base_output_directory": "gs://b/root/plan/job_dir/tfpipe-training-20261123",
    "display_name": "tfpipe-training-20261123-tune",
    "project": "my-project",
}
NO_PLACEMENT = {
    "scheduling": {"strategy": "", "max_wait_duration": ""},
    "persistent_resource_id": "",
    "psc_interface_config": {"network_attachment": ""},
}


@pytest.mark.parametrize(
    "update, trials",
    [
        ({}, {}),
        ({"training_capacity": {"strategy": "SPOT"}}, {"scheduling": {"strategy": "SPOT", "max_wait_duration": ""}}),
        (
            {
                "training_capacity": {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
                "network": "",
                "psc_network_attachment": "tfpipe",
            },
            {
                "scheduling": {"strategy": "FLEX_START", "max_wait_duration": "1800s"},
                "network": "",
                "psc_interface_config": {"network_attachment": "tfpipe"},
            },
        ),
        (
            {"persistent_resource_id": "projects/my-project/locations/europe-west4/persistentResources/gpu-pool"},
            {"persistent_resource_id": "gpu-pool"},
        ),
    ],
    ids=["on-demand", "spot", "flex-start-psc", "persistent-resource"],
)
def test_the_tuning_job_is_gcpcs_request_with_the_trials_capacity_persistent_resource_and_psc(tmp_path, update, trials):
    """The tuning task runs GCPC's launcher on GCPC's payload plus the trials' placement, the training job's settings
    (each empty when unset: the launcher drops empty fields, so a default config sends what GCPC's op sends); the
    settings that are set key the plan's cache."""
    from google_cloud_pipeline_components.container.v1.gcp_launcher.utils.json_util import recursive_remove_empty

    platform = Platform.model_validate({**PLATFORM.model_dump(), **update})
    spec = compiled_docs("vertex", "training", platform)[0]
    tuning = dag(spec, "comp-condition-2")
    executor = spec["deploymentSpec"]["executors"]["exec-hyperparameter-tuning-job"]["container"]
    assert executor["image"] == GCPC_IMAGE_TAG
    assert executor["command"] == [
        "python3",
        "-u",
        "-m",
        "google_cloud_pipeline_components.container.v1.hyperparameter_tuning_job.launcher",
    ]
    payload = tuning_payload(spec, tmp_path)
    assert payload == {
        "display_name": "tfpipe-training-20261123-tune",
        "study_spec": {
            "metrics": [{"metric_id": "val_accuracy", "goal": "MAXIMIZE"}],
            "parameters": DEFAULT_STUDY.study_spec_parameters(),
            "algorithm": "ALGORITHM_UNSPECIFIED",
            "measurement_selection_type": "LAST_MEASUREMENT",
        },
        "max_trial_count": 4,
        "parallel_trial_count": 2,
        "max_failed_trial_count": 1,
        "trial_job_spec": {
            "worker_pool_specs": TUNING_OUTPUTS["worker_pool_specs"],
            "service_account": SA,
            "network": platform.network,
            "base_output_directory": {"output_uri_prefix": TUNING_OUTPUTS["base_output_directory"]},
            **NO_PLACEMENT,
            **trials,
        },
        "encryption_spec": {"kms_key_name": KEY},
    }
    job = params(tuning["hyperparameter-tuning-job"])
    names = ("strategy", "max_wait_duration", "persistent_resource_id", "psc_network_attachment")
    placement = {k: job.pop(k) for k in names if k in job}
    assert placement == platform.trial_placement()
    job_settings = params(tuning["plan-vertex-training"])["job_settings"]
    assert {k: job_settings[k] for k in placement} == placement
    if not update:  # GCPC's op on the same inputs: the same request once the launcher drops the empty fields
        constants = {k: v for k, v in job.items() if not (isinstance(v, dict) and "taskOutputParameter" in v)}
        counts = {k: int(constants[k]) for k in ("max_trial_count", "parallel_trial_count", "max_failed_trial_count")}
        values = {**constants, **counts, **TUNING_OUTPUTS}
        assert recursive_remove_empty(payload) == recursive_remove_empty(gcpc_tuning_payload(values, tmp_path))


def test_vertex_tuning_branch(tmp_path):
    _, spec = compile_spec("vertex", tmp_path)
    branches = dag(spec, "comp-condition-branches-1")
    assert (
        branches["condition-2"]["triggerPolicy"]["condition"]
        == "inputs.parameter_values['pipelinechannel--tune'] == true"
    )
    assert (
        branches["condition-3"]["triggerPolicy"]["condition"]
        == "!(inputs.parameter_values['pipelinechannel--tune'] == true)"
    )
    assert set(dag(spec, "comp-condition-3")) == {"default-hyperparameters-2"}
    tuning = dag(spec, "comp-condition-2")
    assert set(tuning) == {
        "default-hyperparameters",
        "plan-vertex-training",
        "claim-output-directory",
        "hyperparameter-tuning-job",
        "read-best-trial",
        "merge-hyperparameters",
    }
    plan = params(tuning["plan-vertex-training"])
    # one worker a trial, at the global batch of the final training's workers (its learning rate is for that batch)
    assert (plan["workers"], plan["batch_workers"]) == (1, {"componentInputParameter": "pipelinechannel--workers"})
    assert plan["epochs"] == {"componentInputParameter": "pipelinechannel--tuning_trial_epochs"}
    assert plan["tuned_parameters"] == ["learning_rate", "hidden_units", "dropout"]
    assert plan["trainer_image"] == "example.com/tfpipe/trainer:abc"
    assert (plan["pipeline_name"], plan["purpose"]) == ("tfpipe-training", "tune")
    job = params(tuning["hyperparameter-tuning-job"])
    for key in ("worker_pool_specs", "display_name"):
        assert job[key] == {"taskOutputParameter": {"outputParameterKey": key, "producerTask": "plan-vertex-training"}}
    claimed = {"taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "claim-output-directory"}}
    assert job["base_output_directory"] == claimed
    assert tuning["claim-output-directory"]["cachingOptions"] == {}
    # every setting of the job keys the plan's cache (a changed study gets a root of its own)
    from_plan = ("display_name", "worker_pool_specs", "base_output_directory")
    assert plan["job_settings"] == {k: v for k, v in job.items() if k not in from_plan}
    assert len(plan["job_settings"]) == 11  # the study, its limits, its algorithm, the location, the identity
    assert {k: job[k] for k in IDENTITY} == IDENTITY  # the tuning job runs as the run's identity, on its network
    assert job["max_trial_count"] == 4
    assert job["parallel_trial_count"] == 2
    assert job["max_failed_trial_count"] == 1
    assert job["study_spec_algorithm"] == "ALGORITHM_UNSPECIFIED"
    assert job["study_spec_measurement_selection_type"] == "LAST_MEASUREMENT"
    # enums by name, as the proto's JSON mapping writes them (KFP would turn enum numbers into floats); the
    # compiled constants are the study's lists unchanged (tests/unit/components/test_study.py checks the lists themselves)
    assert job["study_spec_metrics"] == [{"metric_id": "val_accuracy", "goal": "MAXIMIZE"}]
    assert job["study_spec_parameters"] == DEFAULT_STUDY.study_spec_parameters()
    best = params(tuning["read-best-trial"])
    assert best["gcp_resources"] == {
        "taskOutputParameter": {"outputParameterKey": "gcp_resources", "producerTask": "hyperparameter-tuning-job"}
    }
    assert best["goal"] == "maximize"
    # once it read the job, it records the job's folder as completed under the plan's root
    assert (best["root"], best["directory"]) == (
        {
            "taskOutputParameter": {
                "outputParameterKey": "base_output_directory",
                "producerTask": "plan-vertex-training",
            }
        },
        claimed,
    )
    merge = params(tuning["merge-hyperparameters"])
    assert merge["best"] == {
        "taskOutputParameter": {"outputParameterKey": "best_parameters", "producerTask": "read-best-trial"}
    }
    # study.warm_start (off by default): the best trial's checkpoint folder, "" unless asked for, goes on with them
    assert best["warm_start"] is False
    assert merge["warm_start_from"] == {
        "taskOutputParameter": {"outputParameterKey": "warm_start_from", "producerTask": "read-best-trial"}
    }


def test_a_warm_started_vertex_study_asks_the_best_trial_step_for_its_checkpoint(tmp_path):
    from kfp import compiler

    study = DEFAULT_STUDY.model_copy(update={"warm_start": True})
    path = tmp_path / "warm.yaml"
    compiler.Compiler().compile(build_pipeline("vertex", PLATFORM, study=study), str(path))
    spec = next(yaml.safe_load_all(path.read_text()))
    assert params(dag(spec, "comp-condition-2")["read-best-trial"])["warm_start"] is True


def test_vertex_lightweight_steps_get_their_cpu_and_memory_limits(tmp_path):
    """platform.step_limits: Vertex picks each listed step's machine by its limits (data prep decodes images on every
    CPU it gets); the other steps keep Vertex's default machine."""
    config = load_config(
        None,
        sets=[
            "platform.step_limits={prepare-data: {cpu_limit: '8', memory_limit: 32G}, "
            "evaluate-model: {memory_limit: 16Gi}}"
        ],
    )
    _, spec = compile_spec("vertex", tmp_path, platform=config.platform)
    resources = {
        name: {k: v for k, v in e["container"].get("resources", {}).items() if k.startswith("resource")}
        for name, e in spec["deploymentSpec"]["executors"].items()
        if "container" in e
    }
    assert resources["exec-prepare-data"] == {"resourceCpuLimit": "8", "resourceMemoryLimit": "32G"}
    assert resources["exec-evaluate-model"] == {"resourceMemoryLimit": "16Gi"}
    assert {name for name, r in resources.items() if r} == {"exec-prepare-data", "exec-evaluate-model"}


def test_worker_pools_one_chief_and_n_minus_one_workers():
    specs = worker_pool_specs("img:1", "gs://b/data", 3, "n1-standard-4", {"epochs": 5}, "NVIDIA_TESLA_T4", 1)
    assert [s["replica_count"] for s in specs] == [1, 2]
    container = specs[0]["container_spec"]
    assert container["image_uri"] == "img:1" and container["command"] == ["python", "-m", "trainer.task"]
    assert container["args"] == ["--data-dir", "gs://b/data", "--epochs", "5"]
    assert specs[1]["machine_spec"] == {
        "machine_type": "n1-standard-4",
        "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1,
    }
    assert [s["replica_count"] for s in worker_pool_specs("i", "d", 1, "m", {})] == [1]
    with pytest.raises(ValueError, match="workers must be >= 1"):
        worker_pool_specs("i", "d", 0, "m", {})


def test_kubeflow_dag(tmp_path):
    _, spec = compile_spec("kubeflow", tmp_path)
    root = dag(spec)
    assert set(root) == {
        "fingerprint-data",
        "prepare-data",
        "check-champion",
        "tune-hyperparameters",
        "train-model",
        "find-repository-champion",
        "evaluate-model",
        "condition-1",
    }
    assert deps(root, "prepare-data") == ["fingerprint-data"] and root["fingerprint-data"]["cachingOptions"] == {}
    assert deps(root, "check-champion") == ["find-repository-champion", "prepare-data"]
    assert deps(root, "tune-hyperparameters") == ["check-champion", "prepare-data"]
    assert deps(root, "train-model") == ["prepare-data", "tune-hyperparameters"]
    assert root["train-model"]["inputs"]["parameters"]["hyperparameters"]["taskOutputParameter"] == {
        "outputParameterKey": "Output",
        "producerTask": "tune-hyperparameters",
    }
    tune = root["tune-hyperparameters"]["inputs"]["parameters"]
    assert tune["enabled"]["componentInputParameter"] == "tune"
    study = tune["study_spec"]["runtimeValue"]["constant"]
    assert study["metric_id"] == "val_accuracy" and study["max_trial_count"] == 4 and study["parallel_trial_count"] == 2
    assert [p["parameter_id"] for p in study["parameters"]] == ["learning_rate", "hidden_units", "dropout"]
    # the champion: the repository's newest version, looked up on every run
    assert root["find-repository-champion"]["cachingOptions"] == {}
    assert params(root["find-repository-champion"]) == {
        "model_repository": {"componentInputParameter": "model_repository"},
        "model_name": {"componentInputParameter": "model_name"},
    }
    assert deps(root, "evaluate-model") == ["find-repository-champion", "prepare-data", "train-model"]
    assert params(root["evaluate-model"])["champion_path"] == {
        "taskOutputParameter": {"outputParameterKey": "path", "producerTask": "find-repository-champion"}
    }
    assert root["condition-1"]["triggerPolicy"]["condition"].startswith(
        "inputs.parameter_values['pipelinechannel--evaluate-model-Output']"
    )
    inner = dag(spec, root["condition-1"]["componentRef"]["name"])
    assert set(inner) == {"publish-model", "quantize-model", "condition-2"}
    assert inner["quantize-model"]["inputs"]["artifacts"]["model"] == {
        "componentInputArtifact": "pipelinechannel--train-model-model"
    }
    # deploy (when the `deploy` input is true) serves the version publish-model wrote
    assert (
        inner["condition-2"]["triggerPolicy"]["condition"]
        == "inputs.parameter_values['pipelinechannel--deploy'] == true"
    )
    assert deps(inner, "condition-2") == ["publish-model"]
    assert inner["condition-2"]["inputs"]["artifacts"]["pipelinechannel--publish-model-published"] == {
        "taskOutputArtifact": {"outputArtifactKey": "published", "producerTask": "publish-model"}
    }
    deploy = dag(spec, "comp-condition-2")
    assert set(deploy) == {"deploy-model-at-url"}  # serving: url (a pod starts no server of its own)
    # publishing and serving change state outside the run: never served from the cache
    assert inner["publish-model"]["cachingOptions"] == {} and deploy["deploy-model-at-url"]["cachingOptions"] == {}
    assert deploy["deploy-model-at-url"]["inputs"]["artifacts"] == {
        "published": {"componentInputArtifact": "pipelinechannel--publish-model-published"},
        "dataset": {"componentInputArtifact": "pipelinechannel--prepare-data-dataset"},
    }
    assert params(deploy["deploy-model-at-url"]) == {
        name: {"componentInputParameter": f"pipelinechannel--{name}"}
        for name in ("model_repository", "model_name", "serving_url")
    }
    assert set(images(spec).values()) == {"example.com/tfpipe/components:abc"}
    inputs = root_inputs(spec)
    assert inputs["workers"] == {"defaultValue": 2, "isOptional": True, "parameterType": "NUMBER_INTEGER"}
    assert inputs["accuracy_threshold"]["parameterType"] == "NUMBER_DOUBLE"
    assert inputs["tflite_mode"] == {"defaultValue": "dynamic", "isOptional": True, "parameterType": "STRING"}
    assert inputs["deploy"] == {"defaultValue": True, "isOptional": True, "parameterType": "BOOLEAN"}
    assert inputs["traffic_percentage"] == {"defaultValue": 100, "isOptional": True, "parameterType": "NUMBER_INTEGER"}
    assert inputs["serving_url"] == {"defaultValue": "", "isOptional": True, "parameterType": "STRING"}
    assert inputs["rest_port"]["defaultValue"] == 8501 and inputs["grpc_port"]["defaultValue"] == 8500


@pytest.mark.parametrize(
    "pipeline, values, name",
    [
        (
            "training",
            {"workers": 3, "epochs": 5, "data_source": "gs://bucket/flowers", "traffic_percentage": 10},
            "tfpipe-training",
        ),
        (
            "batch_prediction",
            {"instances": "gs://bucket/in/*.jsonl", "model": "3", "batch_size": 16},
            "tfpipe-batch-prediction",
        ),
    ],
)
def test_vertex_yaml_loads_in_pipeline_job_offline(tmp_path, pipeline, values, name):
    from google.cloud import aiplatform

    path, _ = compile_spec("vertex", tmp_path, pipeline)
    job = aiplatform.PipelineJob(
        display_name="tfpipe-offline-check",
        template_path=str(path),
        pipeline_root="gs://bucket/root",
        project="my-project",
        location="us-central1",
        credentials=AnonymousCredentials(),
        parameter_values=values,
        enable_caching=False,
    )
    resource = job._gca_resource
    assert resource.display_name == "tfpipe-offline-check"
    assert resource.runtime_config.gcs_output_directory == "gs://bucket/root"
    assert dict(resource.runtime_config.parameter_values) == values
    assert resource.pipeline_spec["pipelineInfo"]["name"] == name


def test_vertex_upload_new_version_of_the_registry_model_or_a_new_model(tmp_path):
    _, spec = compile_spec("vertex", tmp_path)
    blessed = dag(spec, "comp-condition-4")
    find = blessed["find-model"]
    assert params(find) == {
        "display_name": "digits",
        "artifact_uri": {"componentInputParameter": "pipelinechannel--import-trained-model-model_uri"},
        "project": PROJECT,
        "location": "europe-west4",
        "labels": LABELS,  # the run's labels, and the pipeline input source_commit: the new version's labels
        "source_commit": {"componentInputParameter": "pipelinechannel--source_commit"},
    }
    assert params(dag(spec)["condition-4"])["pipelinechannel--source_commit"] == {
        "componentInputParameter": "source_commit"
    }
    assert spec["components"]["comp-find-model"]["outputDefinitions"]["parameters"]["labels"] == {
        "parameterType": "STRUCT"
    }
    assert find["cachingOptions"] == {}  # a look-up must not be served from the cache
    # so a run's source_commit is a label value, or no run is created
    with pytest.raises(TemplateError, match="^--param source_commit: 'ABC' is not a Google Cloud label value"):
        parse_params(["source_commit=ABC"], spec)
    branches = dag(spec, "comp-condition-branches-5")
    registered = "inputs.parameter_values['pipelinechannel--find-model-version_name'] != ''"
    exists = "inputs.parameter_values['pipelinechannel--find-model-resource_name'] != ''"
    assert branches["condition-6"]["triggerPolicy"]["condition"] == registered
    assert branches["condition-7"]["triggerPolicy"]["condition"] == f"!({registered}) && {exists}"
    assert branches["condition-8"]["triggerPolicy"]["condition"] == f"!({registered}) && !({exists})"
    # the trained model's artifacts are a registry version already (a cached training): that version, no upload
    assert set(dag(spec, "comp-condition-6")) == {"importer-2"}
    assert params(dag(spec, "comp-condition-6")["importer-2"]) == {
        "uri": {"componentInputParameter": "pipelinechannel--find-model-version_uri"},
        "metadata": {"componentInputParameter": "pipelinechannel--find-model-version_name"},
    }
    # no version_aliases: the alias moves only once the version serves (or, without a deploy, after the upload); the
    # version's labels: find-model's output (a task output, handed down the conditions as a whole input)
    upload = {
        "display_name": "digits",
        "location": "europe-west4",
        "labels": {"componentInputParameter": "pipelinechannel--find-model-labels"},
        "encryption_spec_key_name": KEY,
    }
    assert params(blessed["condition-branches-5"])["pipelinechannel--find-model-labels"] == {
        "taskOutputParameter": {"outputParameterKey": "labels", "producerTask": "find-model"}
    }
    for condition in ("comp-condition-7", "comp-condition-8"):
        assert params(branches[f"condition-{condition[-1]}"])["pipelinechannel--find-model-labels"] == {
            "componentInputParameter": "pipelinechannel--find-model-labels"
        }
        assert spec["components"][condition]["inputDefinitions"]["parameters"][
            "pipelinechannel--find-model-labels"
        ] == {"parameterType": "STRUCT"}
    # the model exists: import it as a VertexModel (GCPC reads metadata.resourceName) and upload a version of it
    existing = dag(spec, "comp-condition-7")
    assert set(existing) == {"importer-3", "model-upload"}
    assert existing["model-upload"]["cachingOptions"] == {}
    assert params(existing["importer-3"]) == {
        "uri": {"componentInputParameter": "pipelinechannel--find-model-resource_uri"},
        "metadata": {"componentInputParameter": "pipelinechannel--find-model-resource_name"},
    }
    executors = spec["deploymentSpec"]["executors"]
    for importer in ("exec-importer-2", "exec-importer-3"):
        assert executors[importer]["importer"] == {
            "artifactUri": {"runtimeParameter": "uri"},
            "metadata": {"resourceName": "{{$.inputs.parameters['metadata']}}"},
            "typeSchema": {"schemaTitle": "google.VertexModel", "schemaVersion": "0.0.1"},
        }
    assert params(existing["model-upload"]) == upload
    assert existing["model-upload"]["inputs"]["artifacts"] == {
        "parent_model": {"taskOutputArtifact": {"outputArtifactKey": "artifact", "producerTask": "importer-3"}},
        "unmanaged_container_model": {"componentInputArtifact": "pipelinechannel--importer-artifact"},
    }
    # GCPC passes the parent model's metadata.resourceName (what the importer sets) as --parent_model_name
    assert yaml.safe_load(executors["exec-model-upload"]["container"]["args"][-1]) == {
        "IfPresent": {
            "InputName": "parent_model",
            "Then": ["--parent_model_name", "{{$.inputs.artifacts['parent_model'].metadata['resourceName']}}"],
        }
    }
    # no such model: created with an ID of its own (two runs at once make one model), then imported
    missing = dag(spec, "comp-condition-8")
    assert set(missing) == {"create-model", "importer-4"}
    assert missing["create-model"]["cachingOptions"] == {}
    assert params(missing["create-model"]) == {
        "display_name": "digits",
        "artifact_uri": {"componentInputParameter": "pipelinechannel--import-trained-model-model_uri"},
        "container_spec": {"imageUri": "example.com/serving-gpu:2", "ports": [{"containerPort": 8080}]},
        "project": PROJECT,
        "location": "europe-west4",
        "labels": {"componentInputParameter": "pipelinechannel--find-model-labels"},  # with source_commit
        "encryption_key": KEY,
        "pipeline_job_id": "{{$.pipeline_job_uuid}}",
    }
    assert params(missing["importer-4"]) == {
        "uri": {"taskOutputParameter": {"outputParameterKey": "resource_uri", "producerTask": "create-model"}},
        "metadata": {"taskOutputParameter": {"outputParameterKey": "resource_name", "producerTask": "create-model"}},
    }
    # whichever ran hands its VertexModel on (dsl.OneOf)
    assert spec["components"]["comp-condition-branches-5"]["dag"]["outputs"]["artifacts"] == {
        "pipelinechannel--condition-branches-5-oneof-1": {
            "artifactSelectors": [
                {"outputArtifactKey": "pipelinechannel--importer-2-artifact", "producerSubtask": "condition-6"},
                {"outputArtifactKey": "pipelinechannel--model-upload-model", "producerSubtask": "condition-7"},
                {"outputArtifactKey": "pipelinechannel--importer-4-artifact", "producerSubtask": "condition-8"},
            ]
        }
    }


def test_vertex_deploy_reuses_or_creates_the_endpoint_with_a_traffic_split(tmp_path):
    _, spec = compile_spec("vertex", tmp_path)
    branches = dag(spec, "comp-condition-branches-9")
    assert (
        branches["condition-13"]["triggerPolicy"]["condition"]
        == "inputs.parameter_values['pipelinechannel--deploy'] == true"
    )
    assert (
        branches["condition-14"]["triggerPolicy"]["condition"]
        == "!(inputs.parameter_values['pipelinechannel--deploy'] == true)"
    )
    deploy = dag(spec, "comp-condition-13")
    assert set(deploy) == {"ensure-endpoint", "importer-5", "plan-traffic-split", "condition-branches-10"}
    # found by its display name, or created with an ID of its own (CMEK and labels; no network: a peered endpoint
    # holds one model, so no canary and no hot swap)
    assert params(deploy["ensure-endpoint"]) == {
        "display_name": "digits-endpoint",
        "project": PROJECT,
        "location": "europe-west4",
        "labels": LABELS,
        "encryption_key": KEY,
    }
    assert params(deploy["importer-5"]) == {
        "uri": {"taskOutputParameter": {"outputParameterKey": "resource_uri", "producerTask": "ensure-endpoint"}},
        "metadata": {"taskOutputParameter": {"outputParameterKey": "resource_name", "producerTask": "ensure-endpoint"}},
    }
    assert spec["deploymentSpec"]["executors"]["exec-importer-5"]["importer"] == {
        "artifactUri": {"runtimeParameter": "uri"},
        "metadata": {"resourceName": "{{$.inputs.parameters['metadata']}}"},
        "typeSchema": {"schemaTitle": "google.VertexEndpoint", "schemaVersion": "0.0.1"},
    }
    uploaded = {
        "componentInputArtifact": "pipelinechannel--condition-branches-5-pipelinechannel--condition-branches-5-oneof-1"
    }
    assert deploy["plan-traffic-split"]["inputs"]["artifacts"] == {"model": uploaded}
    assert params(deploy["plan-traffic-split"]) == {
        "endpoint_name": {
            "taskOutputParameter": {"outputParameterKey": "resource_name", "producerTask": "ensure-endpoint"}
        },
        "traffic_percentage": {"componentInputParameter": "pipelinechannel--traffic_percentage"},
        "alias": "champion",
    }
    endpoint = {"componentInputArtifact": "pipelinechannel--importer-5-artifact"}
    # the version is not deployed yet: deploy it, then finish the rollout; else only finish it (set its traffic)
    planned = dag(spec, "comp-condition-branches-10")
    not_deployed = "inputs.parameter_values['pipelinechannel--plan-traffic-split-deployed_model_id'] == ''"
    assert planned["condition-11"]["triggerPolicy"]["condition"] == not_deployed
    assert planned["condition-12"]["triggerPolicy"]["condition"] == f"!({not_deployed})"
    new, again = dag(spec, "comp-condition-11"), dag(spec, "comp-condition-12")
    assert set(new) == {"deploy-vertex-model", "verify-vertex-deploy", "finish-vertex-rollout"}
    assert set(again) == {"finish-vertex-rollout-2"}
    task = new["deploy-vertex-model"]
    assert task["inputs"]["artifacts"] == {"endpoint": endpoint, "model": uploaded}
    assert params(task) == {
        "deployed_model_display_name": "digits",
        "traffic_split": {"componentInputParameter": "pipelinechannel--plan-traffic-split-traffic_split"},
        "machine_type": "n1-highcpu-4",
        "min_replica_count": 2,
        "max_replica_count": 5,
        "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1,
        "service_account": SA,  # the deployed container runs as the run's service account
    }
    # only after the deploy succeeded: undeploy the replaced canary and the previous models, move the aliases
    finish = {
        "traffic_percentage": {"componentInputParameter": "pipelinechannel--traffic_percentage"},
        "keep_previous": 1,
        "aliases": ["champion", "blue"],
    }
    # the new deployed model answers the test split's examples through the endpoint before the rollout finishes
    # (a failure undeploys it and restores the split from before the deploy), as the evaluation gate saw the
    # candidate answer them: the gate's smoke checks, not the dataset and the SavedModel
    assert deps(new, "verify-vertex-deploy") == ["deploy-vertex-model"]
    assert new["verify-vertex-deploy"]["inputs"]["artifacts"] == {
        "endpoint": endpoint,
        "model": uploaded,
        "smoke_checks": {"componentInputArtifact": "pipelinechannel--evaluate-model-smoke_checks"},
    }
    assert params(new["verify-vertex-deploy"]) == {
        "previous_split": {"componentInputParameter": "pipelinechannel--plan-traffic-split-previous_split"},
        "default_signature_only": False,  # this project's serving image takes the signature's name
    }
    assert deps(new, "finish-vertex-rollout") == ["verify-vertex-deploy"]
    assert new["finish-vertex-rollout"]["inputs"]["artifacts"] == {"endpoint": endpoint, "model": uploaded}
    assert params(new["finish-vertex-rollout"]) == {**finish, "traffic_split": {}}
    assert again["finish-vertex-rollout-2"]["inputs"]["artifacts"] == {"endpoint": endpoint, "model": uploaded}
    assert params(again["finish-vertex-rollout-2"]) == {
        **finish,
        "traffic_split": {"componentInputParameter": "pipelinechannel--plan-traffic-split-traffic_split"},
    }
    # every step that reads or changes the endpoint runs each time (a deleted endpoint is never served from cache)
    for tasks, name in (
        (deploy, "ensure-endpoint"),
        (deploy, "plan-traffic-split"),
        (new, "deploy-vertex-model"),
        (new, "verify-vertex-deploy"),
        (new, "finish-vertex-rollout"),
        (again, "finish-vertex-rollout-2"),
    ):
        assert tasks[name]["cachingOptions"] == {}, name
    # deploy disabled: the uploaded version becomes the champion right away
    crown = dag(spec, "comp-condition-14")
    assert set(crown) == {"crown-vertex-model"} and crown["crown-vertex-model"]["cachingOptions"] == {}
    assert crown["crown-vertex-model"]["inputs"]["artifacts"] == {"model": uploaded}
    assert params(crown["crown-vertex-model"]) == {"aliases": ["champion", "blue"]}
    outputs = spec["components"]["comp-plan-traffic-split"]["outputDefinitions"]["parameters"]
    assert outputs == {
        "traffic_split": {"parameterType": "STRUCT"},
        "deployed_model_id": {"parameterType": "STRING"},
        "previous_split": {"parameterType": "STRUCT"},
    }
    inputs = root_inputs(spec)
    assert inputs["traffic_percentage"] == {"defaultValue": 100, "isOptional": True, "parameterType": "NUMBER_INTEGER"}
    assert inputs["deploy"] == {"defaultValue": True, "isOptional": True, "parameterType": "BOOLEAN"}


def test_vertex_batch_prediction(tmp_path):
    _, spec = compile_spec("vertex", tmp_path, "batch_prediction")
    assert spec["pipelineInfo"]["name"] == "tfpipe-batch-prediction"
    root = dag(spec)
    assert set(root) == {"plan-batch-prediction", "importer", "model-batch-predict", "check-batch-prediction-job"}
    plan = root["plan-batch-prediction"]
    assert plan["cachingOptions"] == {}
    assert params(plan) == {
        "model": {"componentInputParameter": "model"},
        "display_name": "digits",
        "alias": "champion",
        "instances": {"componentInputParameter": "instances"},
        "output_prefix": {"componentInputParameter": "output_prefix"},
        "project": PROJECT,
        "location": "europe-west4",
        "run_name": "{{$.pipeline_job_name}}",
        **{
            name: {"componentInputParameter": name}
            for name in (
                "instances_format",
                "key_field",
                "included_fields",
                "excluded_fields",
                "instance_type",
                "signature_name",
            )
        },
    }
    assert params(root["importer"]) == {
        "uri": {"taskOutputParameter": {"outputParameterKey": "model_uri", "producerTask": "plan-batch-prediction"}},
        "metadata": {
            "taskOutputParameter": {"outputParameterKey": "model_name", "producerTask": "plan-batch-prediction"}
        },
    }
    assert (
        spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]["typeSchema"]["schemaTitle"]
        == "google.VertexModel"
    )

    def planned(key):
        return {"taskOutputParameter": {"outputParameterKey": key, "producerTask": "plan-batch-prediction"}}

    job = root["model-batch-predict"]
    assert job["cachingOptions"] == {}  # the files behind a glob and the champion change between runs
    assert job["inputs"]["artifacts"] == {
        "model": {"taskOutputArtifact": {"outputArtifactKey": "artifact", "producerTask": "importer"}}
    }
    assert params(job) == {
        "job_display_name": planned("job_display_name"),
        "location": "europe-west4",
        "gcs_source_uris": planned("gcs_source_uris"),
        "bigquery_source_input_uri": planned("bigquery_source_input_uri"),
        "instances_format": {"componentInputParameter": "instances_format"},
        # JSON Lines under a gs:// prefix, or BigQuery tables (bq:// output_prefix)
        "predictions_format": planned("predictions_format"),
        "gcs_destination_output_uri_prefix": planned("output_prefix"),
        "bigquery_destination_output_uri": planned("bigquery_destination_output_uri"),
        "key_field": {"componentInputParameter": "key_field"},
        # the instance config as the plan completed it (the model's feature columns by default)
        "included_fields": planned("included_fields"),
        "excluded_fields": planned("excluded_fields"),
        "instance_type": planned("instance_type"),
        "model_parameters": planned("model_parameters"),  # {"signature_name": ...} when not serving_default
        "manual_batch_tuning_parameters_batch_size": {"componentInputParameter": "batch_size"},
        "machine_type": "n1-highmem-8",
        "starting_replica_count": 3,
        "max_replica_count": 7,
        "labels": {**LABELS, "pipeline": "tfpipe-batch-prediction"},
        "service_account": SA,
        "encryption_spec_key_name": KEY,
    }
    check = root["check-batch-prediction-job"]  # the error budget, on the job's counts
    assert check["cachingOptions"] == {}
    assert params(check) == {
        "gcp_resources": {
            "taskOutputParameter": {"outputParameterKey": "gcp_resources", "producerTask": "model-batch-predict"}
        },
        "max_error_fraction": {"componentInputParameter": "max_error_fraction"},
    }
    outputs = spec["components"]["comp-plan-batch-prediction"]["outputDefinitions"]["parameters"]
    assert outputs["gcs_source_uris"] == {"parameterType": "LIST"}
    inputs = root_inputs(spec)
    assert inputs["instances"] == {"parameterType": "STRING"}  # required
    assert inputs["instances_format"] == {"defaultValue": "jsonl", "isOptional": True, "parameterType": "STRING"}
    assert inputs["model"] == {"defaultValue": "", "isOptional": True, "parameterType": "STRING"}
    assert inputs["batch_size"] == {"defaultValue": 64, "isOptional": True, "parameterType": "NUMBER_INTEGER"}
    assert inputs["included_fields"] == {"defaultValue": [], "isOptional": True, "parameterType": "LIST"}
    assert inputs["max_error_fraction"] == {"defaultValue": 0.1, "isOptional": True, "parameterType": "NUMBER_DOUBLE"}
    assert set(inputs) == {
        "instances",
        "instances_format",
        "model",
        "model_repository",
        "model_name",
        "batch_size",
        "key_field",
        "included_fields",
        "excluded_fields",
        "instance_type",
        "max_error_fraction",
        "signature_name",
        "output_prefix",
    }


def test_kubeflow_batch_prediction(tmp_path):
    _, spec = compile_spec("kubeflow", tmp_path, "batch_prediction")
    root = dag(spec)
    assert set(root) == {"run-batch-prediction"}
    assert params(root["run-batch-prediction"]) == {
        name: {"componentInputParameter": name}
        for name in (
            "model_repository",
            "model_name",
            "model",
            "instances",
            "instances_format",
            "batch_size",
            "key_field",
            "included_fields",
            "excluded_fields",
            "instance_type",
            "max_error_fraction",
            "signature_name",
        )
    }
    assert set(images(spec).values()) == {"example.com/tfpipe/components:abc"}
    outputs = spec["components"]["comp-run-batch-prediction"]["outputDefinitions"]
    assert set(outputs["parameters"]) == {"output_directory", "succeeded", "failed"}
    assert set(outputs["artifacts"]) == {"predictions"}


def test_local_steps_deploy_after_publish():
    from pipelines.local_run import step_names

    names = step_names(build_pipeline("local"))
    assert names[:8] == [
        "find-repository-champion",
        "fingerprint-data",
        "prepare-data",
        "check-champion",
        "tune-hyperparameters",
        "train-model",
        "evaluate-model",
        "publish-model",
    ]
    assert set(names[8:]) == {"quantize-model", "deploy-model"} and len(names) == 10


def test_compile_cli_batch_prediction_with_config_defaults(tmp_path):
    from click.testing import CliRunner

    from pipelines.cli import cli

    (tmp_path / "c.yaml").write_text(
        "batch:\n  batch_size: 8\n  instances_format: csv\nplatform:\n  batch_machine_type: n1-standard-16\n"
        "  components_image: europe-west4-docker.pkg.dev/acme-ml/tfpipe/components:abc\n"
    )
    out = tmp_path / "batch.yaml"
    result = CliRunner().invoke(
        cli,
        [
            "compile",
            "--target",
            "vertex",
            "--pipeline",
            "batch_prediction",
            "--output",
            str(out),
            "--config",
            str(tmp_path / "c.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"compiled vertex batch_prediction pipeline to {out}"
    spec = yaml.safe_load(out.read_text())
    inputs = root_inputs(spec)
    assert inputs["batch_size"]["defaultValue"] == 8 and inputs["instances_format"]["defaultValue"] == "csv"
    assert inputs["instances"] == {"parameterType": "STRING"}
    assert params(dag(spec)["model-batch-predict"])["machine_type"] == "n1-standard-16"


@pytest.mark.parametrize(
    "section, values, message",
    [
        (
            "parameters",
            "traffic_percentage: 0",
            "parameters.traffic_percentage: Input should be greater than or equal to 1",
        ),
        (
            "parameters",
            "traffic_percentage: 101",
            "parameters.traffic_percentage: Input should be less than or equal to 100",
        ),
        ("parameters", "rest_port: 9000\n  grpc_port: 9000", "rest_port and grpc_port must differ"),
        ("parameters", "tflite_qat: true", "tflite_qat fine-tunes for int8: it needs tflite_mode int8, not dynamic"),
        ("batch", "instances_format: parquet", "batch.instances_format: Input should be 'jsonl', 'csv'"),
        ("batch", "batch_size: 0", "batch.batch_size: Input should be greater than or equal to 1"),
        ("platform", "model_version_aliases: [Champion]", "model_version_aliases: 'Champion' must match"),
        ("platform", "model_labels: {Team: ml}", "model_labels: Team='ml': keys must match"),
        (
            "platform",
            "serving_min_replicas: 3\n  serving_max_replicas: 2",
            r"serving_max_replicas \(2\) must be >= serving_min_replicas \(3\)",
        ),
        (
            "platform",
            "batch_starting_replicas: 4\n  batch_max_replicas: 2",
            r"batch_max_replicas \(2\) must be >= batch_starting_replicas \(4\)",
        ),
        ("platform", "serving_accelerator_type: NVIDIA_TESLA_T4", "must be set together"),
        ("platform", "step_limits: {prepare-data: {cpu_limit: eight}}", "'eight' is not a CPU limit like 8 or 500m"),
        ("platform", "step_limits: {prepare-data: {memory_limit: 32GB}}", "'32GB' is not a memory limit like 32G"),
        ("platform", "step_limits: {Prepare_Data: {cpu_limit: '8'}}", "'Prepare_Data': keys are step names"),
    ],
)
def test_deploy_and_batch_config_validation(tmp_path, section, values, message):
    (tmp_path / "c.yaml").write_text(f"{section}:\n  {values}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "c.yaml")


def test_batch_config_overrides():
    config = load_config(None, {"epochs": 3}, {"instances": "a.jsonl", "model": None, "batch_size": 4})
    assert config.batch.pipeline_arguments() == {
        "instances": "a.jsonl",
        "instances_format": "jsonl",
        "model": "",
        "model_repository": "",
        "model_name": "tfpipe-model",
        "batch_size": 4,
        "key_field": "",
        "included_fields": [],
        "excluded_fields": [],
        "instance_type": "",
        "max_error_fraction": 0.1,
        "signature_name": "",
        "output_prefix": "",
    }
    config = load_config(None, None, {"instances": "a.csv", "excluded_fields": "label, id"})
    assert config.batch.excluded_fields == ["label", "id"]  # comma-separated (CLI, environment) or a YAML list
    with pytest.raises(ConfigError, match="give included_fields or excluded_fields, not both"):
        load_config(None, None, {"included_fields": ["a"], "excluded_fields": ["b"]})
    assert "instances" not in load_config().batch.pipeline_arguments()


def test_unknown_target():
    with pytest.raises(ValueError, match="unknown target 'aws'"):
        build_pipeline("aws")


RUN_UNIQUE = ("{{$.pipeline_job_", "{{$.pipeline_task_")  # the run's or the task's own name, id or times


@pytest.mark.parametrize("pipeline", ["training", "batch_prediction"])
@pytest.mark.parametrize(
    "target, platform", [("vertex", PLATFORM), ("kubeflow", IN_POD), ("kubeflow", PLATFORM), ("local", PLATFORM)]
)
def test_no_cached_step_takes_a_value_unique_to_the_run(tmp_path, target, platform, pipeline):
    """A cached step's cache key holds its resolved inputs: one that takes the run's name never hits the cache, and
    neither does anything after it (a scheduled run on unchanged data would retrain)."""
    _, spec = compile_spec(target, tmp_path, pipeline, platform)
    offenders, cached = [], 0
    for component in [spec["root"], *spec["components"].values()]:
        for name, task in component.get("dag", {}).get("tasks", {}).items():
            if not task.get("cachingOptions", {}).get("enableCache"):
                continue
            cached += 1
            for key, value in params(task).items():
                if isinstance(value, str) and value.startswith(RUN_UNIQUE):
                    offenders.append(f"{name}.{key}={value}")
    assert offenders == []
    assert cached >= (1 if pipeline == "batch_prediction" or target == "local" else 5)


def test_vertex_data_prep_runs_on_dataflow_with_the_runs_identity(tmp_path):
    """Dataflow by default (platform.data_prep.runner): a job as the runs' service account, on their network, with
    their CMEK key and labels, the components image on its workers, for sources of dataflow_min_records records and
    more; "direct" keeps prep in the step's container."""
    config = load_config(None, sets=["platform.data_prep={machine_type: n1-highmem-4, max_workers: 20}"])
    platform = PLATFORM.model_copy(update={"data_prep": config.platform.data_prep, "pipeline_root": "gs://b/root"})
    _, spec = compile_spec("vertex", tmp_path, platform=platform)
    prep = params(dag(spec)["prepare-data"])
    assert prep["runner"] == "dataflow" and prep["dataflow_min_records"] == 100_000
    assert prep["dataflow_options"] == {
        "project": "",
        "region": "europe-west4",
        "service_account": SA,
        "network": "vpc",
        "subnetwork": "",
        "kms_key": KEY,
        "labels": LABELS,
        "machine_type": "n1-highmem-4",
        "max_workers": 20,
        "sdk_container_image": PLATFORM.components_image,
        "temp_location": "gs://b/root/dataflow/temp",
        "staging_location": "gs://b/root/dataflow/staging",
        "endpoint": "",
    }
    direct = PLATFORM.model_copy(
        update={"data_prep": config.platform.data_prep.model_copy(update={"runner": "direct"})}
    )
    _, spec = compile_spec("vertex", tmp_path, platform=direct)
    prep = params(dag(spec)["prepare-data"])
    assert prep["runner"] == "direct" and not {"dataflow_options", "dataflow_min_records"} & set(prep)
    _, local = compile_spec("kubeflow", tmp_path)
    assert "runner" not in params(dag(local)["prepare-data"])  # the component's default: direct


def test_dataflow_gets_a_subnetwork_as_its_full_url_in_the_networks_project(tmp_path):
    """Dataflow looks a network's name and a subnetwork's short path up in the job's own project: on a Shared VPC
    (the network in a host project) the job needs the subnetwork's full URL, and then no network."""
    host = "https://www.googleapis.com/compute/v1/projects/123456789/regions/europe-west4/subnetworks/ml"
    for subnetwork, expected in (
        ("regions/europe-west4/subnetworks/ml", ("", host)),
        (host, ("", host)),
        ("", ("vpc", "")),  # an auto-mode network of the runs' project
    ):
        prep = PLATFORM.data_prep.model_copy(update={"subnetwork": subnetwork})
        platform = PLATFORM.model_copy(update={"data_prep": prep})
        _, spec = compile_spec("vertex", tmp_path, platform=platform)
        options = params(dag(spec)["prepare-data"])["dataflow_options"]
        assert (options["network"], options["subnetwork"]) == expected
    alone = PLATFORM.model_copy(
        update={
            "network": "",
            "data_prep": PLATFORM.data_prep.model_copy(update={"subnetwork": "regions/r/subnetworks/s"}),
        }
    )
    assert alone.dataflow_network() == ("", "regions/r/subnetworks/s")  # no network: the job's project's subnetwork
