"""Every cloud-facing verb ends an error of a cloud call with one `Error:` line on stderr and exit code 1, the
traceback only with -v (pipelines/cloud_errors.py). No credentials: the real CLI in a subprocess with no Application
Default Credentials anywhere. The other errors: the real exception types raised at the Google clients' gRPC stubs
(tests/helpers/delivery.py's Vertex double) or by real local HTTP servers and closed ports. An output folder that
cannot be created (`run --out`, `compile --output`, `rehearse --out`) is one `Error:` line too."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from google.api_core import exceptions
from google.auth.exceptions import RefreshError
from google.rpc import error_details_pb2

from pipelines.cli import cli
from tests.helpers import delivery
from tests.helpers.configs import edited_shipped_config
from tests.helpers.delivery import PARENT, PREFLIGHT_OK, pipeline_job_answers, schedule_answers
from tests.helpers.processes import free_port  # nothing listens there

# the delivery tests' fixtures: the Vertex double, config, local HTTP API and compiled templates; no real credentials
anonymous, config, http_api, vertex = delivery.anonymous, delivery.config, delivery.http_api, delivery.vertex
kubeflow_spec, vertex_spec = delivery.kubeflow_spec, delivery.vertex_spec

ROOT = Path(__file__).resolve().parents[3]
LOGIN = (
    "run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
)
NO_CREDENTIALS = f"Error: no usable Google Cloud credentials (Your default credentials were not found): {LOGIN}"
ENDPOINT = f"{PARENT}/endpoints/42"


def no_adc_env(tmp_path: Path, **extra) -> dict:
    """This environment without any credentials: no GOOGLE_APPLICATION_CREDENTIALS, empty home and gcloud config
    folders, no metadata server (NO_GCE_CHECK: on a Google Cloud machine, Cloud Build's included)."""
    drop = ("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_", "TFPIPE_", "KF_PIPELINES_", "GCE_METADATA")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "gcloud").mkdir(exist_ok=True)
    home, gcloud = str(tmp_path / "home"), str(tmp_path / "gcloud")
    return {**env, "HOME": home, "CLOUDSDK_CONFIG": gcloud, "NO_GCE_CHECK": "true", **extra}


