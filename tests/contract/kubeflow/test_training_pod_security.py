"""A training job whose pods Pod Security `restricted` refuses, on the operators' doubles under the shipped Role: the
API server admits the TFJob or TrainJob (it judges pods, not the objects holding their templates), refuses each pod
its controller creates, and the controller records the refusal as an event (nothing in the job's or its pods'
status shows it); the step fails in one line quoting the refusal and deletes the job, instead of waiting for its
deadline."""

import re

import pytest

from components.lib.kube import api as kube, trainjob as tj
from components.train_model_on_operator import PodsRefused, run_tfjob, run_trainjob, tfjob
from tests.doubles.k8s import KubeAPI, shipped_rules
from tests.doubles.k8s.admission import ENFORCE
from tests.doubles.k8s.kubelet import Claim, Kubelet
from tests.doubles.k8s.trainer_controller import TrainerController
from tests.doubles.k8s.training_operator import TrainingOperator

IMAGE = "example.com/trainer:1"
NO_NON_ROOT = 'runAsNonRoot != true (pod or container "{}" must set securityContext.runAsNonRoot=true)'
TFJOBS = {"kubeflow.org/v1": {"tfjobs": "TFJob"}}
TRAINER = {"trainer.kubeflow.org/v1alpha1": {"trainjobs": "TrainJob", "trainingruntimes": "TrainingRuntime"}}


def cluster(installed: dict, controller) -> KubeAPI:
    return KubeAPI(
        installed=dict(installed),
        controllers=[controller],
        namespaces={"ml": {ENFORCE: "restricted"}},
        rbac=shipped_rules(),
    )


@pytest.fixture
def kubelet(tmp_path):
    return Kubelet({"tfpipe": Claim(str(tmp_path))}, {IMAGE: "trainer.Dockerfile"})


def test_a_tfjob_whose_pods_restricted_refuses_fails_the_step_in_one_line_and_is_deleted(kubelet):
    api = cluster(TFJOBS, TrainingOperator(kubelet))
    job = tfjob("t", "ml", IMAGE, 2, [], {}, {}, "tfpipe", "/mnt/tfpipe")
    del job.spec.tf_replica_specs["Chief"].template.spec.security_context["runAsNonRoot"]  # the replicas' template
    lines: list[str] = []
    try:
        with pytest.raises(PodsRefused) as refused:
            run_tfjob(
                kube.api_client(api.url), job, poll_seconds=0, timeout_seconds=5, log=lines.append, sleep=lambda s: None
            )
        assert str(refused.value) == (
            "TFJob ml/t cannot run: the API server refuses its pods: TFJob ml/t (FailedCreatePod): Error creating: "
            f'pods "t-chief-0" is forbidden: violates PodSecurity "restricted:latest": {NO_NON_ROOT.format("tensorflow")}'
        )
        assert lines == ["created TFJob ml/t: 1 chief + 1 worker(s) of example.com/trainer:1", "deleted TFJob ml/t"]
        tfjobs = "/apis/kubeflow.org/v1/namespaces/ml/tfjobs"
        assert [(r.method, r.path, r.query, r.fault) for r in api.requests] == [
            ("GET", "/apis/kubeflow.org/v1", {}, None),
            ("POST", tfjobs, {}, None),
            ("GET", f"{tfjobs}/t", {}, None),
            (
                "GET",
                "/api/v1/namespaces/ml/events",
                {"fieldSelector": ["involvedObject.kind=TFJob,involvedObject.name=t,reason=FailedCreatePod"]},
                None,
            ),
            ("DELETE", f"{tfjobs}/t", {}, None),
        ]
        assert api.pods == []
        assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["count"]) for e in api.events] == [
            ("TFJob", "t", 1)
        ]
    finally:
        api.close()


def test_a_trainjob_whose_pods_restricted_refuses_fails_the_step_in_one_line_and_is_deleted(kubelet):
    api = cluster(TRAINER, TrainerController(kubelet))
    runtime = tj.training_runtime(2)
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    del node["securityContext"]["runAsNonRoot"]
    api.put(tj.API_VERSION, "ml", tj.RUNTIME_PLURAL, runtime)
    body = tj.trainjob("tj", "ml", IMAGE, 2, [], {}, {}, "tfpipe", "/mnt/tfpipe")
    lines: list[str] = []
    try:
        with pytest.raises(PodsRefused) as refused:
            run_trainjob(
                kube.api_client(api.url),
                body,
                2,
                poll_seconds=0,
                timeout_seconds=5,
                log=lines.append,
                sleep=lambda s: None,
            )
        assert re.fullmatch(
            r"TrainJob ml/tj cannot run: the API server refuses its pods: Job ml/tj-node-0 \(FailedCreate\): "
            r'Error creating: pods "tj-node-0-0-[0-9a-f]{5}" is forbidden: violates PodSecurity "restricted:latest": '
            + re.escape(NO_NON_ROOT.format("node")),
            str(refused.value),
        )
        assert lines == ["created TrainJob ml/tj: 2 worker(s) of example.com/trainer:1", "deleted TrainJob ml/tj"]
        trainjobs = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs"
        assert [(r.method, r.path, r.query, r.fault) for r in api.requests] == [
            ("GET", "/apis/trainer.kubeflow.org/v1alpha1", {}, None),
            ("GET", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainingruntimes/{tj.RUNTIME}", {}, None),
            ("POST", trainjobs, {}, None),
            ("GET", f"{trainjobs}/tj", {}, None),
            (
                "GET",
                "/api/v1/namespaces/ml/events",
                {"fieldSelector": ["involvedObject.kind=Job,involvedObject.name=tj-node-0,reason=FailedCreate"]},
                None,
            ),
            ("DELETE", f"{trainjobs}/tj", {}, None),
        ]
        assert api.pods == []
        assert [(e["involvedObject"]["name"], e["reason"]) for e in api.events] == [
            ("tj-node-0", "FailedCreate"),
            ("tj-node-0", "FailedCreate"),
        ]
    finally:
        api.close()
