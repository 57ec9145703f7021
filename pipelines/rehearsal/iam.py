"""The double's IAM and enabled APIs, kept in `--state/iam.json`:

    {"project_number": "308452716099",
     "services": ["aiplatform.googleapis.com", ...],                 # the APIs enabled in the project
     "project_bindings": [{"role": "roles/aiplatform.user", "members": ["serviceAccount:runner@..."]}, ...],
     "key_bindings": {"projects/.../cryptoKeys/runs": [{"role": "roles/cloudkms.cryptoKeyEncrypterDecrypter",
                                                        "members": ["serviceAccount:service-N@gcp-sa-..."]}]},
     "service_agents": {"Vertex AI": "service-N@gcp-sa-aiplatform.iam.gserviceaccount.com", ...},
     "service_accounts": {"runner@p.iam.gserviceaccount.com": {"act_as": ["serviceAccount:runner@p.iam..."]}}}

The bindings take an IAM policy's form (a key's may name its key ring instead, whose grants hold for its keys); who
may act as an account is the permission `iam.serviceAccounts.actAs` on it (roles/iam.serviceAccountUser).

A rehearsal starts from what docs/guides/vertex.md's set-up grants, which is what `submit`'s pre-flight checks
(pipelines/preflight.py) require of a config: its APIs enabled, the runs' account (the config's, else the project's
Compute Engine default account) holding its roles in the project and acting as itself, and the service agents that
encrypt with the config's key holding roles/cloudkms.cryptoKeyEncrypterDecrypter on it. A file without one of these
sections (an older rehearsal's) gets that section from the set-up, and a caller it does not name (another config's
runs' account; `promote --rehearsal` acts as the Compute Engine default account) the set-up's roles and act-as. Edit the file to rehearse another set-up: a role
taken away, and the first call that needs one of its permissions is refused with Vertex's 403 naming the permission;
an API taken out of `services`, and its calls are refused as Google refuses a disabled API.
"""

from __future__ import annotations

import json
import os

from pipelines import preflight
from pipelines.rehearsal.state_files import write_json

# Vertex AI's methods the double serves, by the permission each needs (docs: Vertex AI IAM permissions)
VERTEX_READ = (
    "aiplatform.batchPredictionJobs.get",
    "aiplatform.customJobs.get",
    "aiplatform.endpoints.get",
    "aiplatform.endpoints.list",
    "aiplatform.hyperparameterTuningJobs.get",
    "aiplatform.models.get",
    "aiplatform.models.list",
)
VERTEX_USE = (
    *VERTEX_READ,
    "aiplatform.batchPredictionJobs.cancel",
    "aiplatform.batchPredictionJobs.create",
    "aiplatform.customJobs.cancel",
    "aiplatform.customJobs.create",
    "aiplatform.endpoints.create",
    "aiplatform.endpoints.delete",
    "aiplatform.endpoints.deploy",
    "aiplatform.endpoints.predict",
    "aiplatform.endpoints.undeploy",
    "aiplatform.endpoints.update",
    "aiplatform.hyperparameterTuningJobs.cancel",
    "aiplatform.hyperparameterTuningJobs.create",
    "aiplatform.models.update",
    "aiplatform.models.upload",
)
DATAFLOW_CREATE = "dataflow.jobs.create"
# predefined roles → the permissions of the double's methods they hold (Google's documented role contents)
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "roles/aiplatform.viewer": VERTEX_READ,
    "roles/aiplatform.user": VERTEX_USE,
    "roles/aiplatform.admin": VERTEX_USE,
    "roles/dataflow.developer": (DATAFLOW_CREATE,),
    "roles/dataflow.admin": (DATAFLOW_CREATE,),
    **{role: (*VERTEX_USE, DATAFLOW_CREATE) for role in preflight.BROAD_ROLES},
}
API_TITLES = {
    "aiplatform.googleapis.com": "Vertex AI API",
    "compute.googleapis.com": "Compute Engine API",
    "dataflow.googleapis.com": "Dataflow API",
}
VERTEX_API = "aiplatform.googleapis.com"
DATAFLOW_WORKER = preflight.DATAFLOW_ROLES[0]  # (role, roles that hold its permissions too, why)


def compute_default(project_number: str) -> str:
    return f"{project_number}-compute@developer.gserviceaccount.com"


def setup(platform, project_number: str, caller: str) -> dict:
    """The state docs/guides/vertex.md's set-up leaves for a run of `platform` as `caller`: what
    preflight.preflight checks (its required services, the runs' roles, act-as, the key's service agents)."""
    member, key, dataflow = (
        f"serviceAccount:{caller}",
        platform.encryption_spec_key_name,
        preflight.uses_dataflow(platform),
    )
    roles = preflight.RUNNER_ROLES + (preflight.DATAFLOW_ROLES if dataflow else ())
    agents = preflight.key_agents(project_number, dataflow)
    return {
        "project_number": project_number,
        "services": preflight.required_services(platform),
        "project_bindings": [{"role": role, "members": [member]} for role, _, _ in roles],
        "key_bindings": {key: [{"role": preflight.ENCRYPTER, "members": [f"serviceAccount:{a}" for a, _ in agents]}]}
        if key
        else {},
        "service_agents": {whose: agent for agent, whose in preflight.key_agents(project_number, True)},
        "service_accounts": {caller: {"act_as": [member]}},
    }


