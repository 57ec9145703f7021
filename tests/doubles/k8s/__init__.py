"""A strict Kubernetes API double for the kubeflow engine steps (see server.py), the operators' doubles beside it."""

import contextlib
import json
import os
from pathlib import Path

import yaml

from tests.doubles.k8s.server import KubeAPI

__all__ = ["KubeAPI", "engine_arguments", "in_run", "point_clients_at", "shipped_rules"]
MANIFESTS = Path(__file__).resolve().parents[3] / "manifests" / "kubeflow"


def shipped_rules() -> list[dict]:
    """The rules of the Role the repository ships for the runs' service account (manifests/kubeflow/role.yaml)."""
    return yaml.safe_load((MANIFESTS / "role.yaml").read_text())["rules"]


def point_clients_at(api: KubeAPI, monkeypatch, home) -> None:
    """A step's `kube.api_client()` (no host: the kube-config, as outside a pod) talks to `api`: a kube-config in a
    fresh HOME (the client reads $KUBECONFIG once, at its import, so HOME is what a test can change)."""
    config = home / ".kube" / "config"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "double",
                "clusters": [{"name": "double", "cluster": {"server": api.url}}],
                "contexts": [{"name": "double", "context": {"cluster": "double", "user": "runner"}}],
                "users": [{"name": "runner", "user": {}}],
            }
        )
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@contextlib.contextmanager
def in_run(run_id: str = "run-1"):
    """An engine step's environment in the run `run_id`: the variable the compiled pipeline gives its pod from the
    pod's Argo Workflow label (components.lib.kube.api.run_id)."""
    from components.lib.kube import api as kube

    saved = os.environ.get(kube.RUN_ID_ENV)
    os.environ[kube.RUN_ID_ENV] = run_id
    try:
        yield
    finally:
        if saved is None:
            del os.environ[kube.RUN_ID_ENV]
        else:
            os.environ[kube.RUN_ID_ENV] = saved


def engine_arguments(volume) -> dict:
    """The arguments every engine step's component takes, in namespace `ml` with the claim `tfpipe` at `volume` (the
    same path in the step and in the pods), polling fast."""
    return dict(
        namespace="ml",
        service_account="",
        claim_name="tfpipe",
        mount_path=str(volume),
        resources={"requests": {"cpu": "1"}},
        poll_seconds=0.2,
        timeout_minutes=5,
    )
