"""pipelines.api, the public Python API: typed results instead of printed lines, and one exception family whose
messages are the CLI's `Error:` lines. Cloud verbs go through the delivery tests' Vertex double (its gRPC stubs);
credentials are looked up for real, in an environment that has none."""

import pytest
import yaml
from google.cloud.aiplatform_v1.types import pipeline_state as states

from pipelines import api
from tests.helpers import delivery
from tests.helpers.delivery import IMAGES, LOCATION, PROJECT, PROJECT_NUMBER, pipeline_job_answers, schedule_answers

anonymous, config, vertex = delivery.anonymous, delivery.config, delivery.vertex
vertex_spec = delivery.vertex_spec

LOGIN = (
    "run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
)


def prod(path):
    return api.load_config(path, "prod", sets=IMAGES[1::2])


def test_every_error_is_a_tfpipe_error_and_the_config_error_keeps_its_old_home(tmp_path):
    from pipelines.config import ConfigError

    assert ConfigError is api.ConfigError
    for kind in (api.ConfigError, api.DataError, api.CredentialsError, api.CloudError, api.PreflightError):
        assert issubclass(kind, api.TfpipeError)
    with pytest.raises(api.ConfigError) as raised:
        api.load_config(overrides={"parameters.workers": 0})
    assert str(raised.value) == (
        "invalid configuration: parameters.workers: Input should be greater than or equal to 1 (got 0) (from overrides)"
    )
    with pytest.raises(api.ConfigError) as raised:
        api.load_config(overrides={"epochs": 2})
    assert str(raised.value) == (
        "overrides 'epochs': expected SECTION.FIELD with SECTION one of: parameters, batch, platform, study, trainer"
    )


def test_load_config_applies_dotted_overrides_over_the_file_and_its_profile(config):
    loaded = api.load_config(config, "prod", {"parameters.epochs": 2, "platform.labels": {"team": "ai"}})
    assert (loaded.parameters.epochs, loaded.platform.project, loaded.platform.labels) == (2, PROJECT, {"team": "ai"})


def test_compile_returns_the_file_and_the_templates_inputs_for_both_clouds(config, tmp_path):
    loaded = prod(config)
    compiled = api.compile("vertex", loaded, tmp_path / "v.yaml")
    assert compiled.path == str(tmp_path / "v.yaml")
    assert compiled.parameters["epochs"] == {
        "defaultValue": 5,
        "description": "Epochs of the final training.",
        "isOptional": True,
        "parameterType": "NUMBER_INTEGER",
    }
    assert compiled.warning.startswith("warning: images by tag, not digest: ")
    kubeflow = api.compile("kubeflow", loaded, tmp_path / "k.yaml")
    assert next(yaml.safe_load_all(open(kubeflow.path)))["pipelineInfo"]["name"] == "tfpipe-training"
    assert kubeflow.warning is None and kubeflow.parameters["epochs"]["defaultValue"] == 5


def test_an_error_about_an_argument_names_it_and_the_cli_names_its_option(config, tmp_path):
    from click.testing import CliRunner

    from pipelines.cli import cli

    with pytest.raises(api.ConfigError) as raised:
        api.compile("vertex", prod(config), tmp_path / "v.txt")
    assert (raised.value.argument, str(raised.value)) == (
        "output",
        f"output: must end in .yaml or .json, got {tmp_path / 'v.txt'}",
    )
    with pytest.raises(api.ConfigError) as raised:
        api.schedule("vertex", api.load_config(config, "prod", sets=[*IMAGES[1::2], "platform.schedule.cron="]))
    assert str(raised.value) == 'cron is required (or platform.schedule.cron), e.g. cron="TZ=Europe/Paris 0 3 * * 1"'
    args = ["--config", config, "--profile", "prod", *IMAGES, "--output", str(tmp_path / "v.txt")]
    result = CliRunner().invoke(cli, ["compile", "--target", "vertex", *args])
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: --output: must end in .yaml or .json, got {tmp_path / 'v.txt'}\n",
    )


def test_a_local_run_of_a_missing_data_source_is_a_data_error(tmp_path):
    with pytest.raises(api.DataError) as raised:
        api.run_locally(api.load_config(overrides={"parameters.data_source": str(tmp_path / "none")}))
    assert str(raised.value) == f"data source not found: {tmp_path / 'none'}"
    assert list(tmp_path.iterdir()) == []  # nothing made before the check


def test_submit_without_credentials_raises_the_credentials_error_before_anything_is_sent(config, tmp_path, monkeypatch):
    """google.auth's own look-up (the delivery fixture's anonymous credentials undone), with a key file that is not
    there."""
    import google.auth
    from google.auth import _default

    monkeypatch.setattr(google.auth, "default", _default.default)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    with pytest.raises(api.CredentialsError) as raised:
        api.submit("vertex", prod(config))
    assert (
        str(raised.value) == f"no usable Google Cloud credentials (File {tmp_path / 'key.json'} was not found): {LOGIN}"
    )


def test_submit_returns_a_handle_whose_state_and_wait_ask_vertex(vertex, config, vertex_spec, tmp_path):
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    pipeline_job_answers(
        vertex,
        [
            (states.PipelineState.PIPELINE_STATE_RUNNING, ""),
            (states.PipelineState.PIPELINE_STATE_RUNNING, ""),
            (states.PipelineState.PIPELINE_STATE_FAILED, "The DAG failed."),
        ],
    )
    lines = []
    run = api.submit("vertex", prod(config), {"epochs": 3}, template=template, log=lines.append)
    created = vertex.api_calls()[0][1].pipeline_job
    job_id = vertex.api_calls()[0][1].pipeline_job_id
    assert created.runtime_config.parameter_values["epochs"] == 3
    assert run.name == f"projects/{PROJECT_NUMBER}/locations/{LOCATION}/pipelineJobs/{job_id}"
    url = f"https://console.cloud.google.com/vertex-ai/locations/{LOCATION}/pipelines/runs/{job_id}?project={PROJECT}"
    assert run.url == url and lines[-1] == f"console: {url}"
    assert run.state == "PIPELINE_STATE_RUNNING"
    with pytest.raises(api.CloudError) as raised:
        run.wait(0, lines.append)
    assert str(raised.value) == f"the run ended PIPELINE_STATE_FAILED: The DAG failed. ({url})"
    assert [c[0] for c in vertex.api_calls()] == ["create_pipeline_job", *["get_pipeline_job"] * 3]


def test_schedule_returns_what_it_created_and_list_schedules_the_rows(vertex, config, vertex_spec, tmp_path):
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    schedule_answers(vertex, [])
    done = api.schedule("vertex", prod(config), "0 3 * * 1", template=template, log=lambda line: None)
    assert (done.name, done.template, done.source, str(done.cron)) == (
        "tfpipe-weekly",
        "tfpipe-training",
        f"{template}, images pinned by digest",
        "0 3 * * 1",
    )
    assert len(done.next_runs) == 3 and done.time_zone == "UTC"
    listing = api.list_schedules("vertex", prod(config))
    assert (listing.where, listing.rows) == (f"projects/{PROJECT}/locations/{LOCATION}", [])
    assert [c[0] for c in vertex.api_calls()] == ["list_schedules", "create_schedule", "list_schedules"]
