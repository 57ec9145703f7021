"""The name rules (core.names), and hostile names fed to the config, the publish and deploy steps and the
local server's routes: each is accepted and stays inside its root, or refused with one line."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from components.lib.deploy import model_repository
from core import names
from core.names import InvalidName
from pipelines.config import ConfigError, load_config

# names an attacker or a careless user might try: separators, dot segments, unicode, empty, very long, spaces,
# upper case, control characters, and names made of the allowed characters only
HOSTILE_EXAMPLES = [
    "",
    ".",
    "..",
    "../x",
    "../../escape",
    "a/../../b",
    "/etc",
    "a\\b",
    ".hidden",
    "Bad Name!",
    "UPPER",
    "tfpipe-model",
    "x" * 46,
    "x" * 47,
    "x" * 128,
    "x" * 129,
    "a:b",
    "a\nb",
    "a\x00b",
    "modèle",
    "ｍｏｄｅｌ",
    "-lead",
    "trail-",
    "7digits",
]
HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_EXAMPLES),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=200),
    st.from_regex(r"[A-Za-z0-9._/\\: -]{0,140}", fullmatch=True),
    st.lists(st.sampled_from(["..", ".", "a", "", "B"]), max_size=5).map("/".join),
)
PROPERTY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message, message
    return message


# --- the rules ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tfpipe-model", "Digits_v2", "a", "a..b", "x" * 128, "7"])
def test_model_names_are_one_safe_path_segment(name):
    assert names.model_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "Bad Name!", "x" * 129, "é", "a\n"])
def test_other_model_names_are_refused_naming_the_parameter_the_rule_and_the_value(name):
    with pytest.raises(InvalidName) as refused:
        names.model_name(name, "parameters.model_name")
    assert one_line(refused.value).startswith("parameters.model_name: one path segment of 1 to 128 ASCII letters")
    assert f"(got {name!r})"[:60] in str(refused.value)  # a long value shortened


def test_a_long_refused_value_is_shown_shortened():
    with pytest.raises(InvalidName) as refused:
        names.model_name("/" * 1000)
    assert len(str(refused.value)) < 300 and str(refused.value).endswith("...)")


def test_the_kserve_name_leaves_room_for_the_names_kserve_and_knative_derive():
    longest = "m" * names.INFERENCE_SERVICE_MAX
    assert names.inference_service(longest) == longest
    assert len(f"latest-{longest}-predictor") == 63  # the `latest` tag's host label, the longest derived name
    for name in ("m" * 47, "7up", "Model", "my_model", "-m", "m-", ""):
        with pytest.raises(InvalidName, match="KServe InferenceService name"):
            names.inference_service(name)


def test_kubernetes_and_vertex_names():
    assert names.dns_label("team-a", "ns") == "team-a"
    assert names.dns_subdomain("pipeline-runner.v1", "sa") == "pipeline-runner.v1"
    assert names.vertex_experiment("0-exp") == "0-exp"
    assert names.display_name("Modèle de test (v2)", "model_display_name")
    for rule, value in (
        (names.dns_label, "Team"),
        (names.dns_label, "a" * 64),
        (names.dns_label, "ok\n"),
        (names.dns_subdomain, "a..b"),
        (names.dns_subdomain, "a" * 254),
        (names.vertex_experiment, "-exp"),
        (names.vertex_experiment, "Exp"),
        (names.display_name, ""),
        (names.display_name, "x" * 129),
        (names.display_name, "two\nlines"),
    ):
        with pytest.raises(InvalidName) as refused:
            rule(value, "field")
        assert one_line(refused.value).startswith("field: ")


@pytest.mark.parametrize(
    "value, options, accepted",
    [
        ("runs/model_repository", {}, True),
        ("/mnt/tfpipe/repo", {}, True),
        ("file:///tmp/repo", {}, True),
        ("gs://bucket/repo", {}, True),
        ("gs://bucket", {}, True),
        ("gs://", {}, False),
        ("gs://B/x", {}, False),
        ("s3://bucket/repo", {}, False),
        ("https://host/repo", {}, False),
        ("", {}, False),
        ("a\x00b", {}, False),
        ("builtin:digits", {"prefixes": ("builtin:",)}, True),
        ("gs://bucket/out", {"local": False}, True),
        ("/tmp/out", {"local": False}, False),
    ],
)
def test_locations_take_the_schemes_of_their_place(value, options, accepted):
    if accepted:
        assert names.location(value, "p", **options) == value
    else:
        with pytest.raises(InvalidName):
            names.location(value, "p", **options)


def test_instances_and_urls():
    assert names.locations("a.jsonl, gs://b/c/*.jsonl", "instances")
    for value in ("", " , ", "a.jsonl,s3://b/c"):
        with pytest.raises(InvalidName, match="^instances: "):
            names.locations(value, "instances")
    assert names.url("http://localhost:8501", "serving_url")
    for value in ("localhost:8501", "ftp://host", "http://", "http://a b"):
        with pytest.raises(InvalidName, match="^serving_url: "):
            names.url(value, "serving_url")


def test_inside_follows_links(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "repo" / "linked").symlink_to(tmp_path / "elsewhere")
    assert names.inside(str(tmp_path / "repo"), str(tmp_path / "repo" / "m"), "p") == tmp_path / "repo" / "m"
    with pytest.raises(InvalidName, match="must stay inside"):
        names.inside(str(tmp_path / "repo"), str(tmp_path / "repo" / "linked"), "model_name")
    with pytest.raises(InvalidName, match="must stay inside"):
        names.inside(str(tmp_path / "repo"), str(tmp_path / "repo" / ".." / "elsewhere"), "model_name")


# --- Google Cloud's rules: their messages name the value first ---------------------------------------------------

KEY = "projects/acme-ml/locations/europe-west4/keyRings/ml/cryptoKeys/tfpipe"
BOARD = "projects/acme-ml/locations/europe-west4/tensorboards/7"


def in_region(rule):
    return lambda value, param: rule(value, param, "europe-west4")


GOOGLE_CLOUD_RULES = {
    "region": names.region,
    "project_id": names.project_id,
    "service_account": names.service_account,
    "network": names.network,
    "kms_key": in_region(names.kms_key),
    "tensorboard": in_region(names.tensorboard),
    "version_alias": names.version_alias,
    "uri": names.uri,
    "image_uri": names.image_uri,
}


@pytest.mark.parametrize(
    "rule, value",
    [
        ("region", "us-central1"),
        ("region", "europe-west4"),
        ("region", "northamerica-northeast1"),
        ("project_id", "acme-ml-prod"),
        ("project_id", "example.com:acme-ml"),
        ("service_account", "tfpipe-runner@acme-ml.iam.gserviceaccount.com"),
        ("service_account", "123456789-compute@developer.gserviceaccount.com"),
        ("network", "projects/123456789/global/networks/vpc"),
        ("kms_key", KEY),
        ("tensorboard", BOARD),
        ("version_alias", "champion"),
        ("version_alias", "prod-Blue-2"),
        ("uri", "gs://acme-ml/pipeline-root"),
        ("uri", "https://europe-west4-kfp.pkg.dev/acme-ml/templates/"),
        ("image_uri", "europe-west4-docker.pkg.dev/acme-ml/tfpipe/trainer@sha256:" + "0" * 64),
    ],
)
def test_google_cloud_names_are_returned_as_given(rule, value):
    assert GOOGLE_CLOUD_RULES[rule](value, "field") == value


@pytest.mark.parametrize(
    "rule, value, detail",
    [
        ("region", "us central1", "'us central1' is not a Google Cloud region like us-central1 or europe-west4"),
        ("region", "eu", "'eu' is not a Google Cloud region like us-central1 or europe-west4"),
        ("region", "", "'' is not a Google Cloud region like us-central1 or europe-west4"),
        ("project_id", "My_Project", "'My_Project' is not a project id (6-30 lowercase letters, digits and hyphens)"),
        ("project_id", "acme", "'acme' is not a project id (6-30 lowercase letters, digits and hyphens)"),
        ("project_id", "7-acme-ml", "'7-acme-ml' is not a project id (6-30 lowercase letters, digits and hyphens)"),
        (
            "service_account",
            "runner",
            "'runner' is not a service account e-mail like NAME@PROJECT.iam.gserviceaccount.com",
        ),
        (
            "service_account",
            "runner@example.com",
            "'runner@example.com' is not a service account e-mail like NAME@PROJECT.iam.gserviceaccount.com",
        ),
        ("network", "vpc", "'vpc' must look like projects/PROJECT_NUMBER/global/networks/NAME"),
        (
            "network",
            "projects/acme-ml/global/networks/vpc",
            "'projects/acme-ml/global/networks/vpc' must look like projects/PROJECT_NUMBER/global/networks/NAME",
        ),
        ("kms_key", "my-key", "'my-key' must look like projects/P/locations/L/keyRings/R/cryptoKeys/K"),
        (
            "kms_key",
            KEY.replace("europe-west4", "us-east1"),
            f"{KEY.replace('europe-west4', 'us-east1')!r} is in us-east1; Vertex AI needs it in the runs' location "
            "europe-west4",
        ),
        ("tensorboard", "tb-1", "'tb-1' must look like projects/P/locations/L/tensorboards/ID"),
        (
            "tensorboard",
            BOARD.replace("europe-west4", "us-central1"),
            f"{BOARD.replace('europe-west4', 'us-central1')!r} is in us-central1; Vertex AI needs it in the runs' "
            "location europe-west4",
        ),
        ("version_alias", "Champion", "'Champion' must match ^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]$"),
        ("version_alias", "c", "'c' must match ^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]$"),
        ("uri", "bucket/root", "'bucket/root' is not a URI (scheme://...)"),
        ("image_uri", "", "'' is not an image URI"),
        ("image_uri", "trainer :1", "'trainer :1' is not an image URI"),
    ],
)
def test_other_google_cloud_names_are_refused_naming_the_parameter_and_the_value_first(rule, value, detail):
    with pytest.raises(InvalidName) as refused:
        GOOGLE_CLOUD_RULES[rule](value, "platform.field")
    assert one_line(refused.value) == f"platform.field: {detail}"
    assert refused.value.detail == detail


@PROPERTY
@given(st.sampled_from(sorted(GOOGLE_CLOUD_RULES)), HOSTILE)
def test_hostile_google_cloud_names_are_returned_as_given_or_refused_in_one_line_naming_the_value(rule, value):
    try:
        assert GOOGLE_CLOUD_RULES[rule](value, "field") == value
    except InvalidName as e:
        assert one_line(e).startswith(f"field: {value!r} ")


def test_google_cloud_labels_are_returned_as_given():
    labels = {"team": "ml", "env": "", "cost_center": "r-and-d"}
    assert names.labels(labels) == labels
    most = {f"l{i}": "x" for i in range(names.MAX_LABELS)}
    assert names.labels(most, "labels") == most


@pytest.mark.parametrize(
    "labels, detail",
    [
        ({"Team": "ml"}, "Team='ml': keys must match ^[a-z][a-z0-9_-]{0,62}$ and values ^[a-z0-9_-]{0,63}$"),
        ({"team": "ML"}, "team='ML': keys must match ^[a-z][a-z0-9_-]{0,62}$ and values ^[a-z0-9_-]{0,63}$"),
        ({"goog-team": "ml"}, "goog-team: label keys starting with goog are reserved by Google Cloud"),
        ({f"l{i}": "x" for i in range(65)}, "at most 64 labels, got 65"),
        ({"a\nb": "x"}, "'a\\nb'='x': keys must match ^[a-z][a-z0-9_-]{0,62}$ and values ^[a-z0-9_-]{0,63}$"),
    ],
)
def test_other_google_cloud_labels_are_refused_in_one_line(labels, detail):
    with pytest.raises(InvalidName) as refused:
        names.labels(labels, "model_labels")
    assert one_line(refused.value) == f"model_labels: {detail}"


@PROPERTY
@given(st.dictionaries(HOSTILE, HOSTILE, max_size=3))
def test_hostile_labels_are_returned_as_given_or_refused_in_one_line(labels):
    try:
        assert names.labels(labels, "labels") == labels
    except InvalidName as e:
        assert one_line(e).startswith("labels: ")
        return
    assert all(names.LABEL_KEY.fullmatch(k) and not k.startswith("goog") for k in labels)


# --- the config --------------------------------------------------------------------------------------------------


@PROPERTY
@given(HOSTILE)
def test_hostile_model_names_in_the_config_are_accepted_inside_the_repository_or_refused_in_one_line(name):
    root = Path(tempfile.gettempdir(), "repository")
    try:
        config = load_config(None, {"model_name": name}, {"model_name": name}, environ={})
    except ConfigError as e:
        assert one_line(e).startswith("invalid configuration: parameters.model_name: one path segment")
        return
    assert config.parameters.model_name == config.batch.model_name == name
    assert (root / name).resolve().parent == root.resolve()
    try:
        config.check_target("kubeflow")
    except ConfigError as e:
        assert "KServe InferenceService name" in one_line(e)
        return
    assert names.DNS_LABEL.fullmatch(name) and len(f"latest-{name}-predictor") <= 63


def template(inference_service: str | None) -> dict:
    """A compiled training template's parts parse_params reads, with a KServe deploy step compiled with
    `inference_service` (None: no KServe deploy)."""
    deploy = {
        "componentRef": {"name": "comp-deploy-model-on-kserve"},
        "inputs": {"parameters": {"inference_service": {"runtimeValue": {"constant": inference_service}}}},
    }
    tasks = {"deploy-model-on-kserve": deploy} if inference_service is not None else {}
    return {
        "pipelineInfo": {"name": "tfpipe-training"},
        "root": {"inputDefinitions": {"parameters": {"model_name": {"parameterType": "STRING", "defaultValue": "m"}}}},
        "components": {"comp-condition-2": {"dag": {"tasks": tasks}}},
    }


def test_a_run_parameter_is_checked_against_the_names_the_template_gives_it():
    from pipelines.templates import TemplateError, parse_params

    assert parse_params(["model_name=digits"], template("")) == {"model_name": "digits"}
    assert parse_params(["model_name=Digits_v2"], template("digits")) == {"model_name": "Digits_v2"}
    assert parse_params(["model_name=Digits_v2"], template(None)) == {"model_name": "Digits_v2"}
    with pytest.raises(TemplateError) as refused:
        parse_params(["model_name=Digits_v2"], template(""))
    assert one_line(refused.value).startswith("--param model_name: a KServe InferenceService name: ")
    assert str(refused.value).endswith(
        "(got 'Digits_v2'): this template's KServe deploy names the InferenceService after it"
    )
    with pytest.raises(TemplateError, match=r"^--param model_name: one path segment .*\(got '\.\./x'\)$"):
        parse_params(["model_name=../x"], template(None))


def test_a_run_parameter_a_template_writes_into_a_vertex_label_must_be_a_label_value():
    """The compiled Vertex find-model step makes the upload's labels of the pipeline input source_commit (handed
    down the conditions): a value that is no label value is refused before the run is created; without such a step,
    any commit goes."""
    from pipelines.templates import TemplateError, parse_params

    find = {
        "componentRef": {"name": "comp-find-model"},
        "inputs": {"parameters": {"source_commit": {"componentInputParameter": "pipelinechannel--source_commit"}}},
    }
    spec = {
        "pipelineInfo": {"name": "tfpipe-training"},
        "root": {
            "inputDefinitions": {"parameters": {"source_commit": {"parameterType": "STRING", "defaultValue": ""}}}
        },
        "components": {
            "comp-condition-4": {"dag": {"tasks": {"find-model": find}}},
            "comp-find-model": {"outputDefinitions": {"parameters": {"labels": {"parameterType": "STRUCT"}}}},
        },
    }
    commit = "3f786850e387550fdab836ed7e6dc881de23001b"
    assert parse_params([f"source_commit={commit}"], spec) == {"source_commit": commit}
    with pytest.raises(TemplateError) as refused:
        parse_params([f"source_commit={commit.upper()}"], spec)
    assert one_line(refused.value) == (
        f"--param source_commit: '{commit.upper()}' is not a Google Cloud label value (it must match "
        "^[a-z0-9_-]{0,63}$): this template writes it into a Vertex AI label"
    )
    spec["components"] = {}  # a template that records the commit elsewhere (a self-hosted target's)
    assert parse_params([f"source_commit={commit.upper()}"], spec) == {"source_commit": commit.upper()}


# --- the steps that publish and deploy ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """What the publish step reads: a SavedModel folder (its saved_model.pb is all the repository looks at), the
    data stats, the training metrics and the gate's report."""
    root = tmp_path_factory.mktemp("artifacts")
    (root / "model").mkdir()
    (root / "model" / "saved_model.pb").write_bytes(b"")
    (root / "dataset").mkdir()
    stats = {"source": "builtin:digits", "examples": 10, "labels": ["0"], "input_shape": [8, 8, 1], "splits": {}}
    (root / "dataset" / "stats.json").write_text(json.dumps(stats))
    (root / "training").mkdir()
    (root / "training" / "metrics.json").write_text("{}")
    (root / "evaluation.json").write_text(json.dumps({"accuracy": 1.0, "loss": 0.0, "blessed": True, "reason": "-"}))
    return root


