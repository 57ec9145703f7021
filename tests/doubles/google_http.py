"""Google's IAM and registry APIs as the pre-flight checks reach them (pipelines/preflight.py): google.auth's
AuthorizedSession answered from routes at its `request` method, every request recorded; the routes of a service
account that may run pipelines and act as itself, and of a registry holding images (their digests)."""

from __future__ import annotations

import hashlib
import json

from requests.structures import CaseInsensitiveDict

SA = "runner@acme-ml-prod.iam.gserviceaccount.com"
ACCOUNT = f"https://iam.googleapis.com/v1/projects/-/serviceAccounts/{SA}"
PROJECT_POLICY = "https://cloudresourcemanager.googleapis.com/v1/projects/acme-ml-prod:getIamPolicy"
GOOGLE_APIS = ("https://iam.googleapis.com/", "https://cloudresourcemanager.googleapis.com/")
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
    """google.auth's AuthorizedSession at its `request` method: `routes[(method, url)]` answers (status, body) or
    (status, body, headers), else `fallback[method]`, else 404; every request is recorded as (method, url, body),
    its headers in `sent_headers`."""

    def __init__(self, routes: dict, fallback: dict | None = None):
        self.routes, self.fallback, self.requests, self.sent_headers = routes, fallback or {}, [], []

    def request(self, method, url, data=None, headers=None, **kwargs):
        self.requests.append((method, url, json.loads(data) if data else None))
        self.sent_headers.append(dict(headers or {}))
        return Answer(*self.routes.get((method, url), self.fallback.get(method, (404, {}))))

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
