"""Pod Security Standards' `restricted` profile, as a full Kubeflow platform enforces it in its namespaces: the double
refuses a pod without the settings with the API server's message (as its operators create the pods:
test_training_pod_security.py, and the trial pods below), the TFJob, Katib trial template and KServe
predictor the steps create pass it, and the serving step refuses a namespace labelled `control-plane` (KServe's pod
mutator skips those) in one line."""

import re

import numpy as np
import pytest

from components.deploy_model_on_kserve import deploy_to_kserve, predictor
from components.lib.deploy.smoke import SmokeCheck
from components.lib.kube import api as kube
from components.lib.study.spec import DEFAULT_STUDY
from components.train_model_on_operator import as_dict, run_tfjob, tfjob
from components.tune_on_katib import TrialPodsRefused, experiment, run_experiment
from tests.doubles.k8s import KubeAPI, shipped_rules
from tests.doubles.k8s.admission import ENFORCE, pod_security_denial
from tests.doubles.k8s.katib import INJECTION
from tests.doubles.k8s.kserve_operator import KServeOperator, process_pods
from tests.doubles.k8s.network import Network
from tests.doubles.k8s.pods import FakePod
from tests.helpers.kubeflow_components import EXPERIMENTS, KSERVE

RESTRICTED = {ENFORCE: "restricted"}
TFJOBS = {"kubeflow.org/v1": {"tfjobs": "TFJob"}}
DONE = {
    "type": "Succeeded",
    "status": "True",
    "reason": "TFJobSucceeded",
    "message": "TFJob ml/t successfully completed.",
}
NOTHING_SET = (
    'allowPrivilegeEscalation != false (container "tensorflow" must set securityContext.allowPrivilegeEscalation=false), '
    'unrestricted capabilities (container "tensorflow" must set securityContext.capabilities.drop=["ALL"]), '
    'runAsNonRoot != true (pod or container "tensorflow" must set securityContext.runAsNonRoot=true), '
    'seccompProfile (pod or container "tensorflow" must set securityContext.seccompProfile.type to "RuntimeDefault" '
    'or "Localhost")'
)


def train_job(**overrides):
    values = dict(
        name="t",
        namespace="ml",
        image="example.com/trainer:1",
        workers=2,
        args=[],
        env={},
        resources={},
        claim_name="tfpipe",
        mount_path="/mnt/tfpipe",
    )
    return tfjob(**{**values, **overrides})


@pytest.fixture
def restricted_api():
    server = KubeAPI(installed={**TFJOBS, **EXPERIMENTS}, namespaces={"ml": {**RESTRICTED, INJECTION: "enabled"}})
    yield server
    server.close()


