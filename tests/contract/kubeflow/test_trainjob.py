"""Kubeflow Trainer v2 (v2.3.0): the TrainJob of a run and the shipped TrainingRuntime pass the vendored CRD schemas
and CEL rules through the API double (tests/doubles/k8s), which refuses what the API server refuses."""

import json
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from components.lib.kube import api as kube, trainjob as tj
from pipelines.config.parameters import PipelineParameters
from tests.doubles.k8s import KubeAPI

ROOT = Path(__file__).resolve().parents[3]
RUNTIME_DIR = ROOT / "manifests" / "kubeflow" / "trainer-v2"
INSTALLED = {
    "trainer.kubeflow.org/v1alpha1": {
        "trainjobs": "TrainJob",
        "trainingruntimes": "TrainingRuntime",
        "clustertrainingruntimes": "ClusterTrainingRuntime",
    }
}
PREFIX = "/apis/trainer.kubeflow.org/v1alpha1"
RESOURCES = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
LABELS = {"app.kubernetes.io/managed-by": "tfpipe", "tfpipe/run-id": "run-1", "tfpipe/step": "train-model"}


@pytest.fixture
def api():
    server = KubeAPI(installed=dict(INSTALLED))
    yield server
    server.close()


def shipped_runtime() -> dict:
    return yaml.safe_load((RUNTIME_DIR / "trainingruntime.yaml").read_text())


def run_job(name="tfpipe-train-0123456789", workers=3, **changes) -> dict:
    args = dict(
        name=name,
        namespace="ml",
        image="example.com/tfpipe/trainer:abc",
        workers=workers,
        args=["--epochs=2", "--data-dir=/mnt/tfpipe/runs/run-1/dataset"],
        env={"AIP_MODEL_DIR": "/mnt/tfpipe/runs/run-1/train-model/model", "PYTHONUNBUFFERED": "1"},
        resources=RESOURCES,
        claim_name="tfpipe",
        mount_path="/mnt/tfpipe",
        service_account="tfpipe-workloads",
        timeout_seconds=3600,
        labels=LABELS,
    )
    return tj.trainjob(**{**args, **changes})


def objects(server):
    return kube.custom(kube.api_client(server.url))


def create(server, body: dict, plural: str, ns: str | None = "ml") -> dict:
    if ns is None:
        return objects(server).create_cluster_custom_object(tj.GROUP, tj.VERSION, plural, body)
    return objects(server).create_namespaced_custom_object(tj.GROUP, tj.VERSION, ns, plural, body)


def refused(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as e:
        call()
    return e.value.status, json.loads(e.value.body)["message"]


def test_the_trainjob_of_a_run_is_created_as_the_schema_admits(api):
    create(api, shipped_runtime(), "trainingruntimes")
    job = run_job()
    created = create(api, job, "trainjobs")
    (request,) = api.calls("POST", "trainjobs")
    assert (request.path, request.body) == (f"{PREFIX}/namespaces/ml/trainjobs", job)
    assert created["metadata"]["generation"] == 1
    spec = created["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": tj.RUNTIME}
    assert spec["trainer"] == {
        "image": "example.com/tfpipe/trainer:abc",
        "args": ["--epochs=2", "--data-dir=/mnt/tfpipe/runs/run-1/dataset"],
        "env": [
            {"name": "AIP_MODEL_DIR", "value": "/mnt/tfpipe/runs/run-1/train-model/model"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "TFPIPE_NUM_WORKERS", "value": "3"},
        ],
        "numNodes": 3,
        "resourcesPerNode": RESOURCES,
    }
    assert spec["activeDeadlineSeconds"] == 3600
    (patch,) = spec["runtimePatches"]
    (replicated_job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert (patch["manager"], replicated_job["name"]) == ("tfpipe", "node")
    assert replicated_job["template"]["spec"]["template"] == {
        "metadata": {"labels": LABELS},
        "spec": {
            "volumes": [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": "tfpipe"}}],
            "containers": [{"name": "node", "volumeMounts": [{"name": "tfpipe-data", "mountPath": "/mnt/tfpipe"}]}],
            "serviceAccountName": "tfpipe-workloads",
        },
    }


def test_without_a_claim_a_timeout_or_resources_the_trainjob_leaves_them_out(api):
    create(api, shipped_runtime(), "trainingruntimes")
    created = create(api, run_job(claim_name="", timeout_seconds=0, resources={}, service_account=""), "trainjobs")
    assert "activeDeadlineSeconds" not in created["spec"] and "resourcesPerNode" not in created["spec"]["trainer"]
    (patch,) = created["spec"]["runtimePatches"]
    assert patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] == {
        "metadata": {"labels": LABELS},
        "spec": {},
    }


def test_a_trainjob_needs_a_worker():
    with pytest.raises(ValueError, match=r"^workers must be >= 1, got 0$"):
        run_job(workers=0)


def test_the_shipped_runtime_is_the_builders_for_the_default_max_restarts():
    default = PipelineParameters.model_fields["max_restarts"].default
    assert shipped_runtime() == tj.training_runtime(default)
    kustomization = yaml.safe_load((RUNTIME_DIR / "kustomization.yaml").read_text())
    assert (kustomization["namespace"], kustomization["resources"]) == ("kubeflow", ["trainingruntime.yaml"])


def test_the_shipped_runtime_passes_the_schemas_namespaced_and_cluster_wide(api):
    runtime = shipped_runtime()
    created = create(api, runtime, "trainingruntimes", ns="kubeflow")
    assert created["spec"] == runtime["spec"]
    cluster = {**runtime, "kind": "ClusterTrainingRuntime"}
    assert create(api, cluster, "clustertrainingruntimes", ns=None)["kind"] == "ClusterTrainingRuntime"
    assert [(r.method, r.path) for r in api.requests] == [
        ("POST", f"{PREFIX}/namespaces/kubeflow/trainingruntimes"),
        ("POST", f"{PREFIX}/clustertrainingruntimes"),
    ]


def test_the_runtime_runs_one_indexed_job_of_workers_that_derive_tf_config():
    (replicated_job,) = tj.training_runtime()["spec"]["template"]["spec"]["replicatedJobs"]
    job = replicated_job["template"]["spec"]
    assert replicated_job["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    assert (job["completionMode"], job["backoffLimit"], job["template"]["spec"]["restartPolicy"]) == (
        "Indexed",
        0,
        "Never",
    )
    (container,) = job["template"]["spec"]["containers"]
    assert container["name"] == "node" and container["ports"] == [{"name": "tf-worker", "containerPort": 2222}]
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]} == {
        "TFPIPE_JOBSET_NAME": "metadata.annotations['jobset.sigs.k8s.io/jobset-name']",
        "TFPIPE_REPLICATED_JOB": "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']",
        "TFPIPE_JOB_INDEX": "metadata.annotations['jobset.sigs.k8s.io/job-index']",
    }
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == list(range(1, 128))


