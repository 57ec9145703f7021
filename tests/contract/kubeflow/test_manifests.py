"""manifests/kubeflow: what a namespace needs for the engine steps, valid against Kubernetes 1.32's schemas, one
kustomization applying all of it, and consistent with the config's defaults (the claim, its mount path, the images'
user) and with docs/guides/kubeflow.md's kind set-up (its profile and its image names). The engine tests enforce the Role's
rules on every request the steps make (tests/doubles/k8s)."""

import re
from pathlib import Path

import pytest
import yaml

from components.lib.kube import pod_security
from components.lib.kube.api import IMAGE_UID
from pipelines.config import Volume, load_config
from pipelines.delivery import delivery_for
from pipelines.delivery.kubeflow import kubeflow_model_repository
from tests.doubles.k8s import admission, schema

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests" / "kubeflow"
DOC = ROOT / "docs" / "guides" / "kubeflow.md"
PROFILE = "local-kubeflow"
# Knative Serving resolves an image tag to a digest at the image's registry, except for these registries: the default
# of config-deployment's registries-skipping-tag-resolving (knative/serving knative-v1.15.2, the version KServe
# v0.15.2's quick install deploys: pkg/deployment/config.go). An image loaded into kind's node has no registry.
KNATIVE_SKIPS_TAG_RESOLVING = {"kind.local", "ko.local", "dev.local"}
IMAGE_FIELDS = ("components_image", "trainer_image", "trainer_gpu_image", "serving_image", "serving_gpu_image")


def resources() -> list[dict]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return [yaml.safe_load((MANIFESTS / name).read_text()) for name in kustomization["resources"]]


def named(kind: str, name: str) -> dict:
    (found,) = [r for r in resources() if (r["kind"], r["metadata"]["name"]) == (kind, name)]
    return found


def test_the_kustomization_applies_every_manifest_and_each_is_valid():
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    assert kustomization["namespace"] == "kubeflow"
    for resource in resources():
        assert schema.core_errors(resource) == [], resource["metadata"]["name"]
        assert schema.metadata_errors(resource["metadata"]) == []
    assert sorted((r["kind"], r["metadata"]["name"]) for r in resources()) == [
        ("Job", "tfpipe-volume-permissions"),
        ("PersistentVolumeClaim", "tfpipe"),
        ("Role", "tfpipe-engines"),
        ("Role", "tfpipe-kfp-runner"),
        ("RoleBinding", "tfpipe-engines"),
        ("RoleBinding", "tfpipe-kfp-runner"),
        ("ServiceAccount", "tfpipe-runner"),
        ("ServiceAccount", "tfpipe-workloads"),
    ]


def test_the_claim_and_the_permissions_job_match_the_config_defaults():
    by_kind = {r["kind"]: r for r in resources()}
    volume = Volume()
    assert by_kind["PersistentVolumeClaim"]["metadata"]["name"] == volume.claim_name
    pod = by_kind["Job"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": volume.claim_name}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "tfpipe-data", "mountPath": volume.mount_path}]
    assert f"dir='{volume.mount_path}'" in container["command"][-1]


def test_the_permissions_job_runs_as_the_images_user_as_pod_security_restricted_admits():
    by_kind = {r["kind"]: r for r in resources()}
    pod = by_kind["Job"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"] == pod_security.pod_context()
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == IMAGE_UID
    assert container["securityContext"] == pod_security.container_context()
    assert admission.pod_security_denial("tfpipe-volume-permissions", pod, {admission.ENFORCE: "restricted"}) == ""


@pytest.mark.parametrize("role", ["tfpipe-engines", "tfpipe-kfp-runner"])
def test_the_bindings_grant_the_roles_to_the_runs_own_service_account(role):
    binding = named("RoleBinding", role)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tfpipe-runner", "namespace": "kubeflow"}]
    assert "automountServiceAccountToken" not in named("ServiceAccount", "tfpipe-runner")  # KFP's processes call
    assert named("ServiceAccount", "tfpipe-workloads")["automountServiceAccountToken"] is False


def registry(image: str) -> str:
    first, sep, _ = image.partition("/")
    return first if sep and ("." in first or ":" in first or first == "localhost") else "docker.io"


def test_the_permissions_job_runs_the_components_image_as_the_kind_set_up_names_it():
    by_kind = {r["kind"]: r for r in resources()}
    (container,) = by_kind["Job"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "kind.local/tfpipe/components:dev"
    assert registry(container["image"]) in KNATIVE_SKIPS_TAG_RESOLVING
    assert not container["image"].endswith(":latest")  # IfNotPresent: the image loaded into the node is used


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def doc_profile() -> dict:
    (block,) = [b for b in doc_blocks("yaml") if f"  {PROFILE}:" in b]
    return yaml.safe_load(block)


def test_the_docs_kind_profile_matches_the_manifests_and_the_config_model(tmp_path):
    config_file = tmp_path / f"{PROFILE}.yaml"
    config_file.write_text(yaml.safe_dump(doc_profile()))
    assert f"Save this as `{config_file.name}`" in DOC.read_text()
    config = load_config(config_file, profile=PROFILE, environ={})
    platform, kubeflow = config.platform, config.platform.kubeflow
    by_kind = {r["kind"]: r for r in resources()}
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())

    assert (kubeflow.training, kubeflow.tuning, kubeflow.serving) == ("auto", "katib", "kserve")
    assert kubeflow.volume.claim_name == by_kind["PersistentVolumeClaim"]["metadata"]["name"]
    (mount,) = by_kind["Job"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert kubeflow.volume.mount_path == mount["mountPath"]
    assert config.parameters.model_repository == kubeflow_model_repository(platform)
    assert kubeflow.namespace == kustomization["namespace"]
    for binding in ("tfpipe-engines", "tfpipe-kfp-runner"):
        (subject,) = named("RoleBinding", binding)["subjects"]
        assert (platform.kfp_service_account, kubeflow.namespace) == (subject["name"], subject["namespace"])
    assert kubeflow.service_account == named("ServiceAccount", "tfpipe-workloads")["metadata"]["name"]
    assert platform.components_image == by_kind["Job"]["spec"]["template"]["spec"]["containers"][0]["image"]
    for field in IMAGE_FIELDS:
        image = getattr(platform, field)
        assert registry(image) in KNATIVE_SKIPS_TAG_RESOLVING, field
        assert not image.endswith(":latest"), field
    assert kubeflow.worker_resources.memory_request and kubeflow.worker_resources.memory_limit  # all three given


def test_the_docs_kind_profile_keeps_the_volume_repository_under_tfpipe_yaml_too(tmp_path):
    """Pasted under tfpipe.yaml's profiles, the profile's model repository is still the claim's, whatever that file's
    base section holds: the compiled template's default is the volume's."""
    raw = yaml.safe_load((ROOT / "tfpipe.yaml").read_text())
    raw.setdefault("parameters", {})["model_repository"] = "gs://example-tfpipe/model-repository"  # a base value
    raw["profiles"][PROFILE] = doc_profile()["profiles"][PROFILE]
    config_file = tmp_path / "tfpipe.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    config = load_config(config_file, profile=PROFILE, environ={})
    output = delivery_for("kubeflow").compile("training", config, tmp_path / "kubeflow.yaml")
    spec = next(yaml.safe_load_all(Path(output).read_text()))
    default = spec["root"]["inputDefinitions"]["parameters"]["model_repository"]["defaultValue"]
    assert default == f"{Volume().mount_path}/model-repository" == config.parameters.model_repository
