"""The CLI's own Vertex AI reads repeat Vertex's transient refusals (core.retries): `schedule list`, through
aiplatform's SDK (which repeats its Get calls itself, not its lists), against the delivery tests' Vertex double whose
stubs fail as gRPC calls fail. Creates are not repeated: one line (tests/unit/pipelines/test_cli_errors.py)."""

import pytest
from click.testing import CliRunner
from google.cloud.aiplatform_v1.types import schedule as schedule_pb, schedule_service

from core import retries
from pipelines.cli import cli
from tests.doubles.gapic import quota, unavailable
from tests.helpers import delivery
from tests.helpers.delivery import (
    PARENT,
    schedule_answers,
)

anonymous, config, vertex, vertex_spec = delivery.anonymous, delivery.config, delivery.vertex, delivery.vertex_spec


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(retries, "INITIAL", 0.001)
    monkeypatch.setattr(retries, "MAXIMUM", 0.001)


def failing_first(vertex, rpc, failures):
    """`rpc` answers as before once `failures` (RpcFailure) have been raised, one a call."""
    answer, left = vertex.answers[rpc], list(failures)

    def call(request):
        if left:
            raise left.pop(0)
        return answer(request)

    vertex.answers[rpc] = call


def test_schedule_list_repeats_the_listing_vertex_refused(vertex, config):
    listed = schedule_pb.Schedule(
        name=f"{PARENT}/schedules/a",
        display_name="tfpipe-weekly",
        state=schedule_pb.Schedule.State.ACTIVE,
        cron="0 3 * * 1",
        create_pipeline_job_request={"parent": PARENT},
    )
    schedule_answers(vertex, [listed])
    failing_first(vertex, "list_schedules", [unavailable(), quota()])
    result = CliRunner().invoke(
        cli, ["schedule", "list", "--target", "vertex", "--config", config, "--profile", "prod"]
    )
    assert result.exit_code == 0, result.output
    assert [(c[0], c[1]) for c in vertex.calls] == [
        ("list_schedules", schedule_service.ListSchedulesRequest(parent=PARENT))
    ] * 3
    assert result.output.splitlines()[-1].split()[:2] == ["tfpipe-weekly", "ACTIVE"]
