"""Each target's `Delivery` (pipelines/delivery/) where the commands' tests (tests/contract/vertex/test_delivery.py) do not reach it:
where the calls go and the time zone a schedule's times are in."""

import pytest
from google.auth.credentials import AnonymousCredentials

from pipelines.config import Platform
from pipelines.cron import parse_cron
from pipelines.delivery import delivery_for
from pipelines.delivery.base import Connection, DeliveryError

WEEKLY, WEEKLY_IN_PARIS = parse_cron("0 3 * * 1"), parse_cron("TZ=Europe/Paris 0 3 * * 1")


def test_vertex_manages_schedules_without_a_pipeline_root_and_times_them_in_utc_by_default(monkeypatch):
    vertex = delivery_for("vertex")
    platform = Platform(project="acme-ml-prod")
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "acme-ml-prod"))
    assert vertex.connect(platform, None, None, running=False) == Connection(platform)
    with pytest.raises(DeliveryError, match=r"^platform.pipeline_root must be a gs:// URI on Vertex AI"):
        vertex.connect(platform, None, None, running=True)
    with pytest.raises(DeliveryError, match=r"^platform.project is required on Vertex AI"):
        vertex.connect(Platform(), None, None, running=False)
    vertex.check_cron(WEEKLY_IN_PARIS)  # a time zone is Vertex's to apply
    assert (vertex.time_zone(WEEKLY), vertex.time_zone(WEEKLY_IN_PARIS)) == ("UTC", "Europe/Paris")


def test_kubeflow_takes_the_endpoint_from_the_environment_and_the_namespace_from_the_config(monkeypatch):
    kubeflow = delivery_for("kubeflow")
    platform = Platform(kfp_namespace="team-ml")
    monkeypatch.setenv("KF_PIPELINES_ENDPOINT", "http://localhost:8888/")
    assert kubeflow.connect(platform, None, None, running=True) == Connection(
        platform, "http://localhost:8888", "team-ml"
    )
    given = kubeflow.connect(platform, "http://localhost:8080/", "other", running=False)
    assert given == Connection(platform, "http://localhost:8080", "other")
    assert kubeflow.time_zone(WEEKLY) == "(the KFP controller's time zone)"


def test_only_the_cloud_targets_have_a_delivery():
    with pytest.raises(ValueError, match=r"^unknown target 'local'; choose one of: vertex, kubeflow$"):
        delivery_for("local")