def run_all(commands: dict, env: dict) -> dict:
    """`python -m pipelines ARGS` for every entry of `commands`, at once; their CompletedProcess by key."""
    started = {
        key: subprocess.Popen(
            [sys.executable, "-m", "pipelines", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for key, args in commands.items()
    }
    done = {}
    for key, process in started.items():
        stdout, stderr = process.communicate(timeout=600)
        done[key] = subprocess.CompletedProcess(process.args, process.returncode, stdout.decode(), stderr.decode())
    return done


def test_every_vertex_verb_without_credentials_says_how_to_log_in(tmp_path):
    """The shipped tfpipe.yaml once edited passes the example-value check; then each verb needs credentials, and
    looks them up before it compiles, checks or sends anything."""
    config = ["--config", str(edited_shipped_config(tmp_path)), "--profile", "prod"]
    commands = {
        "submit": ["submit", "--target", "vertex", *config],
        "submit --skip-checks": ["submit", "--target", "vertex", *config, "--skip-checks"],
        "schedule": ["schedule", "--target", "vertex", *config],
        "schedule list": ["schedule", "list", "--target", "vertex", *config],
        "schedule pause": ["schedule", "pause", "tfpipe-weekly", "--target", "vertex", *config],
        "publish": ["publish", "--tag", "v1", *config],
        "promote": ["promote", *config],
        "rollback": ["rollback", *config],
    }
    results = run_all(commands, no_adc_env(tmp_path))
    for verb, result in results.items():
        assert (verb, result.returncode, result.stderr.splitlines()) == (verb, 1, [NO_CREDENTIALS])
        assert "Traceback" not in result.stdout + result.stderr
    assert not [verb for verb, result in results.items() if result.stdout]


def test_credentials_file_that_is_not_there_and_the_traceback_with_verbose(tmp_path):
    config = ["--config", str(edited_shipped_config(tmp_path)), "--profile", "prod"]
    missing = tmp_path / "key.json"
    commands = {
        "quiet": ["submit", "--target", "vertex", *config],
        "verbose": ["-v", "submit", "--target", "vertex", *config],
    }
    results = run_all(commands, no_adc_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(missing)))
    line = f"Error: no usable Google Cloud credentials (File {missing} was not found): {LOGIN}"
    assert (results["quiet"].returncode, results["quiet"].stderr) == (1, line + "\n")
    verbose = results["verbose"]
    assert verbose.returncode == 1
    assert verbose.stderr.startswith("Traceback (most recent call last):\n")
    assert f"google.auth.exceptions.DefaultCredentialsError: File {missing} was not found.\n" in verbose.stderr
    assert verbose.stderr.endswith(f"\n{line}\n")


def permission_denied(permission):
    return exceptions.PermissionDenied(
        f"Permission '{permission}' denied on resource '//aiplatform.googleapis.com/{PARENT}' (or it may not exist).",
        error_info=error_details_pb2.ErrorInfo(
            reason="IAM_PERMISSION_DENIED", domain="aiplatform.googleapis.com", metadata={"permission": permission}
        ),
    )


DISABLED = exceptions.PermissionDenied(
    "Vertex AI API has not been used in project 123456789 before or it is disabled.",
    error_info=error_details_pb2.ErrorInfo(
        reason="SERVICE_DISABLED",
        domain="googleapis.com",
        metadata={"service": "aiplatform.googleapis.com", "consumer": "projects/123456789"},
    ),
)
UNAVAILABLE = exceptions.ServiceUnavailable("failed to connect to all addresses; last error: UNAVAILABLE")
UNREACHABLE = (
    "the service is unreachable or did not answer: 503 failed to connect to all addresses; last error: UNAVAILABLE "
    "(check the network and the location, then retry)"
)
QUOTA = "https://console.cloud.google.com/iam-admin/quotas"


@pytest.mark.parametrize(
    "error, line",
    [
        (
            permission_denied("aiplatform.pipelineJobs.create"),
            "permission denied (needs aiplatform.pipelineJobs.create): 403 Permission "
            f"'aiplatform.pipelineJobs.create' denied on resource '//aiplatform.googleapis.com/{PARENT}' (or it may "
            "not exist).",
        ),
        (
            DISABLED,
            "aiplatform.googleapis.com is not enabled in projects/123456789: run 'gcloud services enable "
            "aiplatform.googleapis.com' (403 Vertex AI API has not been used in project 123456789 before or it is "
            "disabled.)",
        ),
        (
            exceptions.ResourceExhausted("Quota exceeded for aiplatform.googleapis.com/pipeline_job_requests."),
            "quota exceeded or too many requests: 429 Quota exceeded for aiplatform.googleapis.com/"
            f"pipeline_job_requests. (retry later, or ask for more quota: {QUOTA})",
        ),
        (UNAVAILABLE, UNREACHABLE),
        (
            exceptions.DeadlineExceeded("Deadline Exceeded"),
            "the service is unreachable or did not answer: 504 Deadline Exceeded (check the network and the "
            "location, then retry)",
        ),
        (
            exceptions.RetryError("Timeout of 120.0s exceeded", UNAVAILABLE),
            f"gave up retrying (Timeout of 120.0s exceeded): {UNREACHABLE}",
        ),
    ],
)
def test_vertex_submit_errors_are_one_line(vertex, config, vertex_spec, tmp_path, error, line):
    def refuse(request):
        raise error

    vertex.answers["create_pipeline_job"] = refuse
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    result = CliRunner().invoke(
        cli, ["submit", "--target", "vertex", "--config", config, "--profile", "prod", "--template", str(template)]
    )
    assert (result.exit_code, result.stdout) == (1, PREFLIGHT_OK)
    assert result.stderr == f"Error: creating the pipeline job on Vertex AI: {line}\n"
    assert [c[0] for c in vertex.api_calls()] == ["create_pipeline_job"]


def test_verbose_prints_the_traceback_before_the_line(vertex, config, vertex_spec, tmp_path):
    def refuse(request):
        raise permission_denied("aiplatform.pipelineJobs.create")

    vertex.answers["create_pipeline_job"] = refuse
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    args = ["submit", "--target", "vertex", "--config", config, "--profile", "prod", "--template", str(template)]
    quiet, verbose = CliRunner().invoke(cli, args), CliRunner().invoke(cli, ["-v", *args])
    assert verbose.exit_code == 1
    assert verbose.stderr.startswith("Traceback (most recent call last):\n")
    assert "google.api_core.exceptions.PermissionDenied: 403 Permission 'aiplatform.pipelineJobs.create'" in (
        verbose.stderr
    )
    assert verbose.stderr.endswith("\n" + quiet.stderr) and quiet.stderr.count("\n") == 1


def test_schedule_and_promote_errors_are_one_line(vertex, config, vertex_spec, tmp_path, monkeypatch):
    from google.cloud.aiplatform_v1.services.endpoint_service.transports.grpc import EndpointServiceGrpcTransport

    from tests.doubles.gapic import FakeStub

    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    prod = ["--target", "vertex", "--config", config, "--profile", "prod"]
    schedule_answers(vertex, [])

    def quota(request):
        raise exceptions.ResourceExhausted("Quota exceeded for aiplatform.googleapis.com/schedules.")

    vertex.answers["create_schedule"] = quota
    result = CliRunner().invoke(cli, ["schedule", *prod, "--template", str(template)])
    assert (result.exit_code, result.stdout) == (1, PREFLIGHT_OK)
    assert result.stderr == (
        "Error: creating the schedule on Vertex AI: quota exceeded or too many requests: 429 Quota exceeded for "
        f"aiplatform.googleapis.com/schedules. (retry later, or ask for more quota: {QUOTA})\n"
    )

    def denied(request):
        raise permission_denied("aiplatform.schedules.list")

    vertex.answers["list_schedules"] = denied
    result = CliRunner().invoke(cli, ["schedule", "list", *prod])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith(
        "Error: listing the schedules: permission denied (needs aiplatform.schedules.list): 403 Permission "
        "'aiplatform.schedules.list' denied on resource"
    )
    assert result.stderr.count("\n") == 1

    def missing(request):
        raise exceptions.NotFound(
            "The Endpoint does not exist.",
            details=[error_details_pb2.ResourceInfo(resource_type="Endpoint", resource_name=request.name)],
        )

    stub = FakeStub(missing).bind(EndpointServiceGrpcTransport, "get_endpoint", monkeypatch)
    result = CliRunner().invoke(cli, ["promote", "--config", config, "--profile", "prod", "--endpoint", ENDPOINT])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"Error: promote on Vertex AI: not found ({ENDPOINT}): 404 The Endpoint does not exist.\n"
    assert [c[1].name for c in stub.calls] == [ENDPOINT]


def test_refused_credentials_say_how_to_log_in_again(vertex, config, vertex_spec, tmp_path, monkeypatch):
    """Credentials that no longer refresh (revoked, expired reauthentication): the first authorized request fails."""
    from google.auth.transport.requests import AuthorizedSession

    def request(session, method, url, *args, **kwargs):
        raise RefreshError("invalid_grant: Token has been expired or revoked.", {"error": "invalid_grant"})

    monkeypatch.setattr(AuthorizedSession, "request", request)
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    result = CliRunner().invoke(
        cli, ["submit", "--target", "vertex", "--config", config, "--profile", "prod", "--template", str(template)]
    )
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"Error: Google Cloud refused the credentials (invalid_grant: Token has been expired or revoked): {LOGIN}\n"
    )
    assert vertex.api_calls() == []


