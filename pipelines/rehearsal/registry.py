"""The double's Model Registry and endpoints, kept in a JSON file so that successive rehearsals build on each other
(the second run finds the first one's champion and endpoint). Behaves like Vertex AI where the pipeline relies on
it: resource names are answered with the project's number (requests may name the project by its ID or its number);
a model's first version holds the `default` alias; an alias names one version (merging moves it; `-alias` removes
it); a deploy's traffic split uses "0" for the new model and must sum to 100; a deployed model with traffic cannot
be undeployed; lists are ordered by `order_by` and paged; a model or endpoint may be created with an ID of the
caller's (`model_id`, `endpoint_id`, in the forms Vertex takes), and an ID taken is ALREADY_EXISTS.

Rehearsals that run at once on one state share it as runs share one project: every read and change holds the
state's lock (a thread lock and an exclusive `flock` on `PATH.lock`), reads the file again when another process has
saved it since, and a change is saved before the lock is let go."""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from typing import Any

from pipelines.rehearsal.state_files import write_json


class ApiError(Exception):
    """An error Vertex AI would answer with: a gRPC status name, an HTTP code and a message."""

    HTTP = {
        "INVALID_ARGUMENT": 400,
        "FAILED_PRECONDITION": 400,
        "PERMISSION_DENIED": 403,
        "NOT_FOUND": 404,
        "ALREADY_EXISTS": 409,
        "RESOURCE_EXHAUSTED": 429,
        "INTERNAL": 500,
        "UNAVAILABLE": 503,
    }

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message, self.http = status, message, self.HTTP[status]


def _now() -> float:
    return round(time.time(), 3)


ORDER_FIELDS = ("create_time", "update_time", "display_name")  # what Vertex's list methods order by
# the IDs a caller may give (aiplatform_v1 UploadModelRequest.model_id, CreateEndpointRequest.endpoint_id)
MODEL_ID = re.compile(r"[a-z_][a-z0-9_-]{0,62}")
ENDPOINT_ID = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?|[1-9][0-9]{0,8}")


class StateLock:
    """Re-entrant across the threads of a process and exclusive across processes (`flock` on `path`); `on_acquire`
    runs when the process takes it (the outermost `with`)."""

    def __init__(self, path: str, on_acquire):
        self.path, self.on_acquire = path, on_acquire
        self._thread = threading.RLock()
        self._depth = 0
        self._file = None

    def __enter__(self):
        self._thread.acquire()
        self._depth += 1
        if self._depth == 1:
            self._file = open(self.path, "a")
            fcntl.flock(self._file, fcntl.LOCK_EX)
            try:
                self.on_acquire()
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0 and self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        self._thread.release()