@contextlib.contextmanager
def sandbox():
    """A fresh folder holding only the repository folder `repo`: whatever escapes the repository lands beside it."""
    with tempfile.TemporaryDirectory(prefix="tfpipe-names-") as folder:
        top = Path(folder)
        (top / "repo").mkdir()
        yield top, top / "repo"


@PROPERTY
@given(HOSTILE)
def test_the_publish_step_publishes_a_hostile_name_inside_the_repository_or_refuses_it(artifacts, name):
    with sandbox() as (top, repo):
        publish(artifacts, top, repo, name)


def publish(artifacts: Path, top: Path, repo: Path, name: str) -> None:
    from components.publish_model import publish_model

    published = SimpleNamespace(path=str(top / "published.json"), metadata={})
    try:
        publish_model(
            model=SimpleNamespace(path=str(artifacts / "model"), uri="file:///model"),
            dataset=SimpleNamespace(path=str(artifacts / "dataset")),
            training=SimpleNamespace(path=str(artifacts / "training")),
            evaluation=SimpleNamespace(path=str(artifacts / "evaluation.json")),
            model_repository=str(repo),
            model_name=name,
            run_id="run-1",
            source_commit="",
            published=published,
        )
    except InvalidName as e:
        assert one_line(e).startswith("model_name: ")
        assert sorted(os.listdir(top)) == ["repo"] and not os.listdir(repo)
        return
    assert Path(published.metadata["path"]).resolve().parent.parent == repo.resolve()
    assert sorted(os.listdir(top)) == ["published.json", "repo"] and os.listdir(repo) == [name]