def test_an_unreachable_kfp_host_or_registry_is_one_line(config, kubeflow_spec, tmp_path):
    host = f"http://127.0.0.1:{free_port()}"
    template = tmp_path / "kubeflow.yaml"
    template.write_text(yaml.safe_dump_all([kubeflow_spec["pipeline_spec"], kubeflow_spec["platform_spec"]]))
    prod = ["--config", config, "--profile", "prod"]
    for args, line in [
        (
            ["submit", "--target", "kubeflow", "--host", host, *prod, "--template", template],
            f"submitting the run to Kubeflow Pipelines at {host}: cannot reach {host}: Connection refused",
        ),
        (
            ["schedule", "--target", "kubeflow", "--host", host, *prod, "--template", template, "--cron", "0 3 * * 1"],
            f"creating the recurring run on Kubeflow Pipelines at {host}: cannot reach {host}: Connection refused",
        ),
        (
            ["schedule", "list", "--target", "kubeflow", "--host", host],
            f"listing the recurring runs at {host}: cannot reach {host}: Connection refused",
        ),
        (
            ["publish", "--registry", f"{host}/acme/templates", "--tag", "v1", "--template", template],
            f"uploading to {host}/acme/templates: cannot reach {host}: Connection refused",
        ),
    ]:
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert (result.exit_code, result.stderr) == (1, f"Error: {line}\n"), result.output


def test_kfp_and_registry_error_answers_are_one_line(http_api, config, kubeflow_spec, tmp_path):
    """A host that is not the KFP API answers its health check 404 (once: kfp.Client would try five times); a
    registry over its request quota answers 429."""
    template = tmp_path / "kubeflow.yaml"
    template.write_text(yaml.safe_dump_all([kubeflow_spec["pipeline_spec"], kubeflow_spec["platform_spec"]]))
    args = ["submit", "--target", "kubeflow", "--host", http_api.url, "--config", config, "--profile", "prod"]
    result = CliRunner().invoke(cli, [*args, "--template", str(template)])
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: submitting the run to Kubeflow Pipelines at {http_api.url}: Kubeflow Pipelines answered 404 Not "
        "Found: no\n",
    )
    assert [(r["method"], r["path"]) for r in http_api.requests] == [("GET", "/apis/v2beta1/healthz")]

    registry = f"{http_api.url}/acme/templates"
    http_api.routes[("POST", "/acme/templates")] = (429, {"error": {"code": 429, "message": "Too many uploads."}})
    result = CliRunner().invoke(cli, ["publish", "--registry", registry, "--tag", "v1", "--template", str(template)])
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: uploading to {registry}: quota exceeded or too many requests: 429 POST {registry}: Too many "
        f"uploads. (retry later, or ask for more quota: {QUOTA})\n",
    )


