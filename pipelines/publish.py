"""Publish a compiled pipeline to a KFP template registry (Artifact Registry, `https://REGION-kfp.pkg.dev/PROJECT/REPO`)
with `kfp.registry.RegistryClient`: one multipart upload of the YAML with its tags. The registry names the package
after the pipeline (`tfpipe-training`) and the version after the file's sha256; a tag points at a version, so
`REGISTRY/tfpipe-training/TAG` is what `submit --template-tag TAG` and `schedule --template-tag TAG` run."""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.templates import check_tag


class PublishError(ValueError):
    """The template cannot be published (user-facing message)."""


def check_registry(registry: str) -> str:
    registry = (registry or "").rstrip("/")
    if not registry:
        raise PublishError(
            "no registry: pass --registry https://REGION-kfp.pkg.dev/PROJECT/REPO or set platform.template_registry"
        )
    if not registry.startswith(("https://", "http://")):
        raise PublishError(
            f"--registry {registry}: expected an https:// URL like https://REGION-kfp.pkg.dev/PROJECT/REPO"
        )
    return registry


def publish_template(registry: str, template_path: str, tags: Sequence[str], auth=None) -> tuple[str, str]:
    """Upload `template_path` with `tags`; return (package name, version). `auth`: requests auth or google
    credentials; None = Application Default Credentials on Artifact Registry, none elsewhere."""
    from kfp.registry import RegistryClient

    registry = check_registry(registry)
    if not tags:
        raise PublishError("at least one --tag is required")
    for tag in tags:
        check_tag(tag)
    client = RegistryClient(host=registry, auth=auth)
    package, version = client.upload_pipeline(file_name=template_path, tags=list(tags))
    return package, version.strip()
