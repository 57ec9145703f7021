import yaml
import pytest
from google.auth.credentials import AnonymousCredentials

from components.vertex_training import worker_pool_specs
from pipelines.config import Platform
from pipelines.training import build_pipeline

PLATFORM = Platform(components_image="example.com/tfpipe/components:abc", trainer_image="example.com/tfpipe/trainer:abc",
                    serving_image="example.com/serving:2", machine_type="n1-standard-8")


def compile_spec(target, tmp_path):
    from kfp import compiler

    path = tmp_path / f"{target}.yaml"
    compiler.Compiler().compile(build_pipeline(target, PLATFORM), str(path))
    return path, yaml.safe_load(path.read_text())


def dag(spec, component=None):
    return (spec["components"][component]["dag"] if component else spec["root"]["dag"])["tasks"]


def deps(tasks, name):
    return sorted(tasks[name].get("dependentTasks", []))


def images(spec):
    return {name: e["container"]["image"] for name, e in spec["deploymentSpec"]["executors"].items() if "container" in e}


def test_vertex_dag(tmp_path):
    _, spec = compile_spec("vertex", tmp_path)
    root = dag(spec)
    assert set(root) == {"prepare-data", "condition-branches-1", "plan-vertex-training-2", "custom-training-job",
                         "import-trained-model", "evaluate-model", "condition-4"}
    assert deps(root, "condition-branches-1") == ["prepare-data"]
    assert deps(root, "plan-vertex-training-2") == ["condition-branches-1", "prepare-data"]
    assert deps(root, "custom-training-job") == ["plan-vertex-training-2"]
    assert deps(root, "import-trained-model") == ["custom-training-job", "plan-vertex-training-2"]
    assert deps(root, "evaluate-model") == ["import-trained-model", "prepare-data"]
    job_inputs = root["custom-training-job"]["inputs"]["parameters"]
    assert job_inputs["worker_pool_specs"]["taskOutputParameter"] == {
        "outputParameterKey": "worker_pool_specs", "producerTask": "plan-vertex-training-2"}
    assert job_inputs["base_output_directory"]["taskOutputParameter"]["outputParameterKey"] == "base_output_directory"
    plan_inputs = root["plan-vertex-training-2"]["inputs"]["parameters"]
    assert plan_inputs["trainer_image"]["runtimeValue"]["constant"] == "example.com/tfpipe/trainer:abc"
    assert plan_inputs["machine_type"]["runtimeValue"]["constant"] == "n1-standard-8"
    assert plan_inputs["workers"]["componentInputParameter"] == "workers"
    # the final training takes the hyperparameters of whichever tuning branch ran (dsl.OneOf)
    assert plan_inputs["hyperparameters"]["taskOutputParameter"] == {
        "outputParameterKey": "pipelinechannel--condition-branches-1-oneof-1", "producerTask": "condition-branches-1"}
    # the gate: upload and quantization run only when evaluate-model's output is true
    condition = root["condition-4"]
    assert condition["triggerPolicy"]["condition"] == \
        "inputs.parameter_values['pipelinechannel--evaluate-model-Output'] == true"
    inner = dag(spec, condition["componentRef"]["name"])
    assert set(inner) == {"importer", "model-upload", "quantize-model"}
    assert deps(inner, "model-upload") == ["importer"]
    quantize = inner["quantize-model"]["inputs"]
    assert quantize["artifacts"]["model"] == {"componentInputArtifact": "pipelinechannel--import-trained-model-model"}
    assert quantize["parameters"]["mode"]["componentInputParameter"] == "pipelinechannel--tflite_mode"
    imgs = images(spec)
    for name in ("exec-prepare-data", "exec-plan-vertex-training", "exec-import-trained-model", "exec-evaluate-model",
                 "exec-quantize-model", "exec-read-best-trial", "exec-merge-hyperparameters"):
        assert imgs[name] == "example.com/tfpipe/components:abc"
    assert imgs["exec-custom-training-job"].startswith("gcr.io/ml-pipeline/google-cloud-pipeline-components")
    importer = spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]
    assert importer["typeSchema"]["schemaTitle"] == "google.UnmanagedContainerModel"
    # lightweight steps must not pip-install kfp at runtime: the components image carries the compiler's kfp
    assert "pip install" not in " ".join(spec["deploymentSpec"]["executors"]["exec-evaluate-model"]["container"]["command"])