@pytest.fixture
def kserve(monkeypatch):
    """The KServe deploy step with the cluster stubbed out: the names it would create objects with."""
    import components.deploy_model_on_kserve as step
    from components.lib.deploy import smoke
    from components.lib.kube import api as kube

    created = []

    def deploy_to_kserve(api, *, name, model_name, **options):
        created.append(name)
        record = {"name": name, "namespace": "ns", "url": "http://x", "revision": f"{name}-predictor-00001"}
        return {**record, "canary": 0, "cleanup_error": ""}

    monkeypatch.setattr(step, "deploy_to_kserve", deploy_to_kserve)
    monkeypatch.setattr(kube, "api_client", lambda: None)
    monkeypatch.setattr(kube, "run_id", lambda: "run-1")
    monkeypatch.setattr(smoke, "reference_checks", lambda *args: [])
    return step.deploy_model_on_kserve, created


@PROPERTY
@given(HOSTILE)
def test_the_kserve_deploy_step_creates_only_names_kserve_takes(artifacts, kserve, name):
    with sandbox() as (top, repo):
        deploy_on_kserve(artifacts, kserve, top, repo, name)


def deploy_on_kserve(artifacts: Path, kserve, top: Path, repo: Path, name: str) -> None:
    deploy, created = kserve
    version_path = str(top / "volume" / "missing" / "1")
    if names.MODEL_NAME.fullmatch(name):  # what the publish step would have written
        version_path = model_repository.publish(str(artifacts / "model"), str(repo), name, {}).path
    created.clear()
    try:
        deploy(
            published=SimpleNamespace(metadata={"version": 1, "path": version_path}),
            dataset=SimpleNamespace(path=str(artifacts / "dataset")),
            model_repository=str(repo),
            model_name=name,
            traffic_percentage=100,
            inference_service="",
            serving_image="registry/serving:1",
            namespace="ns",
            service_account="",
            claim_name="tfpipe",
            mount_path=str(top),
            resources={},
            min_replicas=1,
            max_replicas=1,
            keep_previous=0,
            poll_seconds=1.0,
            timeout_minutes=1,
            endpoint=SimpleNamespace(path=str(top / "endpoint.json"), metadata={}),
        )
    except InvalidName as e:
        assert one_line(e).startswith("model_name: ") and not created
        if names.MODEL_NAME.fullmatch(name):  # refused by KServe's rule: the published version is removed
            assert model_repository.versions(str(repo), name) == []
        return
    assert created == [name] and names.INFERENCE_SERVICE.fullmatch(name) and len(name) <= 46


