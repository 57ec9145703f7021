"""A Kubernetes API server double as strict as the real one, for the kubeflow engine steps: a local HTTP server that
the official `kubernetes` client talks to (`components.lib.kube.api.api_client(host=api.url)`, or a kube-config).

What it does as the API server does:
- discovery (`GET /apis/GROUP/VERSION`) for the kinds it is told are installed; 404 for the others;
- every created, replaced or patched object is checked against its kind's schema (`schema.py`: the CRDs' structural
  schemas, Katib's Go types, Kubernetes 1.32's core schemas), its metadata by the API server's rules (422), then by
  the operators' admission webhooks (`admission.py`: denied with 403, the webhook's message);
- patches by content type: JSON merge patch (RFC 7386), JSON patch (RFC 6902); a strategic merge patch of a
  custom object is refused (415), as the API server refuses it;
- the status subresource: writes to an object leave its status alone, writes to `/status` change only the status;
  `metadata.generation` counts changes of everything but metadata and status; a write that changes nothing is a
  no-op; `metadata.resourceVersion` on every write, and an update or patch that names a stale one is a 409
  Conflict; an update without one is refused (422), as for every custom resource;
- deletion: `Foreground` propagation leaves the object in place, with `deletionTimestamp` and the
  `foregroundDeletion` finalizer, until its dependents are gone (`foreground_seconds`, or what an operator double
  decides); meanwhile a create of the same name is a 409;
- events: the operator doubles record their controllers' Warning events (`record_event`, a repeat counted up);
  `GET /api/v1/namespaces/NS/events` lists them, selected by the API server's event fields (`fieldSelector`);
- RBAC (when given the rules of a Role): each request is allowed only if a rule grants its verb on its resource
  (`authorized` collects what was allowed: the permissions the callers use).

Failing as the API server fails, when a test asks: `faults` (the next requests' faults, in order; a `(METHOD,
FAULT)` or `(METHOD, FAULT, PATH_PART)` waits for the next request it matches) and then
`fault_rate` of the other requests (drawn with `fault_seed`), each one of `FAULTS`: 429 TooManyRequests with
`Retry-After: 1` (API Priority and Fairness; `retry_after`), 500 InternalError, 503 ServiceUnavailable, "reset" (the connection
closed before the request is handled) or "lost" (handled, then the connection closed before the answer). A faulted
request is recorded with its `fault`.

For the tests: every request is recorded; `scripts` let a test play an operator (each GET of an object of that
plural first writes the next status, as an operator writes it through the status subresource); `routes` answer
other paths; `controllers` (operator doubles) are called on every change and on a background tick.
"""

from __future__ import annotations

import copy
import json
import random
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

import jsonpatch

from tests.doubles.http import close_http, serve_http
from tests.doubles.k8s import admission, schema

