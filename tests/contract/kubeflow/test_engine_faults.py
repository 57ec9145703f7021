"""The TFJob and Katib steps against a Kubernetes API double that fails at a seeded rate, as an API server under
load does (429 with Retry-After, 500, 503, a connection reset before or after the request is handled): each step
ends as it would against a server that never fails (one object; the TFJob kept for its logs, the Experiment deleted
once its best trial is read), every retry logged."""

import pytest

from components.lib.kube import api as kube
from components.lib.study.spec import DEFAULT_STUDY
from components.train_model_on_operator import run_tfjob
from tests.contract.kubeflow import test_train_model_on_operator as tfjobs, test_tune_on_katib as katib
from tests.doubles.k8s import KubeAPI
from tests.helpers.kubeflow_components import EXPERIMENTS

SEEDS = range(5)
POLLS = 10  # reads of a running object before it ends
RATE = 0.4  # the 429s ask for no wait (`retry_after=0`): the client's urllib3 waits out what the server names


def retried(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("Kubernetes API: ")]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_tfjob_step_succeeds_through_an_api_server_that_fails_two_requests_in_five(seed):
    api = KubeAPI(installed=dict(tfjobs.TFJOBS), fault_rate=RATE, fault_seed=seed, retry_after=0)
    try:
        api.scripts["tfjobs"] = [
            {"conditions": [tfjobs.CREATED]},
            *[{"conditions": [tfjobs.CREATED, tfjobs.RUNNING]}] * POLLS,
            {"conditions": [tfjobs.CREATED, tfjobs.RUNNING, tfjobs.SUCCEEDED]},
        ]
        lines: list[str] = []
        done = run_tfjob(kube.api_client(api.url), tfjobs.job(), poll_seconds=0, log=lines.append, sleep=lambda s: None)
        assert kube.condition(done, "Succeeded")
        assert [key[3] for key in api.objects if key[2] == "tfjobs"] == ["tfpipe-train-abc"]
        assert not [r for r in api.calls("DELETE") if r.fault is None]
        assert any(r.fault for r in api.requests)
        assert "TFJob ml/tfpipe-train-abc: Succeeded=True (TFJobSucceeded): TFJob ml/x successfully completed." in lines
        assert all("retrying in" in line for line in retried(lines))
    finally:
        api.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_katib_step_finds_the_best_trial_through_an_api_server_that_fails_two_requests_in_five(seed):
    api = KubeAPI(installed=dict(EXPERIMENTS), fault_rate=RATE, fault_seed=seed, retry_after=0)
    try:
        api.scripts["experiments"] = [
            *[{"conditions": [katib.CREATED, katib.RUNNING], "trials": 2, "trialsRunning": 2}] * POLLS,
            {
                "conditions": [katib.CREATED, katib.RUNNING, katib.SUCCEEDED],
                "trials": 4,
                "trialsSucceeded": 4,
                "currentOptimalTrial": katib.OPTIMAL,
            },
        ]
        lines: list[str] = []
        best = katib.run_experiment(
            kube.api_client(api.url),
            katib.build(),
            DEFAULT_STUDY,
            poll_seconds=0,
            log=lines.append,
            sleep=lambda s: None,
        )
        assert (best["trial"], best["metric"]) == ("tfpipe-tune-abc-x7k2", 0.93)
        assert [r.path for r in api.calls("POST") if r.fault is None][-1:] == [
            "/apis/kubeflow.org/v1beta1/namespaces/ml/experiments"
        ]
        # one Experiment, deleted once its best trial was read (a retried delete meets 404: gone already)
        deletes = {r.path for r in api.calls("DELETE")}
        assert deletes == {"/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/tfpipe-tune-abc"}
        assert any(r.fault for r in api.requests)
        assert all("retrying in" in line for line in retried(lines))
    finally:
        api.close()
