"""What the double's services share: the registry (registry.py), IAM and the enabled APIs (iam.py), the log of
requests, the errors answered, the transient refusals it answers a share of the calls with (`faults`), Vertex's checks
of a request (rules.py) and where Vertex copies a model's artifacts."""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time

from pipelines.rehearsal import rules
from pipelines.rehearsal.iam import VERTEX_API, Iam
from pipelines.rehearsal.registry import ApiError, Registry

QUOTA = (
    "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit 'Resource management (CRUD) "
    "requests per minute per region' of service 'aiplatform.googleapis.com'"
)
UNAVAILABLE = "The service is currently unavailable."


class Context:
    def __init__(
        self,
        directory: str,
        state_path: str,
        project: str,
        project_number: str,
        location: str,
        log=print,
        caller: str = "",
        faults: float = 0.0,
        seed: int | None = None,
        platform=None,
    ):
        """`directory`: this rehearsal's requests, job and container logs; `state_path`: the registry and
        endpoints, shared by successive rehearsals (iam.json beside it); resource names carry `project_number`
        (Vertex answers names with the project's number; requests may use either); `caller`: the service account
        the run's steps act as (default: the project's Compute Engine default account); `faults`: the share of the
        project's own calls answered with a transient refusal (`fault`), drawn from a generator seeded with `seed`;
        `platform`: the config's, whose set-up a new iam.json gets (iam.py; None: the defaults)."""
        if not 0 <= faults < 1:
            raise ValueError(f"the share of calls refused must be in [0, 1), got {faults}")
        self.directory, self.location, self.log = directory, location, log
        os.makedirs(directory, exist_ok=True)
        self.registry = Registry(state_path, project, location, project_number)
        self.iam = Iam(os.path.join(os.path.dirname(state_path), "iam.json"), caller, project_number, platform)
        self.requests_path = os.path.join(directory, "vertex_requests.jsonl")
        self.lock = threading.Lock()
        self.sequence = itertools.count(1)
        self.errors: list[dict] = []  # every error answered or job failed: {"method", "message", "time"}
        self.faults, self.refused = faults, 0
        self._draws = random.Random(seed)

    def record(self, api: str, method: str, request: dict) -> None:
        """One JSON line of `requests_path`: {"seq", "time", "api" ("grpc" or "rest"), "method", "request"}."""
        with self.lock, open(self.requests_path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "seq": next(self.sequence),
                        "time": round(time.time(), 3),
                        "api": api,
                        "method": method,
                        "request": request,
                    }
                )
                + "\n"
            )

    def fault(self) -> ApiError | None:
        """For a share `faults` of the calls, what Vertex answers while busy: RESOURCE_EXHAUSTED (429, a quota) or
        UNAVAILABLE (503), one or the other at even odds; else None."""
        if not self.faults:
            return None
        with self.lock:
            if self._draws.random() >= self.faults:
                return None
            self.refused += 1
            quota = self._draws.random() < 0.5
        return ApiError("RESOURCE_EXHAUSTED", QUOTA) if quota else ApiError("UNAVAILABLE", UNAVAILABLE)

    def error(self, method: str, message: str) -> None:
        self.errors.append({"method": method, "message": message, "time": time.time()})
        self.log(f"[vertex] {method}: {message}")

    def authorize(self, permission: str, resource: str) -> None:
        """What Google checks of every call before Vertex AI answers it: the API is enabled in the project, and the
        caller holds `permission` ("": none needed) on `resource` (a resource name: the request's parent or name)."""
        refused = self.iam.enabled(VERTEX_API)
        if not refused and permission:
            refused = self.iam.permitted(permission, f"//{VERTEX_API}/{resource}")
        if refused:
            raise ApiError("PERMISSION_DENIED", refused)

    def check(self, request: dict) -> None:
        """What Vertex checks in a request's identity, locations and resources (rules.py), whether the caller may
        act as the service account it names and whether Vertex AI's service agent may use its key (iam.py)."""
        problem = (
            rules.identity(request, self.location, self.registry.project_ids)
            or rules.placement(request, self.location)
            or rules.locations(request)
            or rules.resources(request)
        )
        if problem:
            raise ApiError("INVALID_ARGUMENT", problem)
        for _, part in rules.identity_parts(request):
            account = part.get("service_account", "")
            denied = account and self.iam.act_as(account)
            if denied:
                raise ApiError("PERMISSION_DENIED", denied)
            key = part.get("encryption_spec", {}).get("kms_key_name", "")
            refused = key and self.iam.vertex_key(key)
            if refused:
                raise ApiError("INVALID_ARGUMENT", refused)

    def create_dataflow_job(self, project: str, location: str, job: dict) -> dict:
        """Dataflow's `projects.locations.jobs.create` of the data prep's job (which the rehearsal runs on Beam's
        direct runner): refused as Dataflow refuses it (iam.py `dataflow_job`), else the job, its ID given."""
        worker = job.get("environment", {}).get("serviceAccountEmail", "")
        refused = self.iam.dataflow_job(project, location, worker)
        if refused:
            raise ApiError(*refused)
        job_id = f"{time.strftime('%Y-%m-%d_%H_%M_%S', time.gmtime())}-{next(self.sequence)}"
        return {**job, "id": job_id, "projectId": project, "location": location, "currentState": "JOB_STATE_PENDING"}

    def model_copy(self, owner: str) -> str:
        """Where a model's artifacts are copied for the container of a deployment or a batch job (`owner`), its
        AIP_STORAGE_URI: Vertex copies them into a bucket of its own, and deletes the copy when the model is
        undeployed or the job ends."""
        return f"gs://caip-tenant-{self.registry.parent.split('/')[1]}/{owner}/model"
