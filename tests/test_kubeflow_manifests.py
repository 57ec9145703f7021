"""manifests/kubeflow: what a namespace needs for the engine steps, valid against Kubernetes 1.32's schemas, one
kustomization applying all of it, and consistent with the config's defaults (the claim, its mount path, the images'
user). The engine tests enforce the Role's rules on every request the steps make (tests/k8s_double)."""

from pathlib import Path

import yaml

from components.lib.kube import IMAGE_UID
from pipelines.config import Volume
from tests.k8s_double import schema

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests" / "kubeflow"


def resources() -> list[dict]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return [yaml.safe_load((MANIFESTS / name).read_text()) for name in kustomization["resources"]]


def test_the_kustomization_applies_every_manifest_and_each_is_valid():
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    assert kustomization["namespace"] == "kubeflow"
    for resource in resources():
        assert schema.core_errors(resource) == [], resource["metadata"]["name"]
        assert schema.metadata_errors(resource["metadata"]) == []
    assert sorted(r["kind"] for r in resources()) == [
        "Job",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]


def test_the_claim_and_the_permissions_job_match_the_config_defaults():
    by_kind = {r["kind"]: r for r in resources()}
    volume = Volume()
    assert by_kind["PersistentVolumeClaim"]["metadata"]["name"] == volume.claim_name
    pod = by_kind["Job"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": volume.claim_name}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "tfpipe-data", "mountPath": volume.mount_path}]
    assert f"os.chown('{volume.mount_path}', {IMAGE_UID}, {IMAGE_UID})" in container["command"][-1]


def test_the_binding_grants_the_role_to_the_runs_service_account():
    by_kind = {r["kind"]: r for r in resources()}
    binding, role = by_kind["RoleBinding"], by_kind["Role"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}]
    assert by_kind["ServiceAccount"]["automountServiceAccountToken"] is False
