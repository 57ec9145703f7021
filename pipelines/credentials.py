"""The caller's Application Default Credentials, for what the CLI asks of Google Cloud. The commands that need them
look them up before they compile or send anything: without them, the CLI's one line comes at once."""

from __future__ import annotations

import re
from typing import Any

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
_ARTIFACT_REGISTRY = re.compile(r"https://[\w-]+-kfp\.pkg\.dev/")  # KFP's own test (kfp.registry's known hosts)


def application_default() -> Any:
    """The Application Default Credentials, scoped to cloud-platform (not refreshed: no call is made); google.auth's
    DefaultCredentialsError when there are none."""
    import google.auth

    return google.auth.default(scopes=[CLOUD_PLATFORM])[0]


def on_artifact_registry(url: str) -> bool:
    """Whether `url` is a KFP template registry of Artifact Registry (which takes these credentials)."""
    return bool(_ARTIFACT_REGISTRY.match(url))
