"""`python -m pipelines render --target kubeflow`: one YAML file per object the kubeflow steps and the namespace's
manifests create, each created through the Kubernetes double (the vendored CRD schemas, Kubernetes 1.32's core
schemas, the operators' admission rules), the pods their controllers would create from them admitted by Pod
Security's `restricted` profile (which judges pods, not the objects holding their templates), and every run-time
placeholder listed in its file's header."""

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from components.lib.kube import api as kube
from pipelines.cli import cli
from tests.doubles.k8s import KubeAPI
from tests.doubles.k8s.admission import ENFORCE
from tests.doubles.k8s.katib import INJECTION
from tests.helpers.kubeflow_components import EXPERIMENTS, KSERVE
from tests.helpers.pod_security import denials, pods_of

KINDS = {
    "kubeflow.org/v1": {"tfjobs": "TFJob"},
    **EXPERIMENTS,
    **KSERVE,
    "trainer.kubeflow.org/v1alpha1": {"trainjobs": "TrainJob", "trainingruntimes": "TrainingRuntime"},
    "v1": {"persistentvolumeclaims": "PersistentVolumeClaim", "serviceaccounts": "ServiceAccount"},
    "batch/v1": {"jobs": "Job"},
    "rbac.authorization.k8s.io/v1": {"roles": "Role", "rolebindings": "RoleBinding"},
}
PLURALS = {kind: plural for kinds in KINDS.values() for plural, kind in kinds.items()}
DEFAULT_FILES = [
    "tfjob-tfpipe-train-run-id.yaml",
    "trainingruntime-tfpipe-tensorflow-distributed.yaml",
    "trainjob-tfpipe-train-run-id.yaml",
    "experiment-tfpipe-tune-run-id.yaml",
    "inferenceservice-tfpipe-model.yaml",
    "persistentvolumeclaim-tfpipe.yaml",
    "role-tfpipe-engines.yaml",
    "rolebinding-tfpipe-engines.yaml",
    "role-tfpipe-kfp-runner.yaml",
    "rolebinding-tfpipe-kfp-runner.yaml",
    "serviceaccount-tfpipe-runner.yaml",
    "serviceaccount-tfpipe-workloads.yaml",
    "job-tfpipe-volume-permissions.yaml",
]
CANARY_AND_GPUS = {
    "parameters": {"traffic_percentage": 10},
    "platform": {
        "trainer_gpu_image": "example.com/tfpipe/trainer-gpu:1",
        "serving_gpu_image": "example.com/tfpipe/serving-gpu:1",
        "kubeflow": {
            "worker_resources": {"cpu_request": "2", "memory_limit": "8Gi", "gpus": 2},
            "serving_resources": {"cpu_request": "1", "memory_limit": "4Gi", "gpus": 1},
        },
    },
}


