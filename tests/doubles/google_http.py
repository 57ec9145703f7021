"""Google's IAM, registry, Service Usage, Cloud Storage JSON and Cloud KMS APIs as the pre-flight checks reach them
(pipelines/preflight.py): google.auth's AuthorizedSession answered from routes at its `request` method, every request
recorded. Requests these services refuse are refused alike (HTTP 400/404): an IAM request body not of google.iam.v1's
request messages (grpc-google-iam-v1's protos), a wildcard or empty permission list, a method at the wrong verb, a
Service Usage `services:batchGet` of more than 30 names or of names outside its parent. The routes of a project where
all is in place: a service account that may run pipelines and act as itself, every API enabled, every role granted;
and of a registry holding images (their digests)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from google.iam.v1 import iam_policy_pb2
from google.protobuf import json_format
from requests.structures import CaseInsensitiveDict

SA = "runner@acme-ml-prod.iam.gserviceaccount.com"
ACCOUNT = f"https://iam.googleapis.com/v1/projects/-/serviceAccounts/{SA}"
PROJECT_POLICY = "https://cloudresourcemanager.googleapis.com/v1/projects/acme-ml-prod:getIamPolicy"
PROJECT, NUMBER, BUCKET = "acme-ml-prod", "1234", "test-bucket"
KEY = f"projects/{PROJECT}/locations/europe-west4/keyRings/tfpipe/cryptoKeys/runs"
RING = KEY.rsplit("/cryptoKeys/", 1)[0]
SERVICE_USAGE = "https://serviceusage.googleapis.com/v1"
STORAGE = "https://storage.googleapis.com/storage/v1"
KMS = "https://cloudkms.googleapis.com/v1"
RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com/v1"
GOOGLE_APIS = (
    "https://iam.googleapis.com/",
    "https://cloudresourcemanager.googleapis.com/",
    "https://serviceusage.googleapis.com/",
    "https://storage.googleapis.com/storage/v1/",
    "https://cloudkms.googleapis.com/",
)
MAX_BATCH_GET = 30  # Service Usage v1: services.batchGet takes at most 30 names
KMS_RESOURCE = re.compile(r"projects/[^/]+/locations/[^/]+/keyRings/[^/]+(/cryptoKeys/[^/]+)?")
SELF_USER = {"bindings": [{"role": "roles/iam.serviceAccountUser", "members": [f"serviceAccount:{SA}"]}]}


def digest_of(image: str) -> str:
    """The digest the registry double answers for `image` (a registry's `Docker-Content-Digest`: sha256 of the
    manifest; here of the name, distinct per image)."""
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def manifest_routes(images, status: int = 200) -> dict:
    """A registry's answers to the manifest requests (HEAD) of `images`: with `status` 200, each image's digest in
    `Docker-Content-Digest` (by digest: that digest), as Artifact Registry answers; else no header."""

    def route(image):
        host, _, path = image.partition("/")
        name, at, digest = path.partition("@")
        if not at:
            last = name.rsplit("/", 1)[-1]
            name, tag = name.rsplit(":", 1) if ":" in last else (name, "latest")
        reference = digest if at else tag
        headers = {"Docker-Content-Digest": digest if at else digest_of(image)} if status == 200 else {}
        return ("HEAD", f"https://{host}/v2/{name}/manifests/{reference}"), (status, {}, headers)

    return dict(route(i) for i in images)


class Answer:
    """A `requests` response, as far as the checks read it."""

    def __init__(self, status: int, body: dict | None = None, headers: dict | None = None):
        self.status_code, self.body, self.headers = status, body or {}, CaseInsensitiveDict(headers or {})

    def json(self):
        return self.body

    def raise_for_status(self):
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code}")


class GoogleHttp:
    """google.auth's AuthorizedSession at its `request` method: a request the service refuses is answered 400 or 404;
    else `routes[(method, url without its query)]` answers (status, body) or (status, body, headers), or a callable
    of (query, body) returns them; else `fallback[method]`, else 404. Every request is recorded as (method, url,
    body), its headers in `sent_headers`."""

    def __init__(self, routes: dict, fallback: dict | None = None):
        self.routes, self.fallback, self.requests, self.sent_headers = routes, fallback or {}, [], []

    def request(self, method, url, data=None, headers=None, **kwargs):
        body = json.loads(data) if data else None
        self.requests.append((method, url, body))
        self.sent_headers.append(dict(headers or {}))
        parts = urlsplit(url)
        path, query = url.split("?", 1)[0], parse_qs(parts.query)
        refused = refusal(method, path, query, body)
        if refused:
            return Answer(*refused)
        route = self.routes.get((method, path), self.fallback.get(method, (404, {})))
        return Answer(*(route(query, body) if callable(route) else route))

    def install(self, monkeypatch) -> GoogleHttp:
        """Answer the IAM and registry requests of every AuthorizedSession (what `preflight()` makes with the
        caller's credentials); the others (Cloud Storage's client, on the emulator) go on."""
        from google.auth.transport.requests import AuthorizedSession

        http, send = self, AuthorizedSession.request

        def request(session, method, url, *args, **kwargs):
            if url.startswith(GOOGLE_APIS) or "/manifests/" in url:
                return http.request(method, url, **kwargs)
            return send(session, method, url, *args, **kwargs)

        monkeypatch.setattr(AuthorizedSession, "request", request)
        return self


def iam_routes(act_as=True, account_policy=SELF_USER, project_policy=(200, {})) -> dict:
    """IAM's answers about SA: it exists, the caller may act as it or not (`act_as`), its own IAM policy and the
    project's (a policy, or (status, body)); by default it may act as itself."""
    return {
        ("GET", ACCOUNT): (200, {"email": SA}),
        ("POST", f"{ACCOUNT}:testIamPermissions"): (
            200,
            {"permissions": ["iam.serviceAccounts.actAs"]} if act_as else {},
        ),
        ("POST", f"{ACCOUNT}:getIamPolicy"): account_policy
        if isinstance(account_policy, tuple)
        else (200, account_policy),
        ("POST", PROJECT_POLICY): project_policy,
    }