class Registry:
    def __init__(self, path: str, project: str, location: str, project_number: str):
        self.path, self.parent = path, f"projects/{project_number}/locations/{location}"
        self.by_id = (f"projects/{project}/", f"projects/{project_number}/")
        self.project_ids = (project, project_number)
        self.state: dict[str, Any] = {"models": {}, "endpoints": {}, "next_id": 1}
        self._read: tuple | None = None  # the saved file this process's `state` holds (its stat)
        self.lock = StateLock(f"{path}.lock", self._reload)
        with self.lock:
            pass

    def _reload(self) -> None:
        """`state` from the file, when another process saved it since this one read or wrote it."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._read:
            with open(self.path) as f:
                self.state = json.loads(f.read().replace(*self.by_id))  # a state saved with project IDs
            self._read = seen

    def canonical(self, name: str) -> str:
        """A resource name with the project's number, as Vertex answers it."""
        return name.replace(*self.by_id, 1) if name.startswith(self.by_id[0]) else name

    def save(self) -> None:
        with self.lock:
            write_json(self.path, self.state, indent=1)
            stat = os.stat(self.path)
            self._read = (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def new_id(self) -> str:
        """An ID no other resource of the state has had (jobs, operations and deployed models included)."""
        with self.lock:
            self.state["next_id"] += 1
            self.save()
            return str(1000 + self.state["next_id"])

    def check_parent(self, parent: str) -> None:
        if self.canonical(parent) != self.parent:
            raise ApiError(
                "INVALID_ARGUMENT", f"parent {parent!r}: this rehearsal's project and location are {self.parent!r}"
            )

    # --- models --------------------------------------------------------------------------------------------------

    def _own_id(self, kind: str, wanted: str, rule: re.Pattern) -> str:
        """The name of a new `kind` ("models", "endpoints"): with the caller's ID `wanted`, or a new one."""
        if not wanted:
            return f"{self.parent}/{kind}/{self.new_id()}"
        if not rule.fullmatch(wanted):
            raise ApiError("INVALID_ARGUMENT", f"{kind[:-1]} ID {wanted!r} is not of the form {rule.pattern}")
        name = f"{self.parent}/{kind}/{wanted}"
        if name in self.state[kind]:
            raise ApiError("ALREADY_EXISTS", f"{name} already exists")
        return name

    def upload(self, parent: str, model: dict, parent_model: str = "", model_id: str = "") -> tuple[str, str]:
        """A new model (named `model_id` when given), or a new version of `parent_model`; returns (model name,
        version id)."""
        self.check_parent(parent)
        if parent_model and model_id:
            raise ApiError("INVALID_ARGUMENT", "model_id names a new model: give it or parent_model, not both")
        parent_model = self.canonical(parent_model)
        if not model.get("display_name"):
            raise ApiError("INVALID_ARGUMENT", "model.display_name is required")
        if not model.get("artifact_uri"):
            raise ApiError("INVALID_ARGUMENT", "model.artifact_uri is required")
        if not model.get("container_spec", {}).get("image_uri"):
            raise ApiError("INVALID_ARGUMENT", "model.container_spec.image_uri is required")
        with self.lock:
            if parent_model:
                entry = self.state["models"].get(parent_model)
                if entry is None:
                    raise ApiError("NOT_FOUND", f"parent model {parent_model} not found")
                name = parent_model
            else:
                name = self._own_id("models", model_id, MODEL_ID)
                entry = self.state["models"][name] = {"display_name": model["display_name"], "versions": []}
            version_id = str(len(entry["versions"]) + 1)
            aliases = list(model.get("version_aliases", []))
            if not entry["versions"]:
                aliases.append("default")
            for alias in aliases:
                self._drop_alias(entry, alias)
            entry["versions"].append(
                {**model, "name": name, "version_id": version_id, "version_aliases": aliases, "create_time": _now()}
            )
            self.save()
            return name, version_id

    @staticmethod
    def _drop_alias(entry: dict, alias: str) -> None:
        for version in entry["versions"]:
            if alias in version["version_aliases"]:
                version["version_aliases"].remove(alias)

    def _model(self, name: str) -> dict:
        entry = self.state["models"].get(self.canonical(name))
        if entry is None:
            raise ApiError("NOT_FOUND", f"model {name} not found")
        return entry

    def versions(self, name: str) -> list[dict]:
        """Every version of the model `name` (`.../models/ID`), oldest first."""
        if "@" in name:
            raise ApiError("INVALID_ARGUMENT", f"{name}: name the model, without a version")
        with self.lock:
            entry = self._model(name)
            return [{**v, "display_name": entry["display_name"]} for v in entry["versions"]]

    def version(self, name: str) -> dict:
        """`.../models/ID`, `...@VERSION` or `...@ALIAS` (no suffix: the default version)."""
        base, _, wanted = self.canonical(name).partition("@")
        with self.lock:
            entry = self._model(base)
            wanted = wanted or "default"
            for version in entry["versions"]:
                if wanted == version["version_id"] or wanted in version["version_aliases"]:
                    return {**version, "display_name": entry["display_name"]}
        raise ApiError("NOT_FOUND", f"model {name} not found: no version or alias {wanted!r}")

    @staticmethod
    def ordered(items: list[dict], order_by: str, created: str = "create_time") -> list[dict]:
        """Vertex's `order_by`: comma-separated fields, each optionally followed by `desc` (an update is a
        creation here; `created`: the item's creation time field)."""
        keys = []
        for part in (p.split() for p in order_by.split(",") if p.strip()):
            if part[0] not in ORDER_FIELDS or len(part) > 2 or (len(part) == 2 and part[1] != "desc"):
                raise ApiError("INVALID_ARGUMENT", f"order_by {order_by!r}: use {', '.join(ORDER_FIELDS)} [desc]")
            keys.append(("display_name" if part[0] == "display_name" else created, len(part) == 2))
        for field, descending in reversed(keys):
            items = sorted(items, key=lambda item: item[field], reverse=descending)
        return items

    def list_models(self, parent: str, display_name: str | None, order_by: str = "") -> list[dict]:
        self.check_parent(parent)
        with self.lock:
            found = [  # a model's default version, and when the model was created (its first version)
                {**self.version(name), "model_create_time": entry["versions"][0]["create_time"]}
                for name, entry in self.state["models"].items()
                if display_name is None or entry["display_name"] == display_name
            ]
        return self.ordered(found, order_by, "model_create_time")

    def merge_aliases(self, name: str, aliases: list[str]) -> dict:
        base, _, version_id = self.canonical(name).partition("@")
        if not version_id or not version_id.isdigit():
            raise ApiError("INVALID_ARGUMENT", f"{name}: name a version with its id (MODEL@VERSION_ID)")
        with self.lock:
            entry = self._model(base)
            target = next((v for v in entry["versions"] if v["version_id"] == version_id), None)
            if target is None:
                raise ApiError("NOT_FOUND", f"model version {name} not found")
            for alias in aliases:
                if alias == "-default":
                    raise ApiError("INVALID_ARGUMENT", "the default alias cannot be removed")
                if alias.startswith("-"):
                    if alias[1:] in target["version_aliases"]:
                        target["version_aliases"].remove(alias[1:])
                else:
                    self._drop_alias(entry, alias)
                    target["version_aliases"].append(alias)
            self.save()
            return {**target, "display_name": entry["display_name"]}

    # --- endpoints -----------------------------------------------------------------------------------------------

    def create_endpoint(self, parent: str, endpoint: dict, endpoint_id: str = "") -> dict:
        self.check_parent(parent)
        if not endpoint.get("display_name"):
            raise ApiError("INVALID_ARGUMENT", "endpoint.display_name is required")
        with self.lock:
            name = self._own_id("endpoints", endpoint_id, ENDPOINT_ID)
            self.state["endpoints"][name] = {
                **endpoint,
                "name": name,
                "deployed_models": [],
                "traffic_split": {},
                "create_time": _now(),
            }
            self.save()
            return self.state["endpoints"][name]

    def endpoint(self, name: str) -> dict:
        with self.lock:
            if self.canonical(name) not in self.state["endpoints"]:
                raise ApiError("NOT_FOUND", f"endpoint {name} not found")
            return self.state["endpoints"][self.canonical(name)]

    def delete_endpoint(self, name: str) -> None:
        """Remove an endpoint; one with deployed models is refused, as Vertex refuses it."""
        with self.lock:
            endpoint = self.endpoint(name)
            if endpoint["deployed_models"]:
                ids = ", ".join(d["id"] for d in endpoint["deployed_models"])
                raise ApiError(
                    "FAILED_PRECONDITION",
                    f"endpoint {name} has deployed models ({ids}): undeploy them before deleting the endpoint",
                )
            del self.state["endpoints"][self.canonical(name)]
            self.save()

    def list_endpoints(self, parent: str, display_name: str | None, order_by: str = "") -> list[dict]:
        self.check_parent(parent)
        with self.lock:
            found = [
                e for e in self.state["endpoints"].values() if display_name is None or e["display_name"] == display_name
            ]
        return self.ordered(found, order_by)

    @staticmethod
    def check_split(split: dict, ids: set) -> dict:
        split = {k: int(v) for k, v in split.items()}
        unknown = sorted(set(split) - ids)
        if unknown:
            raise ApiError("INVALID_ARGUMENT", f"traffic_split names deployed models that do not exist: {unknown}")
        if split and sum(split.values()) != 100:
            raise ApiError("INVALID_ARGUMENT", f"traffic_split must sum to 100, got {sum(split.values())}: {split}")
        return {k: v for k, v in split.items() if v}

    def plan_deploy(self, endpoint_name: str, deployed_model: dict, split: dict) -> tuple[dict, dict]:
        """Validate a DeployModel request; return the version to serve and the traffic split it will set."""
        endpoint = self.endpoint(endpoint_name)
        if not deployed_model.get("model"):
            raise ApiError("INVALID_ARGUMENT", "deployed_model.model is required")
        version = self.version(deployed_model["model"])
        ids = {d["id"] for d in endpoint["deployed_models"]}
        if not split:
            split = {"0": 100} if not ids else {}
        final = self.check_split(split, ids | {"0"})
        if not final.get("0") and not ids:
            raise ApiError("INVALID_ARGUMENT", "the first model deployed on an endpoint must get traffic")
        return version, final

    def add_deployed(self, endpoint_name: str, deployed: dict, split: dict) -> None:
        """The deployed model added with the split its request asked for (checked again: another deploy or undeploy
        may have changed the endpoint since the request was checked)."""
        with self.lock:
            endpoint = self.endpoint(endpoint_name)
            split = self.check_split(split, {d["id"] for d in endpoint["deployed_models"]} | {"0"})
            endpoint["deployed_models"].append(deployed)
            endpoint["traffic_split"] = {(deployed["id"] if k == "0" else k): v for k, v in split.items()}
            self.save()

    def set_traffic(self, endpoint_name: str, split: dict) -> dict:
        with self.lock:
            endpoint = self.endpoint(endpoint_name)
            endpoint["traffic_split"] = self.check_split(split, {d["id"] for d in endpoint["deployed_models"]})
            self.save()
            return endpoint

    def remove_deployed(self, endpoint_name: str, deployed_model_id: str, split: dict) -> dict:
        with self.lock:
            endpoint = self.endpoint(endpoint_name)
            ids = {d["id"] for d in endpoint["deployed_models"]}
            if deployed_model_id not in ids:
                raise ApiError("NOT_FOUND", f"deployed model {deployed_model_id} is not on {endpoint_name}")
            traffic = self.check_split(split, ids) if split else endpoint["traffic_split"]
            if traffic.get(deployed_model_id):
                raise ApiError(
                    "FAILED_PRECONDITION",
                    f"deployed model {deployed_model_id} still serves {traffic[deployed_model_id]} % of the traffic",
                )
            endpoint["deployed_models"] = [d for d in endpoint["deployed_models"] if d["id"] != deployed_model_id]
            endpoint["traffic_split"] = traffic
            self.save()
            return endpoint