def test_the_profiles_other_checks_and_several_containers_are_named_as_the_api_server_names_them():
    spec = {
        "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "seccompProfile": {"type": "Unconfined"}},
        "containers": [
            {"name": "a", "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}},
            {"name": "b", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}},
        ],
    }
    labels = {**RESTRICTED, "pod-security.kubernetes.io/enforce-version": "v1.32"}
    assert pod_security_denial("p", spec, labels) == (
        'pods "p" is forbidden: violates PodSecurity "restricted:v1.32": '
        'allowPrivilegeEscalation != false (container "a" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add), '
        "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false; "
        'pod or containers "a", "b" must set securityContext.runAsNonRoot=true), '
        "runAsUser=0 (pod must not set runAsUser=0), "
        'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined"; '
        'pod or containers "a", "b" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    assert pod_security_denial("p", spec, {ENFORCE: "baseline"}) == ""


def test_the_training_steps_tfjob_passes_restricted_admission(restricted_api):
    restricted_api.scripts["tfjobs"] = [{"conditions": [DONE]}]
    lines = []
    run_tfjob(kube.api_client(restricted_api.url), train_job(), poll_seconds=0, log=lines.append, sleep=lambda s: None)
    assert restricted_api.created("tfjobs") == [as_dict(train_job())]
    assert lines == [
        "created TFJob ml/t: 1 chief + 1 worker(s) of example.com/trainer:1",
        "TFJob ml/t: Succeeded=True (TFJobSucceeded): TFJob ml/t successfully completed.",
    ]


def test_the_tuning_steps_trial_template_passes_restricted_admission(restricted_api):
    body = experiment(
        name="e",
        namespace="ml",
        spec=DEFAULT_STUDY,
        image="example.com/trainer:1",
        fixed_args=[],
        trials_dir="/mnt/tfpipe/trials",
        resources={},
        claim_name="tfpipe",
        mount_path="/mnt/tfpipe",
    )
    optimal = {
        "bestTrialName": "e-x7k2",
        "parameterAssignments": [
            {"name": "learning_rate", "value": "0.0042"},
            {"name": "hidden_units", "value": "96"},
            {"name": "dropout", "value": "0.1"},
        ],
        "observation": {"metrics": [{"name": "accuracy", "latest": "0.93", "max": "0.95", "min": "0.61"}]},
    }
    succeeded = {"type": "Succeeded", "status": "True", "reason": "ExperimentMaxTrialsReached", "message": "done"}
    restricted_api.scripts["experiments"] = [{"conditions": [succeeded], "currentOptimalTrial": optimal}]
    best = run_experiment(
        kube.api_client(restricted_api.url),
        body,
        DEFAULT_STUDY,
        poll_seconds=0,
        log=lambda m: None,
        sleep=lambda s: None,
    )
    assert best["trial"] == "e-x7k2"
    assert restricted_api.created("experiments") == [body]
    trial_pod = body["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]
    assert pod_security_denial("e-trial", trial_pod, RESTRICTED) == ""  # Katib's trial pods: see the next test


def test_a_trial_pod_that_violates_restricted_leaves_its_job_without_a_pod_and_fails_the_study_in_one_line(
    monkeypatch, tmp_path
):
    """The API server admits an Experiment whatever its trial template; it refuses each trial pod the Job controller
    creates, which records FailedCreate with the refusal: the trials never start, and the step fails quoting the
    refusal and deletes the Experiment (test_tuning_pod_security.py: its requests)."""
    from tests.doubles.k8s.kubelet import Claim, Kubelet
    from tests.helpers.kubeflow_components import SMALL_STUDY, katib_api

    kubelet = Kubelet({"tfpipe": Claim(str(tmp_path))}, {"tfpipe/trainer:dev": "trainer.Dockerfile"})
    api, operator = katib_api(kubelet, monkeypatch, tmp_path / "home", RESTRICTED)
    try:
        body = experiment("e", "ml", SMALL_STUDY, "tfpipe/trainer:dev", [], f"{tmp_path}/trials", {}, "", "")
        pod = body["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]
        del pod["securityContext"], pod["containers"][0]["securityContext"]
        lines: list[str] = []
        with pytest.raises(TrialPodsRefused) as refused:
            run_experiment(kube.api_client(api.url), body, SMALL_STUDY, 0.05, 5, lines.append)
        violations = re.escape(NOTHING_SET.replace("tensorflow", "training-container"))
        events = [
            re.fullmatch(
                r'Job ml/(e-[a-z0-9]{8}): FailedCreate: Error creating: pods "\1-[a-z0-9]{5}" is forbidden: '
                rf'violates PodSecurity "restricted:latest": {violations}',
                event,
            )
            for event in operator.events
        ]
        assert len(events) == 2 and all(events) and api.pods == []
        first = min(e[1] for e in events)
        assert str(refused.value) == (
            f"Experiment ml/e cannot run: the API server refuses its trials' pods: Job ml/{first} (FailedCreate): "
            + next(e[0].split(": FailedCreate: ", 1)[1] for e in events if e[1] == first)
        )
        assert lines[-2:] == [
            "Experiment ml/e: 2 trial(s): 0 succeeded, 0 failed, 2 running",
            "deleted Experiment ml/e (and its trials)",
        ]
        assert [r.path for r in api.calls("DELETE")] == ["/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/e"]
    finally:
        api.close()


def serving_api(namespaces: dict, rbac: list) -> tuple[KubeAPI, Network]:
    network = Network()
    operator = KServeOperator(network, lambda isvc, revision, spec: FakePod(lambda rows: [0] * len(rows)))
    return KubeAPI(installed=dict(KSERVE), controllers=[operator], rbac=rbac, namespaces=namespaces), network


def deploy(api: KubeAPI, lines: list):
    spec = predictor("pvc://tfpipe/m/d/1", "d", "example.com/serving:1", {}, 1, 1)
    return deploy_to_kserve(
        kube.api_client(api.url),
        name="d",
        namespace="ml",
        spec_predictor=spec,
        traffic_percentage=100,
        model_name="d",
        checks=[SmokeCheck("serving_default", np.zeros((1, 1), np.float32), np.zeros(1, np.int64))],
        poll_seconds=0.02,
        timeout_seconds=20,
        log=lines.append,
    )


def test_the_serving_steps_predictor_passes_restricted_admission(monkeypatch):
    api, network = serving_api({"ml": RESTRICTED}, shipped_rules())
    for key, value in network.environ().items():
        monkeypatch.setenv(key, value)
    try:
        lines: list = []
        info = deploy(api, lines)
        assert info["revision"] == "d-predictor-00001"
        assert lines[0] == "created InferenceService ml/d"
    finally:
        api.close()
        network.close()


def test_a_control_plane_namespace_is_refused_in_one_line_before_anything_is_created():
    api, network = serving_api({"ml": {"control-plane": "kubeflow", **RESTRICTED}}, shipped_rules())
    try:
        with pytest.raises(ValueError) as refused:
            deploy(api, [])
        assert str(refused.value) == (
            "KServe cannot serve in the namespace ml: it is labelled control-plane=kubeflow, and KServe's pod "
            "mutator skips such namespaces (the model is never mounted); set platform.kubeflow.namespace to a "
            "profile namespace"
        )
        assert [(r.method, r.path) for r in api.requests] == [
            ("GET", "/apis/serving.kserve.io/v1beta1"),
            ("GET", "/api/v1/namespaces/ml"),
        ]
    finally:
        api.close()
        network.close()


def test_kserves_pod_mutator_mounts_no_model_in_a_control_plane_namespace(tmp_path):
    start = process_pods(
        {"tfpipe": str(tmp_path)},
        {"example.com/serving:1": "serving.Dockerfile"},
        namespaces={"kubeflow": {"control-plane": "kubeflow"}, "ml": {}},
    )
    spec = predictor("pvc://tfpipe/m/d/1", "d", "example.com/serving:1", {}, 1, 1)
    mounted = start({"metadata": {"namespace": "ml"}}, "d-predictor-00001", spec)
    skipped = start({"metadata": {"namespace": "kubeflow"}}, "d-predictor-00001", spec)
    try:
        assert mounted.mounts == {"/mnt/models": f"{tmp_path}/m/d/1"}
        assert skipped.mounts == {}
    finally:
        mounted.stop()
        skipped.stop()