def test_the_local_deploy_step_refuses_a_hostile_name_before_looking_for_a_server(tmp_path, monkeypatch):
    from components.lib.deploy import tf_serving
    from serving import lifecycle

    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "state"))
    for name in ("../x", "a\nb", ""):
        with pytest.raises(InvalidName, match="^model_name: "):
            tf_serving.deploy(1, str(tmp_path / "v"), str(tmp_path / "d"), str(tmp_path / "repo"), name)
        with pytest.raises(InvalidName, match="^--model-name: "):
            lifecycle.stop_server(str(tmp_path / "repo"), name or "..")
    assert not (tmp_path / "state").exists()


# --- the local server's routes -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server on a repository with no models, beside a folder that holds one: a route that reached outside
    the repository would find it."""
    from serving.models import Policy
    from serving.repository import Repository, ServedModels
    from serving.server import ModelServer, ServerOptions

    top = tmp_path_factory.mktemp("served")
    (top / "repo").mkdir()
    (top / "secret" / "1").mkdir(parents=True)
    (top / "secret" / "1" / "saved_model.pb").write_bytes(b"")
    models = ServedModels(Repository(str(top / "repo"), (), Policy(), {}), 0.1)
    s = ModelServer(models, ServerOptions(rest_port=0, grpc_port=0)).start()
    yield s, models, top
    s.stop()


def raw_get(rest_url: str, path: str) -> tuple[int, dict]:
    """GET `path` as given: no client normalises its dot segments or its escapes."""
    host, port = rest_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@PROPERTY
@given(HOSTILE)
def test_the_servers_routes_refuse_a_hostile_name_in_one_line_and_never_leave_the_repository(server, name):
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    s, models, top = server
    escaped = "".join(f"%{b:02X}" for b in name.encode())  # every byte escaped: the server sees the name as is
    status, body = raw_get(s.rest_url, f"/v1/models/{escaped}")
    assert status in (400, 404, 405) and set(body) == {"error"} and "\n" not in body["error"]
    if names.MODEL_NAME.fullmatch(name):
        assert status == 404 and body["error"] == f"Could not find any versions of model {name}"
    elif status == 400:  # 404: no route or TF Serving's pattern took it (a '/', a newline); 405: ':predict' by GET
        assert body["error"].startswith("model name: one path segment")
    with grpc.insecure_channel(s.grpc_target) as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = name
        with pytest.raises(grpc.RpcError) as refused:
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=10)
    expected = grpc.StatusCode.NOT_FOUND if names.MODEL_NAME.fullmatch(name) else grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.code() == expected
    assert models.names() == [] and sorted(os.listdir(top)) == ["repo", "secret"]
