"""Pre-flight checks of a Vertex AI run, made by `submit` and `schedule` before anything is created (`--skip-checks`
skips them), with the caller's Application Default Credentials: what a run would otherwise find at its first step,
or after the study and the training.

- The pipeline root's bucket takes a write (a probe object written and deleted).
- Every image the template runs exists in its registry (a manifest request with the caller's token); the same
  request's `Docker-Content-Digest` pins each image given by tag (`pin_images`), checks skipped or not: Vertex's cache
  keys on the image string, so a tag pushed again would otherwise serve cached steps of the old code.
- The runs' service account exists, and both the caller and the account itself may act as it
  (roles/iam.serviceAccountUser on the account or the project): Vertex checks the caller's `actAs` at submission, and
  the run's steps create their jobs and the deployment as that account. When the caller may read neither IAM policy,
  a note says so.
Each failure is one line naming the missing resource or role; all are reported together.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

IAM = "https://iam.googleapis.com/v1"
RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com/v1"
ACT_AS = "iam.serviceAccounts.actAs"
ACT_AS_ROLES = ("roles/iam.serviceAccountUser", "roles/editor", "roles/owner")  # predefined roles that hold actAs
PUBLIC_IMAGES = ("gcr.io/ml-pipeline/",)  # Google Cloud Pipeline Components' own launcher image
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


def template_images(spec: dict) -> list[str]:
    """The images a compiled Vertex template runs: its steps' images, the worker pools' trainer image and the
    uploaded model's serving image (Google's public GCPC image left out)."""
    found = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values() if "container" in e}
    for executor in spec["deploymentSpec"]["executors"].values():
        found.add(executor.get("importer", {}).get("metadata", {}).get("containerSpec", {}).get("imageUri", ""))
    for component in [spec["root"], *spec.get("components", {}).values()]:
        for task in component.get("dag", {}).get("tasks", {}).values():
            value = task.get("inputs", {}).get("parameters", {}).get("trainer_image", {})
            found.add(value.get("runtimeValue", {}).get("constant", ""))
    return sorted(i for i in found if i and not i.startswith(PUBLIC_IMAGES))


def manifest_url(image: str) -> str:
    """`https://HOST/v2/PATH/manifests/TAG` (or the digest) of an image reference."""
    host, _, rest = image.partition("/")
    if "@" in rest:
        path, _, reference = rest.partition("@")
    else:
        path, _, reference = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "latest")
    return f"https://{host}/v2/{path}/manifests/{reference}"


def by_digest(image: str) -> bool:
    """Whether `image` names its content (`NAME@sha256:...`) rather than a tag."""
    return "@" in image.rsplit("/", 1)[-1]


def pin_command(image: str) -> str:
    """The command printing `image` by digest (`NAME@sha256:...`), for a user to pin it by hand."""
    return f"gcloud artifacts docker images describe {image} --format='value(image_summary.fully_qualified_digest)'"


def without_tag(image: str) -> str:
    """`image`'s repository, without its tag."""
    head, _, last = image.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def tag_warning(spec: dict) -> str:
    """One line saying which images a compiled Vertex template runs by tag ("" when none): Vertex's cache keys on
    the image string, so a run of it may serve cached steps of an older image pushed under the same tag."""
    tagged = [i for i in template_images(spec) if not by_digest(i)]
    if not tagged:
        return ""
    return (
        f"warning: images by tag, not digest: {', '.join(tagged)}; Vertex caches steps on the image name, so a run of "
        "this template may reuse steps of an older image under the same tag (submit and schedule pin them; "
        "docs/guides/vertex.md#images-and-the-cache)"
    )


@dataclass(frozen=True)
class Findings:
    """Each tagged image's digest reference, and the problems found (one line each)."""

    pinned: dict[str, str] = field(default_factory=dict)  # IMAGE:TAG -> IMAGE@sha256:... (tagged images only)
    problems: list[str] = field(default_factory=list)


def resolve_images(images: list[str], session) -> Findings:
    """One manifest request per image: it must exist and be readable, and a tagged one must come with its digest
    (`Docker-Content-Digest`), else it cannot be pinned: a problem naming the command that pins it by hand."""
    pinned, problems = {}, []
    for image in images:
        answer = session.request("HEAD", manifest_url(image), headers={"Accept": MANIFEST_TYPES})
        by_hand = "" if by_digest(image) else f"; or pin it by hand: {pin_command(image)}"
        if answer.status_code == 404:
            problems.append(f"image {image} is not in its registry: build and push it (docs/guides/ci-cd.md)")
        elif answer.status_code in (401, 403):
            problems.append(
                f"image {image}: you may not read it (HTTP {answer.status_code}): grant roles/artifactregistry.reader "
                f"on its repository to yourself and to the runs' service account{by_hand}"
            )
        elif answer.status_code >= 300:
            problems.append(f"image {image}: its registry answered HTTP {answer.status_code}{by_hand}")
        elif not by_digest(image):
            digest = answer.headers.get("Docker-Content-Digest", "")
            if digest.startswith("sha256:"):
                pinned[image] = f"{without_tag(image)}@{digest}"
            else:
                problems.append(f"image {image}: its registry answered no digest to pin it by{by_hand}")
    return Findings(pinned, problems)