def render(tmp_path: Path, config: dict) -> tuple[list[Path], str]:
    config_file = tmp_path / "tfpipe.yaml"
    config_file.write_text(yaml.safe_dump(config))
    out = tmp_path / "rendered"
    result = CliRunner().invoke(
        cli, ["render", "--target", "kubeflow", "--config", str(config_file), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    paths = [Path(line) for line in result.output.splitlines()]
    assert sorted(paths) == sorted(out.iterdir())
    return paths, result.output


def path_of(body: dict) -> str:
    version, plural = body["apiVersion"], PLURALS[body["kind"]]
    root = "/api/v1" if version == "v1" else f"/apis/{version}"
    return f"{root}/namespaces/{body['metadata']['namespace']}/{plural}"


@pytest.fixture
def restricted():
    api = KubeAPI(installed=KINDS, namespaces={"kubeflow": {ENFORCE: "restricted", INJECTION: "enabled"}})
    yield api
    api.close()


@pytest.mark.parametrize("config", [{}, CANARY_AND_GPUS], ids=["default", "canary-and-gpus"])
def test_every_rendered_object_is_created_in_a_restricted_namespace(tmp_path, restricted, config):
    paths, _ = render(tmp_path, config)
    assert [p.name for p in paths] == DEFAULT_FILES
    client = kube.api_client(restricted.url)
    answers, judged = [], []
    for path in paths:
        body = yaml.safe_load(path.read_text())
        assert denials(body) == [], path.name
        judged += [pod for pod, _ in pods_of(body)]
        _, status, _ = client.call_api(
            path_of(body),
            "POST",
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=False,
        )
        answers.append((path.name, status))
    assert answers == [(p.name, 201) for p in paths]
    assert judged == [
        "tfpipe-train-run-id-chief-0",
        "tfpipe-train-run-id-worker-0",
        "tfpipe-tensorflow-distributed-node-0-0",
        "tfpipe-tune-run-id-trial",
        "tfpipe-model-predictor",
        "tfpipe-volume-permissions-pod",
    ]
    assert [(r.method, r.path, r.fault) for r in restricted.requests] == [
        ("POST", path_of(yaml.safe_load(p.read_text())), None) for p in paths
    ]


def test_the_canary_and_the_gpus_are_rendered_as_the_steps_set_them(tmp_path):
    paths, _ = render(tmp_path, CANARY_AND_GPUS)
    bodies = {p.name: yaml.safe_load(p.read_text()) for p in paths}
    predictor = bodies["inferenceservice-tfpipe-model.yaml"]["spec"]["predictor"]
    assert predictor["canaryTrafficPercent"] == 10
    assert predictor["containers"][0]["image"] == "example.com/tfpipe/serving-gpu:1"
    assert predictor["containers"][0]["resources"]["limits"] == {"memory": "4Gi", "nvidia.com/gpu": "1"}
    chief = bodies["tfjob-tfpipe-train-run-id.yaml"]["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    assert chief["containers"][0]["image"] == "example.com/tfpipe/trainer-gpu:1"
    assert chief["containers"][0]["resources"]["limits"] == {"memory": "8Gi", "nvidia.com/gpu": "2"}
    trainer = bodies["trainjob-tfpipe-train-run-id.yaml"]["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"] == {"memory": "8Gi", "nvidia.com/gpu": "2"}
    trial = bodies["experiment-tfpipe-tune-run-id.yaml"]["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]
    assert trial["spec"]["containers"][0]["image"] == "example.com/tfpipe/trainer-gpu:1"


def test_every_placeholder_a_file_holds_is_listed_in_its_header(tmp_path):
    paths, _ = render(tmp_path, {})
    headers = {}
    for path in paths:
        text = path.read_text()
        header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
        body = text[len(header) :]
        used = set(re.findall(r"\$\{[A-Z][A-Z_]*\}", body)) | {p for p in ("run-id", "model-version") if p in body}
        listed = set(re.findall(r"^#   (\S+):", header, flags=re.M))
        assert listed == used, path.name
        headers[path.name] = sorted(listed)
    assert headers["tfjob-tfpipe-train-run-id.yaml"] == [
        "${BEST_DROPOUT}",
        "${BEST_HIDDEN_UNITS}",
        "${BEST_LEARNING_RATE}",
        "${RUN_ID}",
        "run-id",
    ]
    assert headers["inferenceservice-tfpipe-model.yaml"] == ["${MODEL_VERSION}", "model-version", "run-id"]
    assert headers["role-tfpipe-engines.yaml"] == []


def test_a_study_katib_cannot_run_is_refused_in_one_line(tmp_path):
    config_file = tmp_path / "tfpipe.yaml"
    study = {
        "parameters": [
            {"parameter_id": "learning_rate", "type": "double", "min": 0.001, "max": 0.1, "scale": "reverse_log"}
        ]
    }
    config_file.write_text(yaml.safe_dump({"study": study}))
    result = CliRunner().invoke(
        cli, ["render", "--target", "kubeflow", "--config", str(config_file), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: platform.kubeflow.tuning is katib, but ")
    assert len(result.output.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_rendered_job_without_its_security_settings_has_its_pod_refused_as_the_api_server_refuses_it(tmp_path):
    render(tmp_path, {})
    job = yaml.safe_load((tmp_path / "rendered" / "job-tfpipe-volume-permissions.yaml").read_text())
    del job["spec"]["template"]["spec"]["securityContext"]
    assert denials(job) == [
        'pods "tfpipe-volume-permissions-pod" is forbidden: violates PodSecurity "restricted:latest": '
        'runAsNonRoot != true (pod or container "check" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "check" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")'
    ]


def test_the_namespace_objects_follow_the_configs_namespace_claim_image_and_service_accounts(tmp_path):
    config = {
        "platform": {
            "components_image": "example.com/tfpipe/components:1",
            "kfp_service_account": "ml-runner",
            "kubeflow": {
                "namespace": "ml",
                "service_account": "ml-workloads",
                "volume": {"claim_name": "ml-data", "mount_path": "/data"},
            },
        },
        "parameters": {"model_repository": "/data/model-repository"},
    }
    paths, _ = render(tmp_path, config)
    bodies = {p.name: yaml.safe_load(p.read_text()) for p in paths}
    assert {b["metadata"]["namespace"] for b in bodies.values()} == {"ml"}
    for binding in ("rolebinding-tfpipe-engines.yaml", "rolebinding-tfpipe-kfp-runner.yaml"):
        assert bodies[binding]["subjects"] == [{"kind": "ServiceAccount", "name": "ml-runner", "namespace": "ml"}]
    assert "serviceaccount-ml-runner.yaml" in bodies and "serviceaccount-ml-workloads.yaml" in bodies
    assert bodies["persistentvolumeclaim-ml-data.yaml"]["metadata"]["name"] == "ml-data"
    pod = bodies["job-tfpipe-volume-permissions.yaml"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": "ml-data"}}]
    (container,) = pod["containers"]
    assert container["image"] == "example.com/tfpipe/components:1"
    assert container["volumeMounts"] == [{"name": "tfpipe-data", "mountPath": "/data"}]
    assert container["command"][-1] == "import tempfile; tempfile.TemporaryFile(dir='/data').close()"
    predictor = bodies["inferenceservice-tfpipe-model.yaml"]["spec"]["predictor"]
    assert predictor["serviceAccountName"] == "ml-workloads"
    assert predictor["containers"][0]["env"][0] == {
        "name": "STORAGE_URI",
        "value": "pvc://ml-data/model-repository/tfpipe-model/${MODEL_VERSION}",
    }


@pytest.mark.parametrize(
    "training, files",
    [
        ("tfjob", ["tfjob-tfpipe-train-run-id.yaml"]),
        ("trainjob", ["trainingruntime-tfpipe-tensorflow-distributed.yaml", "trainjob-tfpipe-train-run-id.yaml"]),
        ("pod", []),
    ],
)
def test_the_training_objects_are_those_of_the_configured_engine(tmp_path, training, files):
    paths, _ = render(tmp_path, {"platform": {"kubeflow": {"training": training}}})
    assert [p.name for p in paths] == files + DEFAULT_FILES[3:]


def test_a_warm_started_study_renders_the_training_starting_from_the_kept_checkpoint(tmp_path):
    paths, _ = render(tmp_path, {"study": {"warm_start": True}})
    bodies = {p.name: yaml.safe_load(p.read_text()) for p in paths}
    chief = bodies["tfjob-tfpipe-train-run-id.yaml"]["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    trainer = bodies["trainjob-tfpipe-train-run-id.yaml"]["spec"]["trainer"]
    for args in (chief["containers"][0]["args"], trainer["args"]):
        assert args[-4:] == [
            "--warm-start-from",
            "/mnt/tfpipe/runs/${RUN_ID}/tune-hyperparameters/best-checkpoint",
            "--epochs",
            "15",
        ]


def test_the_trainer_section_reaches_the_rendered_jobs_and_trials(tmp_path):
    """The model, its fixed hyperparameter values and the mixed-precision policy in every rendered trainer's args;
    the studied hyperparameter as the best trial's placeholder in the training's."""
    config = {
        "trainer": {
            "model": "tests.helpers.custom_model:build_small_cnn",
            "mixed_precision": "mixed_bfloat16",
            "hyperparameters": {"filters": 4, "optimizer": "sgd"},
        },
        "study": {"parameters": [{"parameter_id": "conv_blocks", "type": "integer", "min": 1, "max": 2}]},
    }
    paths, _ = render(tmp_path, config)
    bodies = {p.name: yaml.safe_load(p.read_text()) for p in paths}
    setup = [
        "--model",
        "tests.helpers.custom_model:build_small_cnn",
        "--mixed-precision",
        "mixed_bfloat16",
        "--filters",
        "4",
        "--optimizer",
        "sgd",
    ]
    chief = bodies["tfjob-tfpipe-train-run-id.yaml"]["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    trainer = bodies["trainjob-tfpipe-train-run-id.yaml"]["spec"]["trainer"]
    for args in (chief["containers"][0]["args"], trainer["args"]):
        assert args[4:] == [
            *setup,
            "--batch-size",
            "32",
            "--learning-rate",
            "0.003",
            "--conv-blocks",
            "${BEST_CONV_BLOCKS}",
            "--epochs",
            "15",
        ]
    trial = bodies["experiment-tfpipe-tune-run-id.yaml"]["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]
    assert trial["spec"]["containers"][0]["args"][2:10] == setup