def test_vertex_tuning_branch(tmp_path):
    _, spec = compile_spec("vertex", tmp_path)
    branches = dag(spec, "comp-condition-branches-1")
    assert branches["condition-2"]["triggerPolicy"]["condition"] == "inputs.parameter_values['pipelinechannel--tune'] == true"
    assert branches["condition-3"]["triggerPolicy"]["condition"] == "!(inputs.parameter_values['pipelinechannel--tune'] == true)"
    assert set(dag(spec, "comp-condition-3")) == {"default-hyperparameters-2"}
    tuning = dag(spec, "comp-condition-2")
    assert set(tuning) == {"default-hyperparameters", "plan-vertex-training", "hyperparameter-tuning-job",
                           "read-best-trial", "merge-hyperparameters"}
    plan = tuning["plan-vertex-training"]["inputs"]["parameters"]
    assert plan["workers"]["runtimeValue"]["constant"] == 1
    assert plan["epochs"]["componentInputParameter"] == "pipelinechannel--tuning_trial_epochs"
    assert plan["tuned_parameters"]["runtimeValue"]["constant"] == ["learning_rate", "hidden_units", "dropout"]
    assert plan["trainer_image"]["runtimeValue"]["constant"] == "example.com/tfpipe/trainer:abc"
    job = tuning["hyperparameter-tuning-job"]["inputs"]["parameters"]
    assert job["worker_pool_specs"]["taskOutputParameter"] == {"outputParameterKey": "worker_pool_specs",
                                                               "producerTask": "plan-vertex-training"}
    assert job["max_trial_count"]["runtimeValue"]["constant"] == 4
    assert job["parallel_trial_count"]["runtimeValue"]["constant"] == 2
    assert job["max_failed_trial_count"]["runtimeValue"]["constant"] == 0
    assert job["study_spec_algorithm"]["runtimeValue"]["constant"] == "ALGORITHM_UNSPECIFIED"
    assert job["study_spec_measurement_selection_type"]["runtimeValue"]["constant"] == "LAST_MEASUREMENT"
    assert job["study_spec_metrics"]["runtimeValue"]["constant"] == [{"metric_id": "accuracy", "goal": 1}]
    params = {p["parameter_id"]: p for p in job["study_spec_parameters"]["runtimeValue"]["constant"]}
    assert params["learning_rate"]["double_value_spec"] == {"min_value": 0.0001, "max_value": 0.03}
    assert params["hidden_units"]["integer_value_spec"] == {"min_value": "32", "max_value": "256"}
    assert params["dropout"]["discrete_value_spec"] == {"values": [0.0, 0.1, 0.2, 0.3]}
    best = tuning["read-best-trial"]["inputs"]["parameters"]
    assert best["gcp_resources"]["taskOutputParameter"] == {"outputParameterKey": "gcp_resources",
                                                            "producerTask": "hyperparameter-tuning-job"}
    assert best["goal"]["runtimeValue"]["constant"] == "maximize"
    merge = tuning["merge-hyperparameters"]["inputs"]["parameters"]
    assert merge["best"]["taskOutputParameter"] == {"outputParameterKey": "best_parameters",
                                                    "producerTask": "read-best-trial"}


def test_worker_pools_one_chief_and_n_minus_one_workers():
    specs = worker_pool_specs("img:1", "gs://b/data", 3, "n1-standard-4", {"epochs": 5}, "NVIDIA_TESLA_T4", 1)
    assert [s["replica_count"] for s in specs] == [1, 2]
    container = specs[0]["container_spec"]
    assert container["image_uri"] == "img:1" and container["command"] == ["python", "-m", "trainer.task"]
    assert container["args"] == ["--data-dir", "gs://b/data", "--epochs", "5"]
    assert specs[1]["machine_spec"] == {"machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
                                        "accelerator_count": 1}
    assert [s["replica_count"] for s in worker_pool_specs("i", "d", 1, "m", {})] == [1]
    with pytest.raises(ValueError, match="workers must be >= 1"):
        worker_pool_specs("i", "d", 0, "m", {})


def test_kubeflow_dag(tmp_path):
    _, spec = compile_spec("kubeflow", tmp_path)
    root = dag(spec)
    assert set(root) == {"prepare-data", "tune-hyperparameters", "train-model", "evaluate-model", "condition-1"}
    assert deps(root, "tune-hyperparameters") == ["prepare-data"]
    assert deps(root, "train-model") == ["prepare-data", "tune-hyperparameters"]
    assert root["train-model"]["inputs"]["parameters"]["hyperparameters"]["taskOutputParameter"] == {
        "outputParameterKey": "Output", "producerTask": "tune-hyperparameters"}
    tune = root["tune-hyperparameters"]["inputs"]["parameters"]
    assert tune["enabled"]["componentInputParameter"] == "tune"
    study = tune["study_spec"]["runtimeValue"]["constant"]
    assert study["metric_id"] == "accuracy" and study["max_trial_count"] == 4 and study["parallel_trial_count"] == 2
    assert [p["parameter_id"] for p in study["parameters"]] == ["learning_rate", "hidden_units", "dropout"]
    assert deps(root, "evaluate-model") == ["prepare-data", "train-model"]
    assert root["condition-1"]["triggerPolicy"]["condition"].startswith(
        "inputs.parameter_values['pipelinechannel--evaluate-model-Output']")
    inner = dag(spec, root["condition-1"]["componentRef"]["name"])
    assert set(inner) == {"publish-model", "quantize-model"}
    assert inner["quantize-model"]["inputs"]["artifacts"]["model"] == {
        "componentInputArtifact": "pipelinechannel--train-model-model"}
    assert set(images(spec).values()) == {"example.com/tfpipe/components:abc"}
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["workers"] == {"defaultValue": 2, "isOptional": True, "parameterType": "NUMBER_INTEGER"}
    assert params["accuracy_threshold"]["parameterType"] == "NUMBER_DOUBLE"
    assert params["tflite_mode"] == {"defaultValue": "dynamic", "isOptional": True, "parameterType": "STRING"}


def test_vertex_yaml_loads_in_pipeline_job_offline(tmp_path):
    from google.cloud import aiplatform

    path, _ = compile_spec("vertex", tmp_path)
    job = aiplatform.PipelineJob(
        display_name="tfpipe-offline-check", template_path=str(path), pipeline_root="gs://bucket/root",
        project="my-project", location="us-central1", credentials=AnonymousCredentials(),
        parameter_values={"workers": 3, "epochs": 5, "data_source": "gs://bucket/flowers"}, enable_caching=False,
    )
    resource = job._gca_resource
    assert resource.display_name == "tfpipe-offline-check"
    assert resource.runtime_config.gcs_output_directory == "gs://bucket/root"
    values = resource.runtime_config.parameter_values
    assert values["workers"] == 3 and values["data_source"] == "gs://bucket/flowers"
    assert resource.pipeline_spec["pipelineInfo"]["name"] == "tfpipe-training"


def test_unknown_target():
    with pytest.raises(ValueError, match="unknown target 'aws'"):
        build_pipeline("aws")
