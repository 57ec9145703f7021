"""tfpipe's public Python API: the CLI's verbs as functions that take the configuration (a `Config`, or the path of
a YAML file) and return typed results, and the exceptions they raise. The names of `__all__` are the stable ones;
docs/reference/python-api.md lists each with its signature. The CLI (`python -m pipelines`) is a thin layer over
these functions.

    from pipelines import api

    config = api.load_config("tfpipe.yaml", overrides={"parameters.epochs": 2})
    summary = api.run_locally(config)
    run = api.submit("vertex", config)

Progress lines go to the `log` argument of the verbs that have one (default: the `tfpipe` logger at INFO)."""

from pipelines.api.cloud import (
    PreflightError,
    delete,
    delete_endpoint,
    list_schedules,
    pause,
    promote,
    publish,
    resume,
    rollback,
    schedule,
    submit,
    undeploy,
)
from pipelines.api.local import compile, load_config, rehearse, render, run_locally
from pipelines.api.results import (
    Compiled,
    Endpoint,
    Gate,
    Published,
    RegisteredVersion,
    RehearsalSummary,
    RunSummary,
    Scheduled,
    StepResult,
    SubmittedRun,
)
from pipelines.config import Config
from pipelines.delivery.base import Schedules
from pipelines.errors import CloudError, ConfigError, CredentialsError, DataError, TfpipeError

__all__ = [
    "CloudError",
    "Compiled",
    "Config",
    "ConfigError",
    "CredentialsError",
    "DataError",
    "Endpoint",
    "Gate",
    "PreflightError",
    "Published",
    "RegisteredVersion",
    "RehearsalSummary",
    "RunSummary",
    "Scheduled",
    "Schedules",
    "StepResult",
    "SubmittedRun",
    "TfpipeError",
    "compile",
    "delete",
    "delete_endpoint",
    "list_schedules",
    "load_config",
    "pause",
    "promote",
    "publish",
    "rehearse",
    "render",
    "resume",
    "rollback",
    "run_locally",
    "schedule",
    "submit",
    "undeploy",
]
