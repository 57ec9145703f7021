"""Deploy on a TF-Serving-compatible server watching a model repository, shared by the self-hosted deploy steps:
serve a published version (the local server, started or reused through `serving.lifecycle`, or the server at a
URL, only checked), wait until it is AVAILABLE, send a smoke prediction and compare it with the SavedModel's own
answer; on any failure remove the new version (rollback) so that the server falls back to the previous one.

A local server replacing versions resource-preserving unloads the previous version before the new one loads: the
checks address the new version only, so the gap (NOT_FOUND for the model) is waited through, not a failure; a
failure then has left no version serving until the rollback reloads the previous one, which the error says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from components.lib.deploy.smoke import SmokeCheck, SmokeResult, reference_checks, smoke_record
from serving import lifecycle
from serving.models import Transition
from serving.tls import DEFAULT_CLIENT_TLS, ClientTls


class DeployError(RuntimeError):
    """The new version could not be served; it has been rolled back."""


@dataclass(frozen=True)
class Deployment:
    """A version served and smoke-tested: the server (`pid`, `log` and `started` None/None/False for a server at a
    URL; `started`: this deploy launched it), the version and the smoke results of each signature checked; `stop`:
    the command that stops a local server ("" for a server at a URL); `unloaded_first`: the previous version a
    resource-preserving local server unloaded before this one loaded (None: no gap)."""

    rest_url: str
    grpc_target: str
    pid: int | None
    log: str | None
    started: bool
    model_name: str
    version: int
    base_path: str
    smoke: list[SmokeResult]
    stop: str
    unloaded_first: int | None = None

    def as_json(self) -> dict:
        """The deploy record: the server's fields, the version, the smoke record (`smoke_record`), `stop` and
        `unloaded_first`."""
        return {
            "rest_url": self.rest_url,
            "grpc_target": self.grpc_target,
            "pid": self.pid,
            "log": self.log,
            "started": self.started,
            "model_name": self.model_name,
            "version": self.version,
            "base_path": self.base_path,
            "smoke": smoke_record(self.smoke),
            "stop": self.stop,
            "unloaded_first": self.unloaded_first,
        }

    def gap(self) -> str:
        """The step's line about a resource-preserving replacement ("" without one)."""
        if self.unloaded_first is None:
            return ""
        return (
            f"resource-preserving: {self.model_name} version {self.unloaded_first} was unloaded before version "
            f"{self.version} loaded (requests in between got NOT_FOUND)"
        )


def wait_available(
    rest_url: str, model_name: str, version: int, timeout: float = 180, tls: ClientTls = DEFAULT_CLIENT_TLS
) -> None:
    """Until the server reports `version` AVAILABLE; a load error fails at once (END without an error is a version
    unloaded earlier that may load again, e.g. after a rollback). An https server is reached with `tls`."""
    import requests

    deadline, last = time.time() + timeout, "no answer"
    while time.time() < deadline:
        try:
            response = _version_status(rest_url, model_name, version, tls)
            if response.status_code == 200:
                (status,) = response.json()["model_version_status"]
                if status["state"] == "AVAILABLE":
                    return
                if status["state"] == "END" and status["status"]["error_code"] != "OK":
                    raise DeployError(f"version {version} failed to load: {status['status']['error_message']}")
                last = status["state"]
            else:
                last = response.json().get("error", response.text)
        except requests.exceptions.SSLError as e:  # a certificate that will not do now will not do later
            raise DeployError(f"TLS to {rest_url} failed: {_reason(e)}") from None
        except requests.RequestException as e:
            last = str(e)
        time.sleep(0.2)
    raise DeployError(f"version {version} was not AVAILABLE after {timeout:.0f}s (last: {last})")


def _version_status(rest_url: str, model_name: str, version: int, tls: ClientTls):
    """The server's answer to TF Serving's REST model status request for one version."""
    import requests

    return requests.get(f"{rest_url}/v1/models/{model_name}/versions/{version}", timeout=5, **tls.requests_options())


def _reason(error: Exception) -> str:
    """The innermost cause of a requests error (the SSL error's own words, without urllib3's retry wrapping)."""
    while error.__context__ is not None or error.__cause__ is not None:
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return str(error)


def smoke_test(
    rest_url: str, model_name: str, version: int, check: SmokeCheck, tls: ClientTls = DEFAULT_CLIENT_TLS
) -> SmokeResult:
    """Predict a check's examples through the server (TF Serving's REST API, over TLS with `tls`); its class ids must
    equal the SavedModel's."""
    import requests

    response = requests.post(
        f"{rest_url}/v1/models/{model_name}/versions/{version}:predict",
        json={"signature_name": check.signature, "instances": check.instances()},
        timeout=30,
        **tls.requests_options(),
    )
    body = response.json()
    if response.status_code != 200:
        raise DeployError(f"smoke prediction on {check.signature} failed ({response.status_code}): {body.get('error')}")
    return check.compare(body)