@pytest.mark.parametrize("max_restarts", [0, 5])
def test_max_restarts_is_the_jobsets_restart_limit_and_a_trainer_error_fails_it(max_restarts):
    policy = tj.training_runtime(max_restarts)["spec"]["template"]["spec"]["failurePolicy"]
    assert policy == {
        "maxRestarts": max_restarts,
        "rules": [{"name": "trainer-error", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
    }


def test_negative_max_restarts_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^max_restarts must be >= 0, got -1$"):
        tj.training_runtime(-1)


def with_spec(obj: dict, path: list[str], value) -> dict:
    obj = json.loads(json.dumps(obj))
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    "body, plural, message",
    [
        (  # v2.2's API, replaced by runtimePatches in v2.3
            with_spec(run_job(), ["spec", "podTemplateOverrides"], []),
            "trainjobs",
            'TrainJob.trainer.kubeflow.org "tfpipe-train-0123456789" is invalid: spec: unknown field '
            "'podTemplateOverrides' (not in the schema)",
        ),
        (
            with_spec(run_job(), ["spec", "trainer", "numNodes"], "3"),
            "trainjobs",
            "spec.trainer.numNodes: '3' is not of type 'integer'",
        ),
        (  # Trainer v2 has no TensorFlow policy
            with_spec(shipped_runtime(), ["spec", "mlPolicy", "tensorflow"], {}),
            "trainingruntimes",
            "spec.mlPolicy: unknown field 'tensorflow' (not in the schema)",
        ),
        (
            with_spec(
                shipped_runtime(), ["spec", "template", "spec", "failurePolicy", "rules"], [{"action": "FailJobSet"}]
            ),
            "trainingruntimes",
            "spec.template.spec.failurePolicy.rules[0]: 'name' is a required property",
        ),
    ],
)
def test_what_the_schemas_refuse(api, body, plural, message):
    code, text = refused(lambda: create(api, body, plural))
    assert code == 422 and message in text, text


def test_the_crds_cel_rules_refuse_a_bad_name_two_policies_and_changes_to_immutable_fields(api):
    code, text = refused(lambda: create(api, run_job(name="1train"), "trainjobs"))
    assert code == 403 and text.endswith(
        '<root>: Invalid value: "object": metadata.name must match RFC 1035 DNS label format'
    )
    runtime = shipped_runtime()
    two = with_spec(runtime, ["spec", "mlPolicy", "jax"], {})
    two["spec"]["mlPolicy"]["torch"] = {}
    code, text = refused(lambda: create(api, two, "trainingruntimes"))
    assert code == 403 and text.endswith(
        'spec.mlPolicy: Invalid value: "object": Only one of the policy can be configured'
    )
    runtime = create(api, runtime, "trainingruntimes")
    job = create(api, run_job(), "trainjobs")
    job["spec"]["trainer"]["numNodes"] = 4
    code, text = refused(
        lambda: objects(api).replace_namespaced_custom_object(
            tj.GROUP, tj.VERSION, "ml", "trainjobs", job["metadata"]["name"], job
        )
    )
    assert code == 403 and text.endswith('spec.trainer: Invalid value: "object": field is immutable')
    runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] = 3
    code, text = refused(
        lambda: objects(api).replace_namespaced_custom_object(
            tj.GROUP, tj.VERSION, "ml", "trainingruntimes", tj.RUNTIME, runtime
        )
    )
    assert code == 403 and text.endswith(
        'spec.template.spec.failurePolicy: Invalid value: "object": Value is immutable'
    )