def pin_images(spec: dict[str, Any], pinned: dict[str, str]) -> dict[str, Any]:
    """A copy of the compiled template with every value naming a tagged image of `pinned` (the steps' images, the
    worker pools' and Dataflow workers' images, the serving image) replaced by its digest reference."""

    def pin(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: pin(v) for k, v in value.items()}
        if isinstance(value, list):
            return [pin(v) for v in value]
        return pinned.get(value, value) if isinstance(value, str) else value

    return pin(spec)


def check_bucket(pipeline_root: str, project: str = "") -> list[str]:
    """`project`: the client's (credentials from `gcloud auth application-default login` may name none)."""
    from google.api_core import exceptions
    from google.cloud.storage import Client

    from core.storage import gcs_client, split_gcs

    bucket_name, prefix = split_gcs(pipeline_root)
    probe = f"{prefix.strip('/')}/.tfpipe-preflight-{uuid.uuid4().hex[:12]}".lstrip("/")
    client = Client(project=project) if project and not os.environ.get("STORAGE_EMULATOR_HOST") else gcs_client()
    blob = client.bucket(bucket_name).blob(probe)
    try:
        blob.upload_from_string(b"", content_type="text/plain")
        blob.delete()
    except exceptions.NotFound:
        return [f"platform.pipeline_root: the bucket gs://{bucket_name} does not exist (gcloud storage buckets create)"]
    except exceptions.Forbidden:
        return [
            f"platform.pipeline_root: you cannot write to {pipeline_root}: grant yourself and the runs' service "
            f"account roles/storage.objectAdmin on gs://{bucket_name}"
        ]
    return []


def _bindings(session, url: str) -> list[dict] | None:
    """The IAM policy's bindings at `url` (a getIamPolicy method), or None when the caller may not read it."""
    answer = session.request("POST", url, data=json.dumps({}), headers={"Content-Type": "application/json"})
    if answer.status_code in (401, 403):
        return None
    answer.raise_for_status()
    return answer.json().get("bindings", [])


def check_service_account(email: str, project: str, session, note=print) -> list[str]:
    account = f"{IAM}/projects/-/serviceAccounts/{email}"
    found = session.request("GET", account)
    if found.status_code == 404:
        return [f"platform.service_account: {email} does not exist (gcloud iam service-accounts create)"]
    if found.status_code in (401, 403):
        return [f"platform.service_account: you may not see {email}: grant yourself roles/iam.serviceAccountUser on it"]
    found.raise_for_status()
    problems = []
    tested = session.request(
        "POST",
        f"{account}:testIamPermissions",
        data=json.dumps({"permissions": [ACT_AS]}),
        headers={"Content-Type": "application/json"},
    )
    tested.raise_for_status()
    if ACT_AS not in tested.json().get("permissions", []):
        problems.append(
            f"platform.service_account: you may not run pipelines as {email}: grant yourself "
            f"roles/iam.serviceAccountUser on it"
        )
    member = f"serviceAccount:{email}"
    grant = f"gcloud iam service-accounts add-iam-policy-binding {email} --member={member} --role=roles/iam.serviceAccountUser"
    policies = [
        _bindings(session, f"{account}:getIamPolicy"),
        _bindings(session, f"{RESOURCE_MANAGER}/projects/{project}:getIamPolicy"),
    ]
    readable = [p for p in policies if p is not None]
    if not readable:
        note(
            f"pre-flight: you may read neither {email}'s IAM policy nor the project's; make sure it may act as itself: {grant}"
        )
    elif not any(b["role"] in ACT_AS_ROLES and member in b.get("members", []) for p in readable for b in p):
        problems.append(
            f"platform.service_account: {email} may not act as itself"
            + ("" if len(readable) == 2 else " (as far as the IAM policies you may read show)")
            + f", which its steps need to start the jobs and the deployment: {grant}"
        )
    return problems


def preflight(platform, spec: dict, session=None, note=print, checks: bool = True) -> Findings:
    """Every problem a Vertex run of `spec` with `platform` would meet (none: none found), and its tagged images'
    digest references; what could not be checked goes to `note`. Without `checks`, only the tagged images are
    requested (to pin them)."""
    images = template_images(spec)
    if not checks:
        images = [i for i in images if not by_digest(i)]
        if not images:
            return Findings()
    if session is None:
        from google.auth.transport.requests import AuthorizedSession

        from pipelines.credentials import application_default

        session = AuthorizedSession(application_default())
    if not checks:
        return resolve_images(images, session)
    problems = check_bucket(platform.pipeline_root, platform.project)
    found = resolve_images(images, session)
    problems += found.problems
    if platform.service_account:
        problems += check_service_account(platform.service_account, platform.project, session, note)
    return Findings(found.pinned, problems)
