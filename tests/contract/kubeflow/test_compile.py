"""The compiled Kubeflow YAML with Kubeflow's engines: the engine steps and their inputs, the shared volume on every
step (kfp-kubernetes platform spec), each step's CPU and memory, the images; and each engine as a config choice."""

import pytest
import yaml

from pipelines.config import ConfigError, KubeflowSettings, Platform, Resources, load_config
from pipelines.training import build_pipeline
from tests.helpers.compiled import compiled_docs

PLATFORM = Platform(
    components_image="example.com/tfpipe/components:abc",
    trainer_image="example.com/tfpipe/trainer:abc",
    trainer_gpu_image="example.com/tfpipe/trainer-gpu:abc",
    serving_image="example.com/serving:2",
    serving_min_replicas=2,
    serving_max_replicas=4,
    keep_previous=1,
    kubeflow=KubeflowSettings(
        namespace="ml", service_account="tfpipe-runner", inference_service="digits", poll_seconds=15
    ),
)
# the run's name: from the pod's Argo Workflow label (a step input would be in the step's cache key)
RUN_ID_ENV = [{"name": "TFPIPE_RUN_ID", "fieldPath": "metadata.labels['workflows.argoproj.io/workflow']"}]


def compile_docs(tmp_path, platform=PLATFORM, pipeline="training"):
    docs = compiled_docs("kubeflow", pipeline, platform)
    return docs[0], (docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"] if len(docs) > 1 else {})


def params(task):
    return {
        k: v["runtimeValue"]["constant"] if "runtimeValue" in v else v
        for k, v in task["inputs"].get("parameters", {}).items()
    }


def tasks(spec, component=None):
    return (spec["components"][component]["dag"] if component else spec["root"]["dag"])["tasks"]


def test_engine_steps_and_their_inputs(tmp_path):
    spec, _ = compile_docs(tmp_path)
    root = tasks(spec)
    assert set(root) == {
        "fingerprint-data",
        "prepare-data",
        "check-champion",
        "tune-on-katib",
        "train-model-on-operator",
        "find-repository-champion",
        "evaluate-model",
        "condition-1",
    }
    engine = {
        "namespace": "ml",
        "service_account": "tfpipe-runner",
        "claim_name": "tfpipe",
        "mount_path": "/mnt/tfpipe",
        "poll_seconds": 15.0,
    }
    workers = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    tune = params(root["tune-on-katib"])
    assert tune["study_spec"]["algorithm"] == "default" and tune["enabled"] == {"componentInputParameter": "tune"}
    assert tune["workers"] == {"componentInputParameter": "workers"}  # the trials' global batch is the training's
    assert {k: tune[k] for k in (*engine, "trainer_image", "resources", "timeout_minutes", "keep_experiment")} == {
        **engine,
        "trainer_image": "example.com/tfpipe/trainer:abc",
        "resources": workers,
        "timeout_minutes": 1440,
        "keep_experiment": False,
    }
    train = params(root["train-model-on-operator"])
    assert train["hyperparameters"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "tune-on-katib"}
    }
    assert {k: train[k] for k in ("workers", "epochs", "max_restarts")} == {
        k: {"componentInputParameter": k} for k in ("workers", "epochs", "max_restarts")
    }
    assert {k: train[k] for k in (*engine, "trainer_image", "resources", "timeout_minutes")} == {
        **engine,
        "trainer_image": "example.com/tfpipe/trainer:abc",
        "resources": workers,
        "timeout_minutes": 1440,
    }
    assert params(root["evaluate-model"])["champion_path"] == {
        "taskOutputParameter": {"outputParameterKey": "path", "producerTask": "find-repository-champion"}
    }
    deploy = tasks(spec, "comp-condition-2")["deploy-model-on-kserve"]
    assert deploy["cachingOptions"] == {}
    assert params(deploy) == {
        **{
            k: {"componentInputParameter": f"pipelinechannel--{k}"}
            for k in ("model_repository", "model_name", "traffic_percentage")
        },
        **engine,
        "inference_service": "digits",
        "serving_mode": "auto",
        "serving_image": "example.com/serving:2",
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "min_replicas": 2,
        "max_replicas": 4,
        "keep_previous": 1,
        "timeout_minutes": 15,
    }
    _, k8s = compile_docs(tmp_path)
    for step in ("tune-on-katib", "train-model-on-operator", "deploy-model-on-kserve"):
        assert k8s[f"exec-{step}"]["fieldPathAsEnv"] == RUN_ID_ENV, step


