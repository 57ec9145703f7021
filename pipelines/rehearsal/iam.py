"""The double's IAM: the service accounts of the rehearsal's project and who may act as each (the permission
`iam.serviceAccounts.actAs`, which `roles/iam.serviceAccountUser` grants), kept in `--state/iam.json`:

    {"service_accounts": {"runner@p.iam.gserviceaccount.com": {"act_as": ["serviceAccount:runner@p.iam..."]}}}

Vertex AI refuses a job or a deployment whose `service_account` its caller may not act as. A run's steps call
Vertex AI as the runs' service account, so that account needs act-as on itself (docs/guides/vertex.md's set-up grants it).
A rehearsal starts from that set-up: the runs' account (the config's, else the project's Compute Engine default
account) exists and may act as itself. Edit iam.json to rehearse another set-up: without the binding, the first job
is refused with Vertex's message.
"""

from __future__ import annotations

import json
import os


def compute_default(project_number: str) -> str:
    return f"{project_number}-compute@developer.gserviceaccount.com"


class Iam:
    def __init__(self, path: str, caller: str):
        """`caller`: the account the run's steps act as."""
        self.path, self.caller = path, caller
        state: dict = {"service_accounts": {}}
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
        self.accounts: dict = state["service_accounts"]
        if caller not in self.accounts:
            self.accounts[caller] = {"act_as": [f"serviceAccount:{caller}"]}
            with open(path, "w") as f:
                json.dump(state, f, indent=2)

    def act_as(self, account: str) -> str | None:
        """Vertex's message when the caller may not act as `account`, else None."""
        if f"serviceAccount:{self.caller}" in self.accounts.get(account, {}).get("act_as", []):
            return None
        return f"Permission 'iam.serviceAccounts.actAs' denied on service account {account} (or it may not exist)."