def test_other_errors_keep_their_traceback():
    """Only errors of cloud calls are described; anything else is a bug to see whole."""
    from pipelines.cloud_errors import describe

    assert describe(KeyError("x")) is None and describe(ValueError("bad")) is None


def test_aiplatform_prints_neither_its_calls_nor_the_errors_it_passes_over(
    vertex, config, vertex_spec, tmp_path, caplog
):
    """aiplatform checks the pipeline root's bucket before it creates a job and logs, traceback and all, any error
    of that check (here: the caller may write objects but not read the bucket's metadata) before going on."""
    import logging

    from google.cloud.storage import Bucket

    def forbidden(bucket, *args, **kwargs):
        raise exceptions.Forbidden(
            f"GET https://storage.googleapis.com/storage/v1/b/{bucket.name}: no storage.buckets.get"
        )

    pipeline_job_answers(vertex)
    template = tmp_path / "training.yaml"
    template.write_text(yaml.safe_dump(vertex_spec))
    caplog.set_level(logging.INFO)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Bucket, "exists", forbidden)
        result = CliRunner().invoke(
            cli, ["submit", "--target", "vertex", "--config", config, "--profile", "prod", "--template", str(template)]
        )
    assert result.exit_code == 0, result.output
    assert [c[0] for c in vertex.api_calls()] == ["create_pipeline_job"]
    assert [r for r in caplog.records if r.name.startswith("google.cloud.aiplatform")] == []
    assert result.stderr == ""


# --- an output path that cannot be created -----------------------------------------------------------------------

IMAGES = [
    f"--set=platform.{field}=europe-west4-docker.pkg.dev/acme-ml/tfpipe/{name}:1"
    for field, name in (("components_image", "components"), ("trainer_image", "trainer"), ("serving_image", "serving"))
]


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["run", "--pipeline", "batch_prediction", "--instances", "{instances}"],
        ["rehearse"],
    ],
    ids=["run", "run batch_prediction", "rehearse"],
)
def test_an_out_folder_under_a_file_is_one_line(tmp_path, command):
    (tmp_path / "instances.jsonl").write_text('{"x": [1.0]}\n')
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "run"
    args = [a.format(instances=tmp_path / "instances.jsonl") for a in command]
    result = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert (result.exit_code, result.stderr) == (1, f"Error: --out: cannot create the folder {out}: Not a directory\n")


@pytest.mark.parametrize(
    "output, line",
    [
        ("file/training.yaml", "cannot create the folder {tmp}/file: File exists"),
        ("file/templates/training.yaml", "cannot create the folder {tmp}/file/templates: Not a directory"),
    ],
)
def test_a_compile_output_under_a_file_is_one_line(tmp_path, output, line):
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(cli, ["compile", "--target", "vertex", "--output", str(tmp_path / output), *IMAGES])
    assert (result.exit_code, result.stderr) == (1, f"Error: --output: {line.format(tmp=tmp_path)}\n")
    assert (tmp_path / "file").read_text() == ""


def test_a_compile_output_in_a_read_only_folder_is_one_line():
    """/sys refuses new files, to root too."""
    output = "/sys/tfpipe-training.yaml"
    result = CliRunner().invoke(cli, ["compile", "--target", "vertex", "--output", output, *IMAGES])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: --output: cannot write {output}: ") and result.stderr.count("\n") == 1


def test_a_local_batch_prediction_from_bigquery_is_refused_in_one_line_naming_the_target(tmp_path):
    result = CliRunner().invoke(
        cli,
        ["run", "--pipeline", "batch_prediction", "--instances", "bq://my-project.shop.rows"]
        + ["--instances-format", "bigquery", "--out", str(tmp_path / "run")],
    )
    assert (result.exit_code, result.stderr) == (
        1,
        "Error: instances_format bigquery: the batch predictor of target local reads files, and there is no BigQuery "
        "here; run the batch prediction on target vertex, or export the table to files (jsonl, csv, tf-record, "
        "tf-record-gzip, file-list)\n",
    )
    assert not (tmp_path / "run").exists()