def test_every_step_mounts_the_volume_and_gets_its_resources_on_the_components_image(tmp_path):
    platform = PLATFORM.model_copy(
        update={
            "kubeflow": PLATFORM.kubeflow.model_copy(
                update={
                    "step_resources": {
                        "default": Resources(cpu_request="250m", memory_request="512Mi", memory_limit="2Gi"),
                        "prepare-data": Resources(
                            cpu_request="2", cpu_limit="4", memory_request="8Gi", memory_limit="16Gi"
                        ),
                    }
                }
            )
        }
    )
    spec, k8s = compile_docs(tmp_path, platform)
    executors = spec["deploymentSpec"]["executors"]
    steps = {
        "fingerprint-data",
        "prepare-data",
        "check-champion",
        "tune-on-katib",
        "train-model-on-operator",
        "find-repository-champion",
        "evaluate-model",
        "publish-model",
        "deploy-model-on-kserve",
        "quantize-model",
    }
    assert set(executors) == {f"exec-{s}" for s in steps} == set(k8s)
    for name, executor in executors.items():
        assert executor["container"]["image"] == "example.com/tfpipe/components:abc"
        assert {k: v for k, v in k8s[name].items() if k != "fieldPathAsEnv"} == {
            "pvcMount": [
                {
                    "constant": "tfpipe",
                    "mountPath": "/mnt/tfpipe",
                    "pvcNameParameter": {"runtimeValue": {"constant": "tfpipe"}},
                }
            ]
        }
        resources = executor["container"]["resources"]
        if name == "exec-prepare-data":
            assert {k: v for k, v in resources.items() if k.startswith("resource")} == {
                "resourceCpuRequest": "2",
                "resourceCpuLimit": "4",
                "resourceMemoryRequest": "8Gi",
                "resourceMemoryLimit": "16Gi",
            }
        else:
            assert {k: v for k, v in resources.items() if k.startswith("resource")} == {
                "resourceCpuRequest": "250m",
                "resourceMemoryRequest": "512Mi",
                "resourceMemoryLimit": "2Gi",
            }


def test_gpu_workers_use_the_gpu_trainer_image(tmp_path):
    platform = PLATFORM.model_copy(
        update={
            "kubeflow": PLATFORM.kubeflow.model_copy(
                update={"worker_resources": Resources(cpu_request="4", memory_request="16Gi", gpus=1)}
            )
        }
    )
    spec, _ = compile_docs(tmp_path, platform)
    for step in ("tune-on-katib", "train-model-on-operator"):
        assert params(tasks(spec)[step])["trainer_image"] == "example.com/tfpipe/trainer-gpu:abc"
        assert params(tasks(spec)[step])["resources"] == {
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"nvidia.com/gpu": "1"},
        }


def test_a_warm_started_katib_study_compiles_and_its_step_hands_the_training_its_output(tmp_path):
    """`study.warm_start` with `tuning: katib`: the Katib step is asked for the warm start (it keeps the best
    trial's checkpoint on the claim) and its output, which then holds `warm_start_from`, is the training's."""
    from kfp import compiler

    from components.lib.study.spec import DEFAULT_STUDY

    path = tmp_path / "warm.yaml"
    study = DEFAULT_STUDY.model_copy(update={"warm_start": True})
    compiler.Compiler().compile(build_pipeline("kubeflow", PLATFORM, study), str(path))
    root = tasks(next(yaml.safe_load_all(path.read_text())))
    assert params(root["tune-on-katib"])["study_spec"]["warm_start"] is True
    assert params(root["train-model-on-operator"])["hyperparameters"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "tune-on-katib"}
    }


def test_in_pod_engines_keep_todays_steps_with_their_resources(tmp_path):
    platform = PLATFORM.model_copy(
        update={
            "kubeflow": PLATFORM.kubeflow.model_copy(update={"training": "pod", "tuning": "pod", "serving": "none"})
        }
    )
    spec, k8s = compile_docs(tmp_path, platform)
    assert {"tune-hyperparameters", "train-model"} <= set(tasks(spec))
    assert params(tasks(spec)["tune-hyperparameters"])["workers"] == {"componentInputParameter": "workers"}
    assert set(tasks(spec, "comp-condition-1")) == {"publish-model", "quantize-model"}  # serving: none
    train = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"]["resources"]
    assert (train["resourceCpuRequest"], train["resourceMemoryLimit"]) == ("2", "8Gi")  # N processes in one pod
    assert "exec-train-model" in k8s


def test_no_volume_no_platform_spec(tmp_path):
    platform = PLATFORM.model_copy(
        update={"kubeflow": KubeflowSettings(training="pod", tuning="pod", serving="url", volume={"claim_name": ""})}
    )
    spec, k8s = compile_docs(tmp_path, platform)
    assert k8s == {} and "deploy-model-at-url" in tasks(spec, "comp-condition-2")


def test_batch_prediction_on_the_volume(tmp_path):
    spec, k8s = compile_docs(tmp_path, pipeline="batch_prediction")
    assert set(tasks(spec)) == {"run-batch-prediction"}
    assert k8s["exec-run-batch-prediction"]["pvcMount"][0]["mountPath"] == "/mnt/tfpipe"


