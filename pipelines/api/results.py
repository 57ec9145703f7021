"""What the API's verbs return: typed values, each holding what the CLI prints of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.cron import Cron


@dataclass(frozen=True)
class Compiled:
    """A compiled pipeline: its file and its inputs (name → the template's input definition: type, default)."""

    path: str
    parameters: dict[str, Any]
    warning: str | None = None  # Vertex: the images given by tag rather than digest, on one line


@dataclass(frozen=True)
class StepResult:
    """One step of a run: its name, how it ended and how long it took."""

    name: str
    status: str  # SUCCEEDED, FAILED, CACHED, SKIPPED
    seconds: float


@dataclass(frozen=True)
class Gate:
    """The evaluation gate's decision."""

    blessed: bool
    reason: str


@dataclass(frozen=True)
class RegisteredVersion:
    """The model version the run published to the repository (or registry)."""

    model_name: str
    version: int | str
    path: str


@dataclass(frozen=True)
class Endpoint:
    """Where the run's model is served."""

    model_name: str
    served_version: int | None
    rest_url: str
    grpc_target: str | None


@dataclass(frozen=True)
class RunSummary:
    """A local run or rehearsal: `status` SUCCEEDED or FAILED (`error`: why), its steps, metrics (val_accuracy,
    test_accuracy, test_loss; None when unknown), gate, registered version and endpoint (None when the run made
    none), its output folder and `details`: the whole run_summary.json."""

    status: str
    error: str | None
    steps: list[StepResult]
    metrics: dict[str, float | None]
    gate: Gate | None
    registered: RegisteredVersion | None
    endpoint: Endpoint | None
    out: Path
    details: dict[str, Any] = field(repr=False)

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"

    @classmethod
    def of(cls, summary: dict[str, Any], out: Path) -> RunSummary:
        return cls(**_fields(summary, out))


@dataclass(frozen=True)
class RehearsalSummary(RunSummary):
    """A rehearsal's run summary and the Vertex AI requests its steps made, in order (method, path, status, ...)."""

    vertex_requests: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, summary: dict[str, Any], out: Path) -> RehearsalSummary:
        log = Path(summary["vertex"]["requests"])
        requests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return cls(**_fields(summary, out), vertex_requests=requests)


def _fields(s: dict[str, Any], out: Path) -> dict[str, Any]:
    gate, registry, endpoint = s.get("gate"), s.get("registry"), s.get("endpoint")
    return {
        "status": s["status"],
        "error": s.get("error"),
        "steps": [StepResult(x["name"], x["status"], x["seconds"]) for x in s["steps"]],
        "metrics": dict(s.get("metrics") or {}),
        "gate": gate and Gate(gate["blessed"], gate["reason"]),
        "registered": registry and RegisteredVersion(registry["model_name"], registry["version"], registry["path"]),
        "endpoint": endpoint
        and Endpoint(endpoint["model_name"], endpoint["served_version"], endpoint["rest_url"], endpoint["grpc_target"]),
        "out": out,
        "details": s,
    }


@dataclass(frozen=True)
class SubmittedRun:
    """A run just created on Vertex AI or Kubeflow Pipelines: `name` (the PipelineJob's resource name or the KFP
    run id), `url` (its console page), `state` (asked of the service each time) and `wait`."""

    name: str
    url: str
    _state: Callable[[], str] = field(repr=False)
    _wait: Callable[[float, Callable[[str], None]], None] = field(repr=False)

    @property
    def state(self) -> str:
        """The run's state now (Vertex: PIPELINE_STATE_RUNNING, ...; Kubeflow: RUNNING, ...)."""
        from pipelines.api._common import cloud_call

        with cloud_call():
            return self._state()

    def wait(self, poll_seconds: float = 30.0, log: Callable[[str], None] | None = None) -> None:
        """Follow the run until it ends, logging each new state; CloudError unless it succeeded."""
        from pipelines.api._common import cloud_call, logger

        with cloud_call():
            self._wait(poll_seconds, log or logger)


@dataclass(frozen=True)
class Scheduled:
    """A schedule created (or replaced): its display name, the template it runs, when, and the next three runs."""

    name: str
    template: str
    source: str
    cron: Cron
    next_runs: list[str]
    time_zone: str


@dataclass(frozen=True)
class Published:
    """A template uploaded to a KFP template registry: its package, version, tags and where each tag points."""

    package: str
    version: str
    source: str
    tags: list[str]
    urls: list[str]
    warning: str | None = None