def _error(status: int, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": status, "message": message}}


def _iam_request(body, message) -> str:
    """Why a google.iam.v1 request body is refused ("" when it is not)."""
    try:
        request = json_format.ParseDict(body or {}, message())
    except json_format.ParseError as e:
        return f"Invalid JSON payload received. {e}"
    if request.resource:
        return "resource is given by the URL"
    if isinstance(request, iam_policy_pb2.TestIamPermissionsRequest):
        if not request.permissions:
            return "permissions must not be empty"
        if any("*" in p for p in request.permissions):
            return "Permissions with wildcards (such as '*' or 'storage.*') are not allowed"
    elif request.options.requested_policy_version not in (0, 1, 3):
        return "Invalid requested policy version"
    return ""


def refusal(method: str, path: str, query: dict, body) -> tuple[int, dict] | None:
    """The error answer the service gives a malformed request, or None."""
    if path.startswith(f"{SERVICE_USAGE}/"):
        parent = path[len(SERVICE_USAGE) + 1 :].removesuffix("/services:batchGet")
        if method != "GET" or not path.endswith("/services:batchGet") or body:
            return _error(404, "services.batchGet is GET .../v1/{parent=*/*}/services:batchGet with no body")
        names = query.get("names", [])
        if len(names) > MAX_BATCH_GET:
            return _error(400, f"A single request can get a maximum of {MAX_BATCH_GET} services at a time.")
        if any(not re.fullmatch(rf"{re.escape(parent)}/services/[a-z0-9.-]+", n) for n in names):
            return _error(400, f"the parent of every name must be {parent}")
    elif path.startswith(f"{RESOURCE_MANAGER}/projects/") and ":" in path.rsplit("/", 1)[-1]:
        verb = path.rsplit(":", 1)[1]
        messages = {"testIamPermissions": iam_policy_pb2.TestIamPermissionsRequest}
        messages["getIamPolicy"] = iam_policy_pb2.GetIamPolicyRequest
        if method != "POST" or verb not in messages:
            return _error(404, f"no method {method} :{verb}")
        why = _iam_request(body, messages[verb])
        return _error(400, why) if why else None
    elif path.startswith(f"{STORAGE}/b/"):
        if method != "GET" or body:
            return _error(404, f"not a Cloud Storage JSON API method the checks call: {method} {path}")
        if path.endswith("/iam/testPermissions"):
            permissions = query.get("permissions", [])
            if not permissions:
                return _error(400, "Required parameter: permissions")
            if any("*" in p for p in permissions):
                return _error(400, "Permissions with wildcards are not allowed")
        elif path.endswith("/iam"):
            if query.get("optionsRequestedPolicyVersion", ["1"])[0] not in ("1", "3"):
                return _error(400, "Invalid requested policy version")
    elif path.startswith(f"{KMS}/"):
        resource, _, verb = path[len(KMS) + 1 :].partition(":")
        if not KMS_RESOURCE.fullmatch(resource) or verb not in ("getIamPolicy", "testIamPermissions"):
            return _error(404, f"no method {method} {path}")
        if verb == "getIamPolicy":
            if method != "GET" or body:
                return _error(404, "getIamPolicy is GET with its options in the query")
            version = query.get("options.requestedPolicyVersion", ["0"])[0]
            return _error(400, "Invalid requested policy version") if version not in ("0", "1", "3") else None
        if method != "POST":
            return _error(404, "testIamPermissions is POST")
        why = _iam_request(body, iam_policy_pb2.TestIamPermissionsRequest)
        return _error(400, why) if why else None
    return None


def tested(granted: set[str]) -> Callable:
    """A testIamPermissions method's answer: the requested permissions that `granted` holds (the body's for a POST,
    the query's for Cloud Storage's GET)."""

    def answer(query, body):
        asked = (body or {}).get("permissions") or query.get("permissions", [])
        return 200, {"permissions": [p for p in asked if p in granted]}

    return answer


def batch_get(enabled: set[str], number: str = NUMBER) -> Callable:
    """Service Usage's services:batchGet of a project numbered `number` where `enabled` are enabled."""

    def answer(query, body):
        services = [n.rsplit("/", 1)[-1] for n in query.get("names", [])]
        return 200, {
            "services": [
                {
                    "name": f"projects/{number}/services/{s}",
                    "parent": f"projects/{number}",
                    "config": {"name": s},
                    "state": "ENABLED" if s in enabled else "DISABLED",
                }
                for s in services
            ]
        }

    return answer


EVERY_API = {
    f"{s}.googleapis.com"
    for s in "aiplatform artifactregistry cloudkms cloudresourcemanager compute dataflow iam servicenetworking storage".split()
}
CALLER = {"aiplatform.pipelineJobs.create", *(f"storage.objects.{v}" for v in ("create", "delete", "get", "list"))}
RUNNER_ROLES = ["roles/aiplatform.user", "roles/dataflow.worker", "roles/dataflow.developer"]
AGENTS = [
    f"service-{NUMBER}@{d}.iam.gserviceaccount.com"
    for d in ("gcp-sa-aiplatform", "gs-project-accounts", "dataflow-service-producer-prod", "compute-system")
]


def bindings(members_by_role: dict[str, list[str]]) -> dict:
    return {"bindings": [{"role": r, "members": m} for r, m in members_by_role.items()]}


def access_routes(
    enabled=EVERY_API,
    caller=CALLER,
    project_policy=None,
    bucket_policy=None,
    key=KEY,
    bucket_key=None,
    key_policy=None,
    ring_policy=(200, {}),
) -> dict:
    """The answers about the project, the bucket and the key beyond iam_routes(): `enabled` APIs, the caller's
    permissions, the project's and the bucket's IAM policies (by default the runs' roles granted to SA, which may act
    as itself), the bucket's default key (by default `key`; "": none), the policies of `key` and of its ring (a policy,
    or (status, body); by default every service agent may use the key)."""

    def answered(policy):
        return policy if isinstance(policy, tuple) else (200, policy)

    bucket_key = key if bucket_key is None else bucket_key
    ring = key.rsplit("/cryptoKeys/", 1)[0]
    if project_policy is None:
        project_policy = bindings({r: [f"serviceAccount:{SA}"] for r in RUNNER_ROLES})
    if bucket_policy is None:
        bucket_policy = bindings({"roles/storage.objectAdmin": [f"serviceAccount:{SA}"]})
    if key_policy is None:
        key_policy = bindings({"roles/cloudkms.cryptoKeyEncrypterDecrypter": [f"serviceAccount:{a}" for a in AGENTS]})
    return {
        ("GET", f"{SERVICE_USAGE}/projects/{PROJECT}/services:batchGet"): batch_get(set(enabled)),
        ("POST", f"{RESOURCE_MANAGER}/projects/{PROJECT}:testIamPermissions"): tested(set(caller)),
        ("POST", PROJECT_POLICY): answered(project_policy),
        ("GET", f"{RESOURCE_MANAGER}/projects/{PROJECT}"): (200, {"projectId": PROJECT, "projectNumber": NUMBER}),
        ("GET", f"{STORAGE}/b/{BUCKET}/iam/testPermissions"): tested(set(caller)),
        ("GET", f"{STORAGE}/b/{BUCKET}/iam"): answered(bucket_policy),
        ("GET", f"{STORAGE}/b/{BUCKET}"): (
            200,
            {"encryption": {"defaultKmsKeyName": bucket_key}} if bucket_key else {},
        ),
        ("GET", f"{KMS}/{key}:getIamPolicy"): answered(key_policy),
        ("GET", f"{KMS}/{ring}:getIamPolicy"): answered(ring_policy),
    }


def project_routes(**access) -> dict:
    """iam_routes() and access_routes(**access): a project where a run of SA finds all in place."""
    return {**iam_routes(), **access_routes(**access)}