CUSTOM = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"(?:/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?)?$"
)
CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<plural>pods)(?:/(?P<name>[^/]+)(?:/(?P<sub>log|status))?)?$")
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
# the fields the API server selects events by (k8s.io/kubernetes pkg/registry/core/event/strategy.go's ToSelectableFields)
EVENT_FIELDS = {
    "metadata.name": lambda e: e["metadata"]["name"],
    "metadata.namespace": lambda e: e["metadata"]["namespace"],
    "involvedObject.kind": lambda e: e["involvedObject"].get("kind", ""),
    "involvedObject.namespace": lambda e: e["involvedObject"].get("namespace", ""),
    "involvedObject.name": lambda e: e["involvedObject"].get("name", ""),
    "involvedObject.uid": lambda e: e["involvedObject"].get("uid", ""),
    "involvedObject.apiVersion": lambda e: e["involvedObject"].get("apiVersion", ""),
    "reason": lambda e: e.get("reason", ""),
    "type": lambda e: e.get("type", ""),
}
NAMESPACE = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")
# core objects a namespace's set-up creates (manifests/kubeflow), kept like custom objects under `installed["v1"]`
CORE_OBJECTS = re.compile(
    r"^/api/(?P<version>v1)/namespaces/(?P<ns>[^/]+)/(?P<plural>persistentvolumeclaims|serviceaccounts)"
    r"(?:/(?P<name>[^/]+))?$"
)
# the built-in API groups: their objects are checked against Kubernetes' own schemas (schema.core_errors)
BUILT_IN = ("v1", "batch/v1", "rbac.authorization.k8s.io/v1")
MERGE, JSON_PATCH, STRATEGIC, APPLY = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
# the vendored schema of each custom resource this double knows
SCHEMAS = {
    "kubeflow.org/v1/tfjobs": "tfjobs.kubeflow.org.v1.json",
    "kubeflow.org/v1beta1/experiments": "experiments.kubeflow.org.v1beta1.json",
    "serving.kserve.io/v1beta1/inferenceservices": "inferenceservices.serving.kserve.io.v1beta1.json",
    "trainer.kubeflow.org/v1alpha1/trainjobs": "trainjobs.trainer.kubeflow.org.v1alpha1.json",
    "trainer.kubeflow.org/v1alpha1/trainingruntimes": "trainingruntimes.trainer.kubeflow.org.v1alpha1.json",
    "trainer.kubeflow.org/v1alpha1/clustertrainingruntimes": "clustertrainingruntimes.trainer.kubeflow.org.v1alpha1.json",
}
FIXED_METADATA = ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp", "resourceVersion")
FAULTS = (429, 500, 503, "reset", "lost")
FAULT_ANSWERS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
}
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass
class Request:
    method: str
    path: str
    query: dict
    body: object = None
    content_type: str = ""
    fault: object = None  # the fault this request met (FAULTS), None when it was answered


class Refused(Exception):
    """An API error: HTTP status, reason, message."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def drop_nulls(value):
    """What the API server stores of a body: null fields of a custom object are pruned."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def selector_matches(query: dict, labels: dict) -> bool:
    wanted = dict(part.split("=", 1) for part in query.get("labelSelector", [""])[0].split(",") if part)
    return wanted.items() <= (labels or {}).items()


