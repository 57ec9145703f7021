"""A cancelled run (SIGTERM) of the serving step in KServe's Standard mode: during a rollout of the predictor's
Deployment (before 0.20) and during a 0.20 canary (spec.canary: a canary's, or a full rollout's before its
promotion), the version leaves the repository first, then the InferenceService is back on the previous version within
the grace period (tests/doubles/k8s/kserve_operator.py)."""

import os
import signal
import time

import pytest

from components.deploy_model_on_kserve import GRACE_SECONDS, version_discarder
from components.lib.deploy.model_repository import versions
from components.lib.kube import api as kube
from tests.contract.kubeflow import test_deploy_on_kserve_modes as modes
from tests.contract.kubeflow.test_deploy_model_on_kserve import _uri, classify, repository
from tests.doubles.k8s import KubeAPI, shipped_rules
from tests.doubles.k8s.kserve_operator import KServeOperator, cluster
from tests.doubles.k8s.network import Network
from tests.doubles.k8s.pods import FakePod

__all__ = ["repository"]  # the fixture
URI = modes.URI


@pytest.fixture
def standard(monkeypatch):
    """`(version, default_mode)` -> (the double, Standard mode unless the config map's `default_mode` says
    otherwise; {storage URI: seconds before its pod is ready})."""
    made, slow = [], {}

    def build(version, default_mode="Standard"):
        network = Network()
        operator = KServeOperator(
            network,
            lambda isvc, name, spec: FakePod(classify, "ok", slow.get(_uri(spec), 0.0)),
            version=version,
            default_mode=default_mode,
        )
        api = KubeAPI(controllers=[operator], rbac=shipped_rules(), **cluster(version, default_mode))
        for key, value in network.environ().items():
            monkeypatch.setenv(key, value)
        made.append((api, network))
        return api

    yield build, slow
    for api, network in made:
        api.close()
        network.close()


def deploy(api, version, traffic=100, **overrides):
    """test_deploy_on_kserve_modes's deploy, with time for a cancel to come first."""
    return modes.deploy(api, version, traffic, **{"timeout_seconds": 60, "log": lambda m: None, **overrides})


def cancel_version_2(api, repository, traffic):
    """Deploy version 2 with a fake clock (each wait advances it, and lets the double's controller tick once) and
    SIGTERM during the third wait; the step's lines, its waits, and when (in PATCH requests) the version left."""
    now, sleeps, lines, removed_at = [0.0], [], [], []

    def sleep(seconds):
        sleeps.append(seconds)
        now[0] += seconds
        time.sleep(api.tick_seconds * 2)
        if len(sleeps) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    remove = version_discarder(repository, "digits", 2, lines.append)

    def discard(reason):
        removed_at.append(len(api.calls("PATCH")))
        remove(reason)

    with pytest.raises(kube.Cancelled):
        deploy(api, 2, traffic, poll_seconds=5, log=lines.append, sleep=sleep, clock=lambda: now[0], discard=discard)
    return [line for line in lines if not line.startswith("InferenceService ml/digits: ")], sleeps, removed_at


def test_a_cancel_during_a_standard_mode_rollout_before_0_20_restores_the_previous_predictor_within_the_grace_period(
    standard, repository
):
    build, slow = standard
    api = build("0.16")
    deploy(api, 1)
    slow[URI.format(2)] = 60  # the new version's pod never gets ready in this test
    slow[URI.format(1)] = 60  # nor would a new pod of the previous one: its ReplicaSet's pod serves on
    lines, sleeps, removed_at = cancel_version_2(api, repository, 100)
    # gone before the rollback's patch (the first PATCH: the spec.canary this KServe refuses; the second: the rollout)
    assert versions(repository, "digits") == [1] and removed_at == [2]
    assert lines[-3:] == [
        "received SIGTERM: the run was cancelled",
        "removed version 2 from the model repository: the run was cancelled",
        "restored the previous predictor of InferenceService ml/digits (Deployment digits-predictor)",
    ]
    assert sum(sleeps[3:]) <= GRACE_SECONDS
    restore = api.calls("PATCH")[-1].body["spec"]["predictor"]
    assert _uri(restore) == URI.format(1)
    deployment = api.get("deployments", "digits-predictor", "ml")
    assert _uri(deployment["spec"]["template"]["spec"]) == URI.format(1)
    assert deployment["status"]["updatedReplicas"] == deployment["status"]["availableReplicas"] == 1


@pytest.mark.parametrize("traffic", [20, 100])
def test_a_cancel_during_a_0_20_canary_removes_the_canary_within_the_grace_period_the_stable_predictor_untouched(
    standard, repository, traffic
):
    build, slow = standard
    api = build("0.20")
    deploy(api, 1)
    slow[URI.format(2)] = 60
    before = api.get("inferenceservices", "digits", "ml")["spec"]["predictor"]
    stable = api.get("deployments", "digits-predictor", "ml")
    lines, sleeps, removed_at = cancel_version_2(api, repository, traffic)
    assert versions(repository, "digits") == [1] and removed_at == [1]
    assert lines[-3:] == [
        "received SIGTERM: the run was cancelled",
        "removed version 2 from the model repository: the run was cancelled",
        "removed the canary v2 from InferenceService ml/digits; its stable predictor served all along",
    ]
    assert sum(sleeps[3:]) <= GRACE_SECONDS
    assert [r.body for r in api.calls("PATCH")][-1] == {"spec": {"canary": None}}
    isvc = api.get("inferenceservices", "digits", "ml")
    assert "canary" not in isvc["spec"] and isvc["spec"]["predictor"] == before
    after = api.get("deployments", "digits-predictor", "ml")
    assert (after["spec"], after["metadata"]["generation"]) == (stable["spec"], stable["metadata"]["generation"])
    assert api.get("deployments", "digits-v2-predictor", "ml") is None
