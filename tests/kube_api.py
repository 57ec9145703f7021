"""A Kubernetes API server double for the kubeflow engine steps: a local HTTP server that the official `kubernetes`
client talks to (`components.lib.kube.api_client(host=api.url)`).

It serves discovery (`GET /apis/GROUP/VERSION`) for the resource kinds it is told are installed, stores custom
objects (create / get / list / merge-patch / replace / delete, 404 and 409 like the real server), records every
request with its body, and answers each GET of an object with the next status of a script (the status
transitions an operator would make: running → succeeded, failed with a message, Ready / not Ready). Core pods and
their logs, and any extra route (a model server's predict), can be answered too.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

CUSTOM = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"(?:/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?)?$"
)
PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?:/(?P<sub>log))?)?$")


@dataclass
class Request:
    method: str
    path: str
    query: dict
    body: object = None
    content_type: str = ""


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


@dataclass
class KubeAPI:
    installed: dict = field(default_factory=dict)  # {"kubeflow.org/v1": {"tfjobs": "TFJob"}, ...}
    requests: list = field(default_factory=list)
    objects: dict = field(default_factory=dict)  # (group/version, ns, plural, name) -> object
    scripts: dict = field(default_factory=dict)  # plural -> [status, ...] (one per GET; the last one stays)
    pods: list = field(default_factory=list)
    logs: dict = field(default_factory=dict)  # pod name -> text
    routes: dict = field(default_factory=dict)  # (method, path) -> callable(body) -> (status, json)
    on_get: dict = field(default_factory=dict)  # plural -> callable(obj) (may change it) before it is answered

    def __post_init__(self):
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                request = Request(method, url.path, parse_qs(url.query), body, self.headers.get("Content-Type", ""))
                with api.lock:
                    api.requests.append(request)
                    status, answer = api.answer(request)
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

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

    def put(self, group_version: str, ns: str, plural: str, obj: dict):
        """Store an object as if it existed before the test (an endpoint from an earlier run)."""
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
        obj["metadata"].setdefault("namespace", ns)
        self.objects[(group_version, ns, plural, obj["metadata"]["name"])] = obj

    # the server
    @staticmethod
    def _status(code, reason, message):
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        }

    def answer(self, r: Request):
        if (r.method, r.path) in self.routes:
            return self.routes[(r.method, r.path)](r.body)
        if m := PODS.match(r.path):
            if m["sub"] == "log":
                return 200, self.logs.get(m["name"], "")
            selector = dict(part.split("=", 1) for part in r.query.get("labelSelector", [""])[0].split(",") if part)
            items = [p for p in self.pods if selector.items() <= p["metadata"].get("labels", {}).items()]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        m = CUSTOM.match(r.path)
        if not m:
            return self._status(404, "NotFound", f"no route {r.path}")
        gv = f"{m['group']}/{m['version']}"
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
                        "verbs": ["create", "delete", "get", "list", "patch"],
                    }
                    for plural, kind in kinds.items()
                ],
            }
        if kinds is None or m["plural"] not in kinds:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        ns, plural, name = m["ns"], m["plural"], m["name"]
        key = (gv, ns, plural, name)
        if r.method == "POST":
            name = r.body["metadata"]["name"]
            key = (gv, ns, plural, name)
            if key in self.objects:
                return self._status(409, "AlreadyExists", f'{plural}.{m["group"]} "{name}" already exists')
            obj = copy.deepcopy(r.body)
            obj["metadata"].update(
                namespace=ns, uid=str(uuid.uuid4()), creationTimestamp="2026-01-05T03:00:00Z", generation=1
            )
            self.objects[key] = obj
            return 201, obj
        if name is None:  # list
            selector = dict(part.split("=", 1) for part in r.query.get("labelSelector", [""])[0].split(",") if part)
            items = [
                o
                for (g, n, p, _), o in self.objects.items()
                if g == gv and n == ns and p == plural and selector.items() <= o["metadata"].get("labels", {}).items()
            ]
            return 200, {"kind": "List", "apiVersion": gv, "metadata": {}, "items": items}
        if key not in self.objects:
            return self._status(404, "NotFound", f'{plural}.{m["group"]} "{name}" not found')
        obj = self.objects[key]
        if r.method == "GET":
            script = self.scripts.get(plural)
            if script:
                status = script.pop(0) if len(script) > 1 else script[0]
                obj["status"] = copy.deepcopy(status)
            if plural in self.on_get:
                self.on_get[plural](obj)
            return 200, obj
        if r.method == "PATCH":
            patched = merge_patch(obj, r.body)
            patched["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
            self.objects[key] = patched
            return 200, patched
        if r.method == "PUT":
            replaced = copy.deepcopy(r.body)
            replaced["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
            self.objects[key] = replaced
            return 200, replaced
        if r.method == "DELETE":
            del self.objects[key]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return self._status(405, "MethodNotAllowed", r.method)
