"""The rehearsal's Vertex AI double refusing a share of the calls as a busy Vertex AI does (`--api-faults`): the
project's own calls get 429 RESOURCE_EXHAUSTED or 503 UNAVAILABLE, repeat them and end with Vertex's answer; the calls
of GCPC's launchers are answered as usual."""

import json

import pytest
from click.testing import CliRunner
from google.api_core import exceptions
from google.api_core.gapic_v1.client_info import ClientInfo
from google.cloud import aiplatform_v1

from components.lib.vertex.registry import find_resource
from core import retries
from pipelines.cli import cli
from pipelines.rehearsal import redirect
from pipelines.rehearsal.api import VertexDouble
from pipelines.rehearsal.api.context import QUOTA, UNAVAILABLE

PARENT = "projects/p-rehearsal/locations/europe-west4"
OPTIONS = {"api_endpoint": "europe-west4-aiplatform.googleapis.com"}


@pytest.fixture
def refusing(tmp_path, monkeypatch):
    """The double refusing half the calls (seeded), this process's GAPIC clients redirected to it."""
    monkeypatch.setattr(retries, "INITIAL", 0.001)
    monkeypatch.setattr(retries, "MAXIMUM", 0.001)
    double = VertexDouble(
        str(tmp_path),
        str(tmp_path / "state.json"),
        "p-rehearsal",
        "4711",
        "europe-west4",
        lambda line: None,
        faults=0.5,
        seed=3,
    ).start()
    try:
        with redirect.redirected(double.grpc_target, double.http_base, "p-rehearsal"):
            yield double
    finally:
        double.stop()


def test_the_projects_calls_are_refused_in_share_and_end_with_vertexs_answer(refusing):
    endpoint = refusing.registry.create_endpoint(PARENT, {"display_name": "e"})["name"]
    found = [find_resource("endpoint", "e", "p-rehearsal", "europe-west4") for _ in range(10)]
    assert found == [endpoint] * 10
    lines = [json.loads(line) for line in open(refusing.requests_path)]
    assert {line["method"] for line in lines} == {"EndpointService.ListEndpoints"}
    assert len(lines) == 10 + refusing.refused and refusing.refused >= 3
    assert {e["message"] for e in refusing.errors} == {QUOTA, UNAVAILABLE}

    client = aiplatform_v1.EndpointServiceClient(client_options=OPTIONS)
    answers = []
    for _ in range(20):  # one try each: what Vertex answers
        try:
            answers.append(client.get_endpoint(name=endpoint, retry=None).name)
        except (exceptions.ResourceExhausted, exceptions.ServiceUnavailable) as e:
            answers.append(type(e).__name__)
    assert set(answers) == {endpoint, "ResourceExhausted", "ServiceUnavailable"}


def test_gcpcs_launchers_calls_are_answered_as_usual(refusing):
    endpoint = refusing.registry.create_endpoint(PARENT, {"display_name": "e"})["name"]
    gcpc = aiplatform_v1.EndpointServiceClient(
        client_options=OPTIONS, client_info=ClientInfo(user_agent="google-cloud-pipeline-components")
    )
    assert [gcpc.get_endpoint(name=endpoint, retry=None).name for _ in range(20)] == [endpoint] * 20
    assert refusing.refused == 0


def test_the_share_is_below_one(tmp_path):
    with pytest.raises(ValueError, match=r"the share of calls refused must be in \[0, 1\), got 1"):
        VertexDouble(str(tmp_path), str(tmp_path / "s.json"), "p", "1", "us-central1", faults=1)
    result = CliRunner().invoke(cli, ["rehearse", "--api-faults", "1", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "Invalid value for '--api-faults': 1.0 is not in the range 0<=x<1." in result.output
