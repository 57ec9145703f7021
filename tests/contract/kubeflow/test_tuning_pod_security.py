"""A Katib Experiment whose trial pods Pod Security `restricted` refuses, on Katib's double under the shipped Role: the
API server admits the Experiment (it judges pods, not templates), the Job controller records each refused trial
pod as a `FailedCreate` event on the trial's Job (the trial runs, its Job has no pod, nothing in the Experiment
shows it); the tuning step reads those events, fails in one line quoting the refusal and deletes the Experiment
(kept when `keep` says so), instead of waiting for its timeout."""

import re

import pytest

from components.lib.kube import api as kube
from components.tune_on_katib import TrialPodsRefused, experiment, run_experiment
from tests.doubles.k8s.admission import ENFORCE
from tests.doubles.k8s.kubelet import Claim, Kubelet
from tests.helpers.kubeflow_components import SMALL_STUDY, katib_api

IMAGE = "tfpipe/trainer:dev"
NO_NON_ROOT = 'runAsNonRoot != true (pod or container "training-container" must set securityContext.runAsNonRoot=true)'
EXPERIMENTS = "/apis/kubeflow.org/v1beta1/namespaces/ml/experiments"


@pytest.fixture
def restricted(monkeypatch, tmp_path):
    kubelet = Kubelet({"tfpipe": Claim(str(tmp_path))}, {IMAGE: "trainer.Dockerfile"})
    api, _ = katib_api(kubelet, monkeypatch, tmp_path / "home", {ENFORCE: "restricted"})
    yield api
    api.close()


def refused_body(tmp_path) -> dict:
    body = experiment("e", "ml", SMALL_STUDY, IMAGE, [], f"{tmp_path}/trials", {}, "", "")
    del body["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
    return body


def refuse(api, tmp_path, keep: bool) -> tuple[str, list[str], str]:
    """Run the refused study: the error's message, the step's lines, the first trial (by name)."""
    lines: list[str] = []
    with pytest.raises(TrialPodsRefused) as refused:
        run_experiment(
            kube.api_client(api.url),
            refused_body(tmp_path),
            SMALL_STUDY,
            poll_seconds=0,
            timeout_seconds=5,
            log=lines.append,
            sleep=lambda s: None,
            keep=keep,
        )
    trials = sorted(t["metadata"]["name"] for t in api.items("trials"))
    return str(refused.value), lines, trials[0] if trials else ""


def expected_requests(trial: str, end: list[tuple]) -> list[tuple]:
    return [
        ("GET", "/apis/kubeflow.org/v1beta1", {}),
        ("POST", EXPERIMENTS, {}),
        ("GET", f"{EXPERIMENTS}/e", {}),
        (
            "GET",
            "/api/v1/namespaces/ml/events",
            {"fieldSelector": [f"involvedObject.kind=Job,involvedObject.name={trial},reason=FailedCreate"]},
        ),
        *end,
    ]


def test_a_study_whose_trial_pods_restricted_refuses_fails_in_one_line_and_is_deleted(restricted, tmp_path):
    message, lines, trial = refuse(restricted, tmp_path, keep=False)
    assert re.fullmatch(
        rf"Experiment ml/e cannot run: the API server refuses its trials' pods: Job ml/{trial} \(FailedCreate\): "
        rf'Error creating: pods "{trial}-[a-z0-9]{{5}}" is forbidden: violates PodSecurity "restricted:latest": '
        + re.escape(NO_NON_ROOT),
        message,
    )
    assert lines == [
        "created Experiment ml/e: bayesianoptimization, up to 2 trials, 2 at a time",
        "warning: study parameter hidden_units: Katib's bayesianoptimization (scikit-optimize) searches integers "
        "uniformly from 32 to 256, not on the log scale the study asks (Vertex does); for a log search use algorithm "
        "random, or a discrete parameter of log-spaced values",
        "Experiment ml/e: Created=True (ExperimentCreated): Experiment is created",
        "Experiment ml/e: Running=True (ExperimentRunning): Experiment is running",
        "Experiment ml/e: 2 trial(s): 0 succeeded, 0 failed, 2 running",
        "deleted Experiment ml/e (and its trials)",
    ]
    assert [(r.method, r.path, r.query) for r in restricted.requests] == expected_requests(
        trial, [("DELETE", f"{EXPERIMENTS}/e", {})]
    )
    assert restricted.pods == []


def test_a_refused_study_is_kept_when_keep_experiment_says_so(restricted, tmp_path):
    message, lines, trial = refuse(restricted, tmp_path, keep=True)
    assert message.startswith(f"Experiment ml/e cannot run: the API server refuses its trials' pods: Job ml/{trial} ")
    assert lines[-1] == (
        "kept Experiment ml/e (platform.kubeflow.keep_experiment); delete it with kubectl delete experiment -n ml e"
    )
    assert [(r.method, r.path, r.query) for r in restricted.requests] == expected_requests(trial, [])
    assert [e["metadata"]["name"] for e in restricted.items("experiments")] == ["e"]