def disabled(service: str, project_number: str) -> str:
    """Google's answer to a call of a disabled API (403 SERVICE_DISABLED)."""
    title = API_TITLES.get(service, service)
    return (
        f"{title} has not been used in project {project_number} before or it is disabled. Enable it by visiting "
        f"https://console.developers.google.com/apis/api/{service}/overview?project={project_number} then retry. If "
        "you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry."
    )


class Iam:
    def __init__(self, path: str, caller: str, project_number: str, platform=None):
        """`caller`: the account the run's steps act as ("": the Compute Engine default account); `platform`: the
        config's (None: the defaults), whose set-up a new file, or a missing section of an older one, gets."""
        from pipelines.config.platform import Platform

        self.path, self.number = path, project_number
        self.caller = caller or compute_default(project_number)
        state: dict = {}
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
        fresh = setup(platform or Platform(), project_number, self.caller)
        added = {k: v for k, v in fresh.items() if k not in state}
        state.update(added)
        accounts = state["service_accounts"]
        if self.caller not in accounts:  # an account new to the file (another config's): the set-up's grants
            accounts[self.caller] = fresh["service_accounts"][self.caller]
            added["service_accounts"] = accounts
            member = f"serviceAccount:{self.caller}"
            for grant in fresh["project_bindings"]:
                binding = next((b for b in state["project_bindings"] if b["role"] == grant["role"]), None)
                if binding is None:
                    state["project_bindings"].append({"role": grant["role"], "members": [member]})
                elif member not in binding.setdefault("members", []):
                    binding["members"].append(member)
        if added:
            write_json(path, state, indent=2)
        self.state = state
        self.accounts: dict = accounts

    def _roles(self, member: str) -> set[str]:
        return {b["role"] for b in self.state["project_bindings"] if member in b.get("members", [])}

    def enabled(self, service: str) -> str | None:
        """Google's refusal when `service` is disabled in the project, else None."""
        return None if service in self.state["services"] else disabled(service, self.number)

    def permitted(self, permission: str, resource: str, account: str = "") -> str | None:
        """Vertex's refusal when `account` (default: the caller) holds no role granting `permission` in the project,
        else None; `resource`: the full name it is checked on (//SERVICE/NAME)."""
        roles = self._roles(f"serviceAccount:{account or self.caller}")
        if any(permission in ROLE_PERMISSIONS.get(role, ()) for role in roles):
            return None
        return f"Permission '{permission}' denied on resource '{resource}' (or it may not exist)."

    def act_as(self, account: str) -> str | None:
        """Vertex's message when the caller may not act as `account`, else None."""
        if f"serviceAccount:{self.caller}" in self.accounts.get(account, {}).get("act_as", []):
            return None
        return f"Permission 'iam.serviceAccounts.actAs' denied on service account {account} (or it may not exist)."

    def vertex_key(self, key: str) -> str | None:
        """Vertex's refusal of a resource encrypted with `key` when its service agent may not use the key (granted on
        the key or its key ring), else None."""
        agent = self.state["service_agents"].get("Vertex AI", "")
        ring = key.rsplit("/cryptoKeys/", 1)[0]
        bindings = [b for name in (key, ring) for b in self.state["key_bindings"].get(name, [])]
        if any(
            b["role"] == preflight.ENCRYPTER and f"serviceAccount:{agent}" in b.get("members", []) for b in bindings
        ):
            return None
        return (
            f"Provided CryptoKey {key} cannot be used in Vertex AI service. Please make sure the CryptoKey is enabled "
            f"and Vertex AI service account `{agent}` has Encryption and Decryption access to the CryptoKey."
        )

    def dataflow_job(self, project: str, location: str, worker: str) -> tuple[str, str] | None:
        """Dataflow's refusal (status, message) of a job the caller creates with `worker` ("": the Compute Engine
        default account) as its workers' account, else None: its APIs enabled, the caller's dataflow.jobs.create and
        act-as on the worker account, the worker account's roles/dataflow.worker."""
        for service in ("dataflow.googleapis.com", "compute.googleapis.com"):
            refused = self.enabled(service)
            if refused:
                return "PERMISSION_DENIED", refused
        refused = self.permitted(DATAFLOW_CREATE, f"//dataflow.googleapis.com/projects/{project}/locations/{location}")
        worker = worker or compute_default(self.number)
        refused = refused or self.act_as(worker)
        if refused:
            return "PERMISSION_DENIED", refused
        role, also, _ = DATAFLOW_WORKER
        if not self._roles(f"serviceAccount:{worker}") & {role, *also, *preflight.BROAD_ROLES}:
            return "FAILED_PRECONDITION", (
                "Workflow failed. Causes: Permissions verification for controller service account failed. All "
                f"permissions in IAM role {role} should be granted to controller service account {worker}."
            )
        return None