def test_compiled_kubeflow_template_defaults_the_model_repository_to_the_volume(tmp_path):
    from pipelines.delivery import delivery_for

    config = load_config(None, environ={})
    for pipeline in ("training", "batch_prediction"):
        out = tmp_path / f"{pipeline}.yaml"
        delivery_for("kubeflow").compile(pipeline, config, out)
        inputs = next(yaml.safe_load_all(out.read_text()))["root"]["inputDefinitions"]["parameters"]
        assert inputs["model_repository"]["defaultValue"] == "/mnt/tfpipe/model-repository"
    delivery_for("vertex").compile("training", config, tmp_path / "v.yaml")
    inputs = next(yaml.safe_load_all((tmp_path / "v.yaml").read_text()))["root"]["inputDefinitions"]["parameters"]
    assert inputs["model_repository"]["defaultValue"] == ""


@pytest.mark.parametrize(
    "parameter, message",
    [
        ({"min": 0.5, "max": 0.99, "scale": "reverse_log"}, "Katib has no reverse_log distribution"),
        ({"min": 0.0, "max": 0.5}, "Katib's bayesianoptimization .scikit-optimize. samples every double log-uniformly"),
    ],
)
def test_a_study_katib_cannot_express_fails_at_compile_time(parameter, message):
    from components.lib.study.spec import StudySpec

    study = StudySpec(parameters=[{"type": "double", "parameter_id": "learning_rate", **parameter}])
    with pytest.raises(
        ValueError, match=f"^platform.kubeflow.tuning is katib, but study parameter learning_rate: {message}"
    ):
        build_pipeline("kubeflow", PLATFORM, study)


def test_the_cli_refuses_such_a_study_in_one_line(tmp_path):
    from click.testing import CliRunner

    from pipelines.cli import cli

    config = tmp_path / "study.yaml"
    images = "".join(
        f"  {name}_image: registry.acme.test/tfpipe/{name}:1\n" for name in ("components", "trainer", "serving")
    )
    config.write_text(
        f"platform:\n{images}study:\n  parameters:\n    - {{type: double, parameter_id: dropout, min: 0.0, max: 0.5}}\n"
    )
    result = CliRunner().invoke(
        cli, ["compile", "--target", "kubeflow", "--config", str(config), "--output", str(tmp_path / "k.yaml")]
    )
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.startswith("Error: platform.kubeflow.tuning is katib, but study parameter dropout:")


@pytest.mark.parametrize(
    "settings, message",
    [
        ("training: job", r"platform.kubeflow.training: Input should be 'auto', 'trainjob', 'tfjob' or 'pod'"),
        ("serving: seldon", r"platform.kubeflow.serving: Input should be 'kserve', 'url' or 'none'"),
        (
            "volume: {claim_name: ''}",
            r"platform.kubeflow: training: auto, tuning: katib, serving: kserve need "
            r"volume.claim_name",
        ),
        ("worker_resources: {memory_limit: 8GB}", r"'8GB' is not a Kubernetes quantity"),
        ("step_resources: {Train_Model: {cpu_request: '1'}}", r"'Train_Model': keys are step names"),
        ("namespace: My_NS", r"'My_NS' is not a Kubernetes name"),
    ],
)
def test_kubeflow_config_validation(tmp_path, settings, message):
    (tmp_path / "c.yaml").write_text(f"platform:\n  kubeflow: {{{settings}}}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "c.yaml", environ={})


def test_training_operator_is_read_as_tfjob_with_a_one_line_warning(tmp_path):
    from pipelines.config.kubeflow import TRAINING_RENAMED

    (tmp_path / "c.yaml").write_text("platform:\n  kubeflow: {training: operator}\n")
    with pytest.warns(FutureWarning) as warned:
        config = load_config(tmp_path / "c.yaml", environ={})
    assert config.platform.kubeflow.training == "tfjob"
    assert [str(w.message) for w in warned] == [TRAINING_RENAMED] and "\n" not in TRAINING_RENAMED


def test_kubeflow_config_from_file_env_and_set(tmp_path):
    (tmp_path / "c.yaml").write_text("platform:\n  kubeflow:\n    tuning: pod\n    volume: {claim_name: data}\n")
    config = load_config(
        tmp_path / "c.yaml",
        sets=["platform.kubeflow.serving=url"],
        environ={"TFPIPE_PLATFORM__KUBEFLOW__TRAINING": "pod"},
    )
    k = config.platform.kubeflow
    assert (k.training, k.tuning, k.serving, k.volume.claim_name, k.volume.mount_path) == (
        "pod",
        "pod",
        "url",
        "data",
        "/mnt/tfpipe",
    )
    assert k.resources_of("train-model").cpu_request == "2" and k.resources_of("evaluate-model").cpu_request == "500m"


def test_engine_steps_take_the_run_from_their_pod(monkeypatch):
    from components.lib.kube import api as kube

    monkeypatch.delenv(kube.RUN_ID_ENV, raising=False)
    with pytest.raises(RuntimeError, match=r"TFPIPE_RUN_ID is not set: .* from their pod's metadata.labels\["):
        kube.run_id()
    monkeypatch.setenv(kube.RUN_ID_ENV, "tfpipe-training-8x2kq")
    assert kube.run_id() == "tfpipe-training-8x2kq"
