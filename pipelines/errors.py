"""The exceptions of tfpipe's public API (pipelines.api), one base and one class per kind of failure. Each carries
the one line the CLI prints after `Error:` as its message. `typed` turns an error of a cloud call into one of them
(its line: pipelines/cloud_errors.py)."""

from __future__ import annotations


class TfpipeError(Exception):
    """A tfpipe operation failed; `str(error)` says what failed and why, on one line: `reason`, after the name of
    the `argument` it is about when it is about one (the CLI names the option instead)."""

    def __init__(self, reason: str, argument: str | None = None):
        super().__init__(f"{argument}: {reason}" if argument else reason)
        self.reason = reason
        self.argument = argument


class ConfigError(TfpipeError, ValueError):
    """The configuration, or an argument standing for part of it, is invalid."""


class MissingArgument(ConfigError):
    """An argument with no value given and no config field to fall back on: `argument=`, else `fallback`."""

    def __init__(self, argument: str, fallback: str, example: str):
        super().__init__(f"is required (or {fallback}), e.g. {argument}={example}", argument)
        self.fallback = fallback
        self.example = example

    def __str__(self) -> str:
        return f"{self.argument} {self.reason}"


class DataError(TfpipeError, ValueError):
    """The data a run reads is missing or unusable."""


class CredentialsError(TfpipeError):
    """Google Cloud credentials are missing or were refused."""


class CloudError(TfpipeError):
    """A call to a cloud service (Vertex AI, Kubeflow Pipelines, Artifact Registry) failed, or a run there did not
    succeed."""


def typed(error: BaseException) -> TfpipeError | None:
    """`error` as a TfpipeError when it is one or a cloud call ended in it (its one line as message), else None."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    from pipelines.cloud_errors import describe

    if isinstance(error, TfpipeError):
        return error
    message = describe(error)
    if message is None:
        return None
    refused = (auth.DefaultCredentialsError, auth.RefreshError, api.Unauthorized)
    return (CredentialsError if isinstance(error, refused) else CloudError)(message)