def send(handler, status: int, body) -> None:
    """One HTTP answer: a dict as JSON, a string as plain text."""
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@dataclass
class KubeAPI:
    installed: dict = field(default_factory=dict)  # {"kubeflow.org/v1": {"tfjobs": "TFJob"}, ...}
    requests: list = field(default_factory=list)
    objects: dict = field(default_factory=dict)  # (group/version, ns, plural, name) -> object
    scripts: dict = field(default_factory=dict)  # plural -> [status, ...] (one per GET; the last one stays)
    pods: list = field(default_factory=list)
    logs: dict = field(default_factory=dict)  # pod name -> text
    previous_logs: dict = field(default_factory=dict)  # pod name -> its previous container's text (a restart)
    events: list = field(default_factory=list)  # core/v1 Events the operator doubles record (`record_event`)
    routes: dict = field(default_factory=dict)  # (method, path) -> callable(body) -> (status, json)
    on_get: dict = field(default_factory=dict)  # plural -> callable(obj) (may change it) before it is answered
    rbac: list | None = None  # a Role's rules; None: every request is allowed
    authorized: set = field(default_factory=set)  # (API group, resource, verb) of each request `rbac` allowed
    namespaces: dict | None = None  # name -> labels (Katib's webhook, Pod Security, KServe's pod mutator read them)
    user: str = "system:serviceaccount:kubeflow:pipeline-runner"
    controllers: list = field(default_factory=list)  # operator doubles: .reconcile(api) on changes and each tick
    faults: list = field(
        default_factory=list
    )  # the next requests' faults, in order: FAULTS, (METHOD, FAULT[, PATH_PART])
    fault_rate: float = 0.0  # then this share of the requests fails, with one of FAULTS
    fault_seed: int = 0
    retry_after: int = 1  # the seconds a 429 asks the client to wait
    foreground_seconds: float = 0.3
    tick_seconds: float = 0.05
    schemas: dict = field(default_factory=dict)  # "group/version/plural" -> a vendored schema other than SCHEMAS'

    def __post_init__(self):
        self.lock = threading.RLock()
        self._faults_drawn = random.Random(self.fault_seed)
        self.version = 0
        self.terminating: dict = {}  # key -> time the foreground deletion may complete
        self.held: set = set()  # keys whose dependents an operator double has not removed yet
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body):
                send(self, status, body)

            def _handle(self, method):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                request = Request(method, url.path, parse_qs(url.query), body, content_type)
                with api.lock:
                    api.requests.append(request)
                    request.fault = api._next_fault(request)
                    if request.fault in FAULT_ANSWERS:
                        reason, message = FAULT_ANSWERS[request.fault]
                        status, answer = api._status(request.fault, reason, message)
                    elif request.fault != "reset":
                        api._collect()
                        try:
                            status, answer = api.answer(request)
                        except Refused as e:
                            status, answer = api._status(e.code, e.reason, e.message)
                        if method != "GET":
                            api._reconcile()
                if request.fault in ("reset", "lost"):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if request.fault == 429:
                    self.send_response(429)
                    self.send_header("Retry-After", str(api.retry_after))
                    data = json.dumps(answer).encode()
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._send(status, answer)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PATCH(self):
                self._handle("PATCH")

            def do_PUT(self):
                self._handle("PUT")

            def do_DELETE(self):
                self._handle("DELETE")

        self.server = serve_http(Handler)
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self.ticker.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.stopped.set()
        close_http(self.server)
        for controller in self.controllers:
            getattr(controller, "close", lambda: None)()

    # what the tests read
    def calls(self, method=None, plural=None) -> list[Request]:
        return [
            r
            for r in self.requests
            if (method is None or r.method == method) and (plural is None or f"/{plural}" in r.path)
        ]

    def created(self, plural) -> list[dict]:
        return [r.body for r in self.calls("POST", plural)]

    def get(self, plural, name, ns="default"):
        return next((o for (gv, n, p, nm), o in self.objects.items() if p == plural and nm == name and n == ns), None)

    def items(self, plural, ns=None) -> list[dict]:
        return [o for (gv, n, p, _), o in self.objects.items() if p == plural and (ns is None or n == ns)]

    def put(self, group_version: str, ns: str, plural: str, obj: dict):
        """Store an object as if it existed before the test (an endpoint from an earlier run)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("namespace", ns)
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", now())
        meta["resourceVersion"] = self._next_version()
        self.objects[(group_version, ns, plural, meta["name"])] = obj

    # what operator doubles call (under the lock)
    def write_status(self, key: tuple, status: dict) -> None:
        obj = self.objects[key]
        if obj.get("status") != status:
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = self._next_version()

    def record_event(self, involved: dict, reason: str, message: str, component: str) -> None:
        """A Warning event about `involved` (an object's apiVersion, kind, metadata), as a controller's event recorder
        writes it: a repeat of the same reason and message on the same object counts up its `count`."""
        meta = involved["metadata"]
        ref = {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        }
        same = next(
            (e for e in self.events if (e["involvedObject"], e["reason"], e["message"]) == (ref, reason, message)), None
        )
        if same is not None:
            same.update(count=same["count"] + 1, lastTimestamp=now())
            return
        self.events.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "type": "Warning",
                "source": {"component": component},
                "count": 1,
                "firstTimestamp": now(),
                "lastTimestamp": now(),
            }
        )

    def create_owned(self, key: tuple, obj: dict) -> dict:
        """An object an operator creates (a revision, a pod): checked like any other."""
        gv, ns, plural, name = key
        return self._create(gv, ns, plural, obj, by_operator=True)

    def remove(self, key: tuple) -> None:
        self.objects.pop(key, None)
        self.terminating.pop(key, None)

    # the server
    @staticmethod
    def _status(code, reason, message):
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        }

    def _next_version(self) -> str:
        self.version += 1
        return str(self.version)

    def _tick(self):
        while not self.stopped.wait(self.tick_seconds):
            with self.lock:
                self._collect()
                self._reconcile()

    def _next_fault(self, request: Request):
        if self.faults:
            first = self.faults[0]
            method, fault, part = (
                first
                if isinstance(first, tuple) and len(first) == 3
                else (*first, "")
                if isinstance(first, tuple)
                else (request.method, first, "")
            )
            if method != request.method or part not in request.path:
                return None
            self.faults.pop(0)
            return fault
        if self.fault_rate and self._faults_drawn.random() < self.fault_rate:
            return self._faults_drawn.choice(FAULTS)
        return None

    def _reconcile(self):
        for controller in self.controllers:
            controller.reconcile(self)

    def _collect(self):
        """Finish the foreground deletions whose dependents are gone."""
        for key, when in list(self.terminating.items()):
            if time.monotonic() >= when and key not in self.held:
                self.remove(key)

    def _authorize(self, r: Request, group: str, plural: str, ns: str, name, sub):
        if self.rbac is None:
            return
        verb = VERBS.get(r.method) or ("get" if name else "list")
        resource = f"{plural}/{sub}" if sub else plural
        for rule in self.rbac:
            if (
                group in rule.get("apiGroups", [])
                and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
                and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
            ):
                self.authorized.add((group, resource, verb))
                return
        what = f"{plural}.{group}" if group else plural
        raise Refused(
            403,
            "Forbidden",
            f'{what} {json.dumps(name) + " " if name else ""}is forbidden: User "{self.user}" cannot {verb} '
            f'resource "{resource}" in API group "{group}" in the namespace "{ns}"',
        )

    def answer(self, r: Request):
        if (r.method, r.path) in self.routes:
            return self.routes[(r.method, r.path)](r.body)
        if m := CORE.match(r.path):
            return self._core(r, m)
        if m := EVENTS.match(r.path):
            return self._events(r, m["ns"])
        if m := NAMESPACE.match(r.path):
            return self._namespace(r, m["name"])
        found = CUSTOM.match(r.path) or CORE_OBJECTS.match(r.path)
        if not found:
            return self._status(404, "NotFound", f"no route {r.path}")
        m = {"group": "", "sub": None, **found.groupdict()}
        gv = f"{m['group']}/{m['version']}" if m["group"] else m["version"]
        kinds = self.installed.get(gv)
        if m["plural"] is None and not m["ns"]:
            if kinds is None:
                return self._status(404, "NotFound", "the server could not find the requested resource")
            return 200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": gv,
                "resources": [
                    {
                        "name": plural,
                        "singularName": kind.lower(),
                        "namespaced": True,
                        "kind": kind,
                        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                    }
                    for plural, kind in kinds.items()
                ]
                + [
                    {
                        "name": f"{plural}/status",
                        "singularName": "",
                        "namespaced": True,
                        "kind": kind,
                        "verbs": ["get", "patch", "update"],
                    }
                    for plural, kind in kinds.items()
                ],
            }
        if kinds is None or m["plural"] not in kinds:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        ns, plural, name, sub = m["ns"], m["plural"], m["name"], m["sub"]
        self._authorize(r, m["group"], plural, ns, name if r.method != "POST" else None, sub)
        if r.method == "POST":
            if not isinstance(r.body, dict):
                raise Refused(400, "BadRequest", "the body of the request must be an object")
            return 201, self._create(gv, ns, plural, r.body)
        if name is None:  # list
            items = [
                o
                for (g, n, p, _), o in self.objects.items()
                if g == gv and n == ns and p == plural and selector_matches(r.query, o["metadata"].get("labels"))
            ]
            return 200, {
                "kind": f"{kinds[plural]}List",
                "apiVersion": gv,
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            }
        key = (gv, ns, plural, name)
        if key not in self.objects:
            return self._status(404, "NotFound", f'{plural}.{m["group"]} "{name}" not found')
        obj = self.objects[key]
        if r.method == "GET":
            script = self.scripts.get(plural)
            if script:
                self.write_status(key, script.pop(0) if len(script) > 1 else script[0])
            if plural in self.on_get:
                self.on_get[plural](obj)
            return 200, obj
        if r.method == "DELETE":
            return 200, self._delete(key, r)
        if r.method == "PATCH":
            new = self._patched(obj, r, plural, m["group"], name)
        elif r.method == "PUT":
            new = copy.deepcopy(r.body)
            if not new.get("metadata", {}).get("resourceVersion"):
                raise Refused(
                    422,
                    "Invalid",
                    f'{plural}.{m["group"]} "{name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
                    "must be specified for an update",
                )
        else:
            return self._status(405, "MethodNotAllowed", r.method)
        return 200, self._update(key, obj, new, status_only=sub == "status")

    def _patched(self, obj: dict, r: Request, plural: str, group: str, name: str) -> dict:
        if r.content_type == MERGE:
            if not isinstance(r.body, dict):
                raise Refused(400, "BadRequest", "a merge patch must be a JSON object")
            return merge_patch(obj, r.body)
        if r.content_type == JSON_PATCH:
            try:
                return jsonpatch.apply_patch(obj, r.body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise Refused(
                    422, "Invalid", f"the server rejected our request due to an error in our request: {e}"
                ) from None
        if r.content_type == STRATEGIC:
            raise Refused(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE}, {APPLY}",
            )
        raise Refused(415, "UnsupportedMediaType", f"the server does not support the media type {r.content_type!r}")

    def _check(self, gv: str, plural: str, obj: dict, old: dict | None, by_operator: bool = False) -> None:
        group = gv.split("/")[0] if "/" in gv else ""
        name = obj.get("metadata", {}).get("name", "")
        kind = self.installed.get(gv, {}).get(plural, plural)
        errors = schema.metadata_errors(obj.get("metadata") or {})
        filename = self.schemas.get(f"{gv}/{plural}") or SCHEMAS.get(f"{gv}/{plural}")
        if filename:
            errors += schema.custom_schema(filename).errors(obj)
        elif gv in BUILT_IN:
            errors += schema.core_errors(obj)
        if obj.get("apiVersion") != gv or obj.get("kind") != kind:
            errors.append(f"apiVersion/kind: expected {gv} {kind}, got {obj.get('apiVersion')} {obj.get('kind')}")
        if errors:
            raise Refused(422, "Invalid", f'{kind}.{group} "{name}" is invalid: ' + "; ".join(errors))
        if by_operator:
            return
        for webhook, check in admission.WEBHOOKS.get(f"{gv}/{plural}", []):
            denied = check(obj, old, self)
            if denied:
                raise Refused(403, "Forbidden", f'admission webhook "{webhook}" denied the request: {denied}')

    def _create(self, gv: str, ns: str, plural: str, body: dict, by_operator: bool = False) -> dict:
        obj = drop_nulls(copy.deepcopy(body))
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            raise Refused(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if "generateName" in meta and "name" not in meta:
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        for mutate in admission.MUTATIONS.get(f"{gv}/{plural}", []) if not by_operator else []:
            mutate(obj, self)
        obj.pop("status", None)  # the status subresource: a create sets no status
        self._check(gv, plural, obj, None, by_operator)
        key = (gv, ns, plural, meta["name"])
        if key in self.objects:
            raise Refused(409, "AlreadyExists", f'{plural}.{gv.split("/")[0]} "{meta["name"]}" already exists')
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            generation=1,
            resourceVersion=self._next_version(),
        )
        self.objects[key] = obj
        return obj

    def _update(self, key: tuple, old: dict, new: dict, status_only: bool) -> dict:
        gv, ns, plural, name = key
        sent = (new.get("metadata") or {}).get("resourceVersion")
        if sent and sent != old["metadata"]["resourceVersion"]:
            raise Refused(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural}.{gv.split("/")[0]} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        if status_only:
            new = {**copy.deepcopy(old), "status": new.get("status")}
        else:
            new = {**new, "metadata": dict(new.get("metadata") or {})}
            for fixed in FIXED_METADATA:
                if fixed in old["metadata"]:
                    new["metadata"][fixed] = old["metadata"][fixed]
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
            for mutate in admission.MUTATIONS.get(f"{gv}/{plural}", []):
                mutate(new, self)
            self._check(gv, plural, new, old)
        new = drop_nulls(new)
        if new == old:
            return old  # a no-op: no new resourceVersion, no new generation
        if _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = self._next_version()
        self.objects[key] = new
        return new

    def _delete(self, key: tuple, r: Request) -> dict:
        obj = self.objects[key]
        policy = ((r.body or {}).get("propagationPolicy")) or (r.query.get("propagationPolicy") or [""])[0]
        if policy == "Foreground":
            meta = obj["metadata"]
            if "deletionTimestamp" not in meta:
                meta["deletionTimestamp"] = now()
                meta["finalizers"] = [*meta.get("finalizers", []), "foregroundDeletion"]
                meta["resourceVersion"] = self._next_version()
                self.terminating[key] = time.monotonic() + self.foreground_seconds
            return obj
        self.remove(key)
        return obj

    def _namespace(self, r: Request, name: str):
        """A namespace object with its labels (`namespaces`); a Role in that namespace may grant reading it."""
        self._authorize(r, "", "namespaces", name, name, None)
        if r.method != "GET":
            return self._status(405, "MethodNotAllowed", r.method)
        known = self.namespaces or {}
        if name not in known:
            return self._status(404, "NotFound", f'namespaces "{name}" not found')
        labels = {"kubernetes.io/metadata.name": name, **known[name]}
        return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}

    def _events(self, r: Request, ns: str):
        """List a namespace's events, selected by `fieldSelector` (`field=value`, `==`, `!=`, comma-separated)."""
        self._authorize(r, "", "events", ns, None, None)
        if r.method != "GET":
            return self._status(405, "MethodNotAllowed", r.method)
        terms = []
        for term in filter(None, (r.query.get("fieldSelector") or [""])[0].split(",")):
            found = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
            if not found:
                raise Refused(400, "BadRequest", f"invalid selector: '{term}'; can't understand '{term}'")
            name, op, value = found.groups()
            if name not in EVENT_FIELDS:
                raise Refused(400, "BadRequest", f"field label not supported: {name}")
            terms.append((EVENT_FIELDS[name], op != "!=", value))
        items = [
            e
            for e in self.events
            if e["metadata"]["namespace"] == ns and all((get(e) == value) is equal for get, equal, value in terms)
        ]
        return 200, {
            "kind": "EventList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.version)},
            "items": items,
        }

    def _core(self, r: Request, m):
        self._authorize(r, "", m["plural"], m["ns"], m["name"], m["sub"])
        if m["sub"] == "log":
            if not any(p["metadata"]["name"] == m["name"] for p in self.pods):
                return self._status(404, "NotFound", f'pods "{m["name"]}" not found')
            previous = (r.query.get("previous") or ["false"])[0] == "true"
            text = (self.previous_logs if previous else self.logs).get(m["name"], "")
            lines = int((r.query.get("tailLines") or ["0"])[0])
            return 200, "".join(text.splitlines(keepends=True)[-lines:]) if lines else text
        pods = [p for p in self.pods if p["metadata"].get("namespace", m["ns"]) == m["ns"]]
        if m["name"]:
            pod = next((p for p in pods if p["metadata"]["name"] == m["name"]), None)
            return (200, pod) if pod else self._status(404, "NotFound", f'pods "{m["name"]}" not found')
        items = [p for p in pods if selector_matches(r.query, p["metadata"].get("labels"))]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
