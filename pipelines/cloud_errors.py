"""The one line for an error of a cloud call: missing or refused credentials, a missing resource, a denied
permission, a quota, an API or host that cannot be reached. `describe` makes it, starting with what the command was
doing (pipelines/actions.py); pipelines.errors.typed makes it the message of the API's exception, which the CLI
prints."""

from __future__ import annotations

import re
import urllib.parse

from pipelines.actions import action_of

LOGIN = (
    "run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
)
QUOTAS = "https://console.cloud.google.com/iam-admin/quotas"
_PERMISSION = re.compile(
    r"[Pp]ermission ['\"]?([a-z]+(?:\.[a-zA-Z]+){2,})['\"]? (?:was )?denied|does not have ([a-z]+(?:\.[a-zA-Z]+){2,}) access"
)
_ERRNO = re.compile(r"\[Errno [^\]]+\] ([^'\")]+)")


def describe(error: BaseException) -> str | None:
    """The one line for `error` when a cloud call ended in it (with what the command was doing), else None."""
    from google.auth import exceptions as auth

    if isinstance(error, auth.DefaultCredentialsError):  # about the caller, whatever the command was doing
        return f"no usable Google Cloud credentials ({_sentence(error)}): {LOGIN}"
    if isinstance(error, auth.RefreshError):
        return f"Google Cloud refused the credentials ({_sentence(error)}): {LOGIN}"
    message = _message(error)
    action = action_of(error)
    return f"{action}: {message}" if message and action else message


def _message(error: BaseException) -> str | None:
    import kfp_server_api
    import requests
    import urllib3
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    if isinstance(error, api.RetryError):
        cause = (error.cause and _message(error.cause)) or _line(str(error.cause or "no answer"))
        return f"gave up retrying ({_line(error.message)}): {cause}"
    if isinstance(error, requests.HTTPError) and error.response is not None:
        error = _from_http(error.response)
    if isinstance(error, api.GoogleAPICallError):
        return _api_message(error)
    if isinstance(error, kfp_server_api.ApiException):
        detail = _body(error.body)
        return f"Kubeflow Pipelines answered {error.status} {error.reason}" + (f": {detail}" if detail else "")
    if isinstance(error, auth.TransportError):
        reason = error.__cause__ and _message(error.__cause__)
        return f"cannot get a Google Cloud access token: {reason or _line(str(error))}"
    if isinstance(error, requests.Timeout):
        return f"no answer in time from {_host(error.request.url if error.request else '')}"
    if isinstance(error, requests.ConnectionError):  # wraps urllib3's error, which names the host and the reason
        inner = error.args[0] if error.args and isinstance(error.args[0], Exception) else None
        url = error.request.url if error.request else ""
        return (inner and _message(inner)) or f"cannot reach {_host(url)}: {_reason(error)}"
    if isinstance(error, urllib3.exceptions.MaxRetryError):
        where = f"{error.pool.scheme}://{error.pool.host}:{error.pool.port}" if error.pool else _host(error.url or "")
        return f"cannot reach {where}: {_reason(error.reason)}"
    if isinstance(error, (requests.RequestException, urllib3.exceptions.HTTPError)):  # a dropped connection, ...
        return f"the request failed: {_line(str(error))}"
    return None


def _api_message(error) -> str:
    """A Google API error by kind: its status and message, with the permission, resource or API it names."""
    from google.api_core import exceptions as api

    text = _line(f"{error.code} {error.message}")
    metadata = error.metadata or {}
    if isinstance(error, api.Unauthorized):
        return f"Google Cloud refused the credentials ({text}): {LOGIN}"
    if isinstance(error, api.Forbidden) and error.reason == "SERVICE_DISABLED":
        service = metadata.get("service", "the API")
        consumer = metadata.get("consumer", "the project")
        return f"{service} is not enabled in {consumer}: run 'gcloud services enable {service}' ({text})"
    if isinstance(error, api.Forbidden):
        match = _PERMISSION.search(error.message or "")
        permission = metadata.get("permission") or (match and (match.group(1) or match.group(2)))
        return f"permission denied{f' (needs {permission})' if permission else ''}: {text}"
    if isinstance(error, api.NotFound):
        resource = next((d.resource_name for d in error.details if getattr(d, "resource_name", "")), "")
        return f"not found{f' ({resource})' if resource and resource not in text else ''}: {text}"
    if isinstance(error, api.TooManyRequests):
        return f"quota exceeded or too many requests: {text} (retry later, or ask for more quota: {QUOTAS})"
    if isinstance(error, (api.ServiceUnavailable, api.GatewayTimeout)):
        return f"the service is unreachable or did not answer: {text} (check the network and the location, then retry)"
    return text


def _from_http(response):
    """The Google API error of an HTTP error response (the JSON error of a Google API, or any other body)."""
    from google.api_core import exceptions as api

    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return api.from_http_response(response)
    method = response.request.method if response.request is not None else ""
    return api.from_http_status(response.status_code, f"{method} {response.url}: {_body(response.text)}".strip())


def _body(body) -> str:
    """An HTTP error body's message: a JSON body's message or error, else its first line."""
    import json

    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        text = str(data.get("message") or data.get("error") or text)
    return _line(text.strip().splitlines()[0] if text.strip() else "")


def _reason(error) -> str:
    """Why a connection failed, without the pool and object names: "Connection refused", "timed out", ..."""
    text = str(error)
    match = _ERRNO.search(text)
    if match:
        return match.group(1).strip()
    return "timed out" if "timed out" in text else _line(text)


def _host(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url or "the server"


def _sentence(error: BaseException) -> str:
    """The first sentence of an error's first argument (google.auth puts a long explanation after it)."""
    text = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    return re.split(r"\.(?:\s|$)", _line(text), maxsplit=1)[0]


def _line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", str(text).strip())
