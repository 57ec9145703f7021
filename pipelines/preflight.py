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
- Every API a run calls is enabled in the project (Service Usage `services:batchGet`): Dataflow's and Compute
  Engine's when data prep may run on Dataflow, Cloud KMS's with a key, Service Networking's with a network.
- The caller may create pipeline jobs in the project (`testIamPermissions`) and read and write the pipeline root
  (the bucket's `testPermissions`); the runs' service account holds its roles in the project's and the bucket's IAM
  policies (Vertex AI user; Dataflow worker and developer when data prep may run on Dataflow; object admin on the
  bucket).
- With `encryption_spec_key_name`: the key exists, the bucket's default key is that key, and the service agents that
  encrypt with it (Vertex AI's, Cloud Storage's, and Dataflow's and Compute Engine's with Dataflow) hold
  roles/cloudkms.cryptoKeyEncrypterDecrypter in the key's or its key ring's IAM policy.
A grant or setting in a policy the caller may not read is noted, not failed.
Each failure is one line naming the missing resource, API, permission or role and the command that fixes it; all are
reported together.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

IAM = "https://iam.googleapis.com/v1"
RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com/v1"
SERVICE_USAGE = "https://serviceusage.googleapis.com/v1"
STORAGE = "https://storage.googleapis.com/storage/v1"
KMS = "https://cloudkms.googleapis.com/v1"
ENCRYPTER = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
BROAD_ROLES = ("roles/editor", "roles/owner")  # basic roles that hold the runs' permissions too
# (role, roles that hold its permissions as well, what needs it): the runs' service account's roles in the project
RUNNER_ROLES = (("roles/aiplatform.user", ("roles/aiplatform.admin",), "its steps create Vertex AI jobs and models"),)
DATAFLOW_ROLES = (
    ("roles/dataflow.worker", ("roles/dataflow.admin",), "Dataflow's workers run as it"),
    ("roles/dataflow.developer", ("roles/dataflow.admin",), "prepare-data starts Dataflow jobs as it"),
)
BUCKET_ROLE = ("roles/storage.objectAdmin", ("roles/storage.admin",), "its steps read and write the pipeline root")
CALLER_PERMISSIONS = ("aiplatform.pipelineJobs.create",)  # on the project: in roles/aiplatform.user
BUCKET_PERMISSIONS = ("storage.objects.create", "storage.objects.delete", "storage.objects.get", "storage.objects.list")
# the service agents that encrypt with the key (their e-mail's domain): (domain, whose, when Dataflow only)
KEY_AGENTS = (
    ("gcp-sa-aiplatform.iam.gserviceaccount.com", "Vertex AI", False),
    ("gs-project-accounts.iam.gserviceaccount.com", "Cloud Storage", False),
    ("dataflow-service-producer-prod.iam.gserviceaccount.com", "Dataflow", True),
    ("compute-system.iam.gserviceaccount.com", "Compute Engine", True),
)
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
    """`project`: the client's (credentials from `gcloud auth application-default login` may name none). The probe
    object written is deleted again, its delete repeated on transient errors (one found gone: deleted already)."""
    from google.api_core import exceptions
    from google.cloud.storage import Client

    from core.retries import policy
    from core.storage import gcs_client, split_gcs

    bucket_name, prefix = split_gcs(pipeline_root)
    probe = f"{prefix.strip('/')}/.tfpipe-preflight-{uuid.uuid4().hex[:12]}".lstrip("/")
    client = Client(project=project) if project and not os.environ.get("STORAGE_EMULATOR_HOST") else gcs_client()
    blob = client.bucket(bucket_name).blob(probe)
    try:
        blob.upload_from_string(b"", content_type="text/plain", retry=policy())
        with contextlib.suppress(exceptions.NotFound):  # a repeat of a delete whose answer was lost: done
            blob.delete(retry=policy())
    except exceptions.NotFound:
        return [f"platform.pipeline_root: the bucket gs://{bucket_name} does not exist (gcloud storage buckets create)"]
    except exceptions.Forbidden:
        return [
            f"platform.pipeline_root: you cannot write to {pipeline_root}: grant yourself and the runs' service "
            f"account roles/storage.objectAdmin on gs://{bucket_name}"
        ]
    return []


def _bindings(session, url: str, method: str = "POST") -> list[dict] | None:
    """The IAM policy's bindings at `url` (a getIamPolicy method: POST with an empty request, or GET), or None when
    the caller may not read it."""
    body = {"data": json.dumps({}), "headers": {"Content-Type": "application/json"}} if method == "POST" else {}
    answer = session.request(method, url, **body)
    if answer.status_code in (401, 403):
        return None
    answer.raise_for_status()
    return answer.json().get("bindings", [])


def _holds(policies: list[list[dict]], member: str, roles: tuple[str, ...]) -> bool:
    return any(b["role"] in roles and member in b.get("members", []) for bindings in policies for b in bindings)


def _granted(session, method: str, url: str, permissions: list[str]) -> list[str] | None:
    """The permissions of `permissions` the caller holds on a resource (its testIamPermissions method: a POST of
    them, or a GET with them in the query), or None when the resource is not there or not visible to the caller."""
    if method == "POST":
        body = {"data": json.dumps({"permissions": permissions}), "headers": {"Content-Type": "application/json"}}
        answer = session.request(method, url, **body)
    else:
        answer = session.request(method, f"{url}?{urlencode({'permissions': permissions}, doseq=True)}")
    if answer.status_code in (401, 403, 404):
        return None
    answer.raise_for_status()
    return answer.json().get("permissions", [])


def check_service_account(email: str, project: str, session, note=print, read: dict | None = None) -> list[str]:
    """`read`: where the project's IAM bindings it reads are kept (under "project"; None: the caller may not read
    them), for the other checks."""
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
    if read is not None:
        read["project"] = policies[1]
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


def uses_dataflow(platform) -> bool:
    """Whether a run's data prep may start a Dataflow job (it does on a source of dataflow_min_records or more)."""
    return platform.data_prep.runner == "dataflow"


def key_project(key: str) -> str:
    return key.split("/")[1]


def required_services(platform) -> list[str]:
    """The APIs a Vertex run of `platform`, and these checks, call in its project."""
    services = {"aiplatform", "artifactregistry", "cloudresourcemanager", "iam", "storage"}
    if uses_dataflow(platform):
        services |= {"compute", "dataflow"}
    if platform.network:
        services |= {"compute", "servicenetworking"}
    if platform.encryption_spec_key_name and key_project(platform.encryption_spec_key_name) == platform.project:
        services.add("cloudkms")
    return sorted(f"{s}.googleapis.com" for s in services)


def check_services(project: str, services: list[str], session, note=print) -> tuple[list[str], str]:
    """Each of `services` (at most 30) not enabled in `project`, and the project's number (empty when the caller may
    not read its services)."""
    names = [f"projects/{project}/services/{s}" for s in services]
    answer = session.request(
        "GET", f"{SERVICE_USAGE}/projects/{project}/services:batchGet?{urlencode({'names': names}, doseq=True)}"
    )
    if answer.status_code in (401, 403):
        note(
            f"pre-flight: you may not read which APIs {project} enables; make sure these are: gcloud services enable "
            f"{' '.join(services)} --project {project}"
        )
        return [], ""
    answer.raise_for_status()
    found = answer.json().get("services", [])
    enabled = {s["name"].rsplit("/", 1)[-1] for s in found if s.get("state") == "ENABLED"}
    problems = [
        f"platform.project: the API {s} is not enabled in {project}: gcloud services enable {s} --project {project}"
        for s in services
        if s not in enabled
    ]
    return problems, found[0]["parent"].split("/")[-1] if found else ""


def project_number(project: str, session) -> str:
    """The project's number (empty when the caller may not see the project)."""
    answer = session.request("GET", f"{RESOURCE_MANAGER}/projects/{project}")
    if answer.status_code in (401, 403, 404):
        return ""
    answer.raise_for_status()
    return str(answer.json().get("projectNumber", ""))


YOURSELF = "--member=user:$(gcloud config get-value account)"


def check_caller(project: str, bucket: str, session) -> list[str]:
    """The caller may create pipeline jobs in `project` and read and write objects in `bucket` (empty: unchecked)."""
    problems = []
    granted = _granted(
        session, "POST", f"{RESOURCE_MANAGER}/projects/{project}:testIamPermissions", [*CALLER_PERMISSIONS]
    )
    missing = [p for p in CALLER_PERMISSIONS if granted is None or p not in granted]
    if missing:
        problems.append(
            f"platform.project: you lack {', '.join(missing)} in {project}: gcloud projects add-iam-policy-binding "
            f"{project} {YOURSELF} --role=roles/aiplatform.user"
        )
    granted = (
        _granted(session, "GET", f"{STORAGE}/b/{bucket}/iam/testPermissions", [*BUCKET_PERMISSIONS]) if bucket else None
    )
    missing = [p for p in BUCKET_PERMISSIONS if granted is not None and p not in granted]
    if missing:
        problems.append(
            f"platform.pipeline_root: you lack {', '.join(missing)} on gs://{bucket}: gcloud storage buckets "
            f"add-iam-policy-binding gs://{bucket} {YOURSELF} --role=roles/storage.objectAdmin"
        )
    return problems


def check_runner_roles(email: str, platform, project_policy: list[dict] | None, note=print) -> list[str]:
    """The runs' service account holds its roles in the project's IAM policy: Vertex AI user, and Dataflow worker and
    developer when data prep may run on Dataflow (or roles that hold theirs)."""
    project, member = platform.project, f"serviceAccount:{email}"
    needed = RUNNER_ROLES + (DATAFLOW_ROLES if uses_dataflow(platform) else ())
    commands = [
        f"gcloud projects add-iam-policy-binding {project} --member={member} --role={role}" for role, _, _ in needed
    ]
    if project_policy is None:
        note(f"pre-flight: you may not read {project}'s IAM policy; make sure {email} holds: {'; '.join(commands)}")
        return []
    return [
        f"platform.service_account: {email} lacks {role} in {project}, which it needs as {why}: {command}"
        for (role, also, why), command in zip(needed, commands)
        if not _holds([project_policy], member, (role, *also, *BROAD_ROLES))
    ]


def check_runner_bucket_role(
    email: str, bucket: str, project_policy: list[dict] | None, bucket_policy: list[dict] | None, note=print
) -> list[str]:
    """The runs' service account may read and write objects in `bucket`: object admin (or a role that holds its
    permissions) in the bucket's or the project's IAM policy."""
    role, also, why = BUCKET_ROLE
    member = f"serviceAccount:{email}"
    command = f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member={member} --role={role}"
    if project_policy is None and bucket_policy is None:
        note(f"pre-flight: you may read neither gs://{bucket}'s IAM policy nor the project's; make sure: {command}")
        return []
    if _holds([bucket_policy or []], member, (role, *also)) or _holds(
        [project_policy or []], member, (role, *also, *BROAD_ROLES)
    ):
        return []
    partly = " (as far as the IAM policies you may read show)" if None in (project_policy, bucket_policy) else ""
    return [
        f"platform.service_account: {email} lacks {role} on gs://{bucket}{partly}, which it needs as {why}: {command}"
    ]


def check_bucket_key(bucket: str, key: str, session, note=print) -> list[str]:
    """The bucket's default Cloud KMS key is `key`, so what the runs write there is encrypted with it."""
    answer = session.request("GET", f"{STORAGE}/b/{bucket}?fields=encryption")
    fix = f"gcloud storage buckets update gs://{bucket} --default-encryption-key={key}"
    if answer.status_code in (401, 403):
        note(f"pre-flight: you may not read gs://{bucket}'s default key; make sure it is the runs' key: {fix}")
        return []
    answer.raise_for_status()
    default = answer.json().get("encryption", {}).get("defaultKmsKeyName", "")
    if default == key:
        return []
    now = f"its default key is {default}" if default else "it has no default key"
    return [f"platform.pipeline_root: gs://{bucket} is not encrypted with {key} ({now}): {fix}"]


def key_agents(number: str, dataflow: bool) -> list[tuple[str, str]]:
    """(e-mail, whose) of the service agents of the project numbered `number` that encrypt a run's data with its
    key: Vertex AI's and Cloud Storage's, and Dataflow's and Compute Engine's when data prep may run on Dataflow."""
    return [(f"service-{number}@{domain}", whose) for domain, whose, only in KEY_AGENTS if dataflow or not only]


def check_key(key: str, agents: list[tuple[str, str]], session, note=print) -> list[str]:
    """The key exists and each of `agents` holds roles/cloudkms.cryptoKeyEncrypterDecrypter on it or its key ring."""
    key_policy = f"{KMS}/{key}:getIamPolicy?options.requestedPolicyVersion=3"
    found = session.request("GET", key_policy)
    if found.status_code == 404:
        return [f"platform.encryption_spec_key_name: the key {key} does not exist (gcloud kms keys create)"]
    commands = [
        f"gcloud kms keys add-iam-policy-binding {key} --member=serviceAccount:{agent} --role={ENCRYPTER}"
        for agent, _ in agents
    ]
    policies: list[list[dict] | None] = []
    if found.status_code in (401, 403):
        policies.append(None)
    else:
        found.raise_for_status()
        policies.append(found.json().get("bindings", []))
    ring = key.rsplit("/cryptoKeys/", 1)[0]
    policies.append(_bindings(session, f"{KMS}/{ring}:getIamPolicy?options.requestedPolicyVersion=3", "GET"))
    readable = [p for p in policies if p is not None]
    if not readable:
        note(
            f"pre-flight: you may read neither {key}'s IAM policy nor its key ring's; make sure the service agents "
            f"may use it: {'; '.join(commands)}"
        )
        return []
    partly = "" if len(readable) == 2 else " (as far as the IAM policies you may read show)"
    return [
        f"platform.encryption_spec_key_name: the {whose} service agent {agent} may not use the key{partly}: {command}"
        for (agent, whose), command in zip(agents, commands)
        if not _holds(readable, f"serviceAccount:{agent}", (ENCRYPTER,))
    ]


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
    from core.storage import split_gcs

    project, key = platform.project, platform.encryption_spec_key_name
    bucket = split_gcs(platform.pipeline_root)[0]
    problems = check_bucket(platform.pipeline_root, project)
    writable = not problems
    found = resolve_images(images, session)
    problems += found.problems
    services, number = check_services(project, required_services(platform), session, note)
    problems += services + check_caller(project, bucket if writable else "", session)
    if platform.service_account:
        read: dict = {}
        problems += check_service_account(platform.service_account, project, session, note, read)
        if read:  # the account exists
            problems += check_runner_roles(platform.service_account, platform, read["project"], note)
        if read and writable:
            bucket_policy = _bindings(session, f"{STORAGE}/b/{bucket}/iam", "GET")
            account, policy = platform.service_account, read["project"]
            problems += check_runner_bucket_role(account, bucket, policy, bucket_policy, note)
    if key:
        problems += check_bucket_key(bucket, key, session, note) if writable else []
        number = number or project_number(project, session)
        if number:
            problems += check_key(key, key_agents(number, uses_dataflow(platform)), session, note)
        else:
            note(
                f"pre-flight: you may not see {project}'s number, so its service agents' grants on {key} are unchecked"
            )
    return Findings(found.pinned, problems)