def deploy(
    version: int,
    version_path: str,
    data_dir: str,
    base: str,
    model_name: str,
    serving_url: str = "",
    rest_port: int = 8501,
    grpc_port: int = 8500,
    timeout: float = 180,
    ssl_config_file: str = "",
    tls: ClientTls = DEFAULT_CLIENT_TLS,
    version_policy: Transition = "availability-preserving",
) -> Deployment:
    """Serve `version` (already published) and check it; roll it back and raise DeployError on failure (an
    invalid `serving_url` too). `model_name` and `base` must be valid (core.names): InvalidName. A server the step
    launches serves over TLS with `ssl_config_file` (TF Serving's SSLConfig) and replaces versions with
    `version_policy`; a running local server with another policy is refused (DeployError naming it); the checks
    reach an https server with `tls`."""
    from components.lib.deploy.model_repository import remove_version
    from core import names

    names.model_name(model_name)  # also a line of the server's skip file and a URL path segment
    names.location(base, "model_repository")
    server: dict | None = None
    try:
        launched = None
        if serving_url:
            names.url(serving_url, "serving_url")
            server = {
                "rest_url": serving_url.rstrip("/"),
                "grpc_target": "",
                "pid": None,
                "log": None,
                "started": False,
            }
        elif (server := lifecycle.reuse_server(base, rest_port, grpc_port, model_name, version_policy)) is not None:
            server = {**server, "started": False}
        else:
            launched = lifecycle.launch_server(base, rest_port, grpc_port, ssl_config_file, version_policy)
        checks = reference_checks(version_path, data_dir)  # while a launched server starts
        if launched:
            server = {**lifecycle.wait_ready(launched, timeout), "started": True}
        assert server is not None  # one of the three branches above set it
        wait_available(server["rest_url"], model_name, version, timeout, tls)
        smokes = [smoke_test(server["rest_url"], model_name, version, check, tls) for check in checks]
        unloaded = _unloaded_first(server, base, model_name, version, version_policy, tls)
    except Exception as e:
        unloaded = _unloaded_first(server, base, model_name, version, version_policy, tls)
        remove_version(base, model_name, version)
        raise DeployError(
            f"deploying {model_name} version {version} failed, rolled back: {e}"
            + _restored(server, base, model_name, tls, unloaded)
        ) from e
    return Deployment(
        rest_url=server["rest_url"],
        grpc_target=server["grpc_target"],
        pid=server["pid"],
        log=server["log"],
        started=server["started"],
        model_name=model_name,
        version=version,
        base_path=base,
        smoke=smokes,
        stop=f"python -m pipelines stop-serving --model-base-path {base} --model-name {model_name}"
        if server["pid"]
        else "",
        unloaded_first=unloaded,
    )


def _unloaded_first(
    server: dict | None, base: str, model_name: str, version: int, version_policy: Transition, tls: ClientTls
) -> int | None:
    """The previous version (the newest below `version`) when a resource-preserving local server reports it
    unloaded (END): it went before `version` loaded. None for a server at a URL, a server that never loaded it, or
    availability-preserving."""
    import requests

    from components.lib.deploy.model_repository import versions

    if version_policy != "resource-preserving" or server is None or server["pid"] is None:
        return None
    previous = [v for v in versions(base, model_name) if v < version]
    if not previous:
        return None
    try:
        response = _version_status(server["rest_url"], model_name, previous[-1], tls)
    except requests.RequestException:
        return None  # the failure being reported says why the server could not be asked
    if response.status_code != 200 or response.json()["model_version_status"][0]["state"] != "END":
        return None
    return previous[-1]


def _restored(
    server: dict | None, base: str, model_name: str, tls: ClientTls, unloaded: int | None, timeout: float = 60
) -> str:
    """After a rollback: wait until the server is back on the previous version; say which one (or why not), and
    when a resource-preserving server had `unloaded` it first, that no version served in between."""
    from components.lib.deploy.model_repository import champion

    previous = champion(base, model_name)
    if server is None or previous is None:
        return ""
    gap = ""
    if unloaded is not None:
        gap = f"resource-preserving had unloaded version {unloaded} first: no version served {model_name} since; "
    try:
        wait_available(server["rest_url"], model_name, previous.number, timeout, tls)
    except DeployError as e:
        return f" ({gap}the previous version {previous.number} is not serving: {e})"
    return f" ({gap}serving version {previous.number} again)"
