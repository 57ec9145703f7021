"""Pre-flight checks of a Vertex AI run, made by `submit` and `schedule` before anything is created (`--skip-checks`
skips them), with the caller's Application Default Credentials: what a run would otherwise find at its first step,
or after the study and the training.

- The pipeline root's bucket takes a write (a probe object written and deleted).
- Every image the template runs exists in its registry (a manifest request with the caller's token).
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


def check_images(images: list[str], session) -> list[str]:
    problems = []
    for image in images:
        answer = session.request("HEAD", manifest_url(image), headers={"Accept": MANIFEST_TYPES})
        if answer.status_code == 404:
            problems.append(f"image {image} is not in its registry: build and push it (docs/guides/ci-cd.md)")
        elif answer.status_code in (401, 403):
            problems.append(
                f"image {image}: you may not read it (HTTP {answer.status_code}): grant roles/artifactregistry.reader "
                "on its repository to yourself and to the runs' service account"
            )
        elif answer.status_code >= 300:
            problems.append(f"image {image}: its registry answered HTTP {answer.status_code}")
    return problems


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


def preflight(platform, spec: dict, session=None, note=print) -> list[str]:
    """Every problem a Vertex run of `spec` with `platform` would meet (empty: none found); what could not be checked
    goes to `note`."""
    if session is None:
        from google.auth.transport.requests import AuthorizedSession

        from pipelines.credentials import application_default

        session = AuthorizedSession(application_default())
    problems = check_bucket(platform.pipeline_root, platform.project)
    problems += check_images(template_images(spec), session)
    if platform.service_account:
        problems += check_service_account(platform.service_account, platform.project, session, note)
    return problems
