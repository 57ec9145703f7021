"""`python -m pipelines rehearse`: the compiled Vertex template run here against the Vertex AI API double
(pipelines/rehearsal/). The end-to-end tests run the CLI in subprocesses, as a user would; the recorded requests
are checked with the same expectations as the GAPIC-boundary tests (tests/vertex_expectations.py)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipelines.config import load_config
from pipelines.rehearsal.registry import ApiError, Registry
from tests import vertex_expectations as expect
from tests.test_builder import IMAGE_SETS

IDENTITY = [
    "platform.project=my-project",  # the rehearsal's project: the TensorBoard must be in it
    "platform.service_account=runner@my-project.iam.gserviceaccount.com",
    "platform.network=projects/123456789/global/networks/vpc",
    "platform.encryption_spec_key_name=projects/my-project/locations/us-central1/keyRings/ml/cryptoKeys/tfpipe",
    "platform.tensorboard=projects/my-project/locations/us-central1/tensorboards/42",
    "platform.labels={env: test}",
    "platform.model_labels={team: ml}",
    "platform.keep_previous=0",
    "platform.data_prep={runner: dataflow, dataflow_min_records: 0}",  # the digits are few: Dataflow all the same
    "study.max_trial_count=2",
    "study.parallel_trial_count=2",
]
SETS = [arg for item in IDENTITY for arg in ("--set", item)]


def cli(*args, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def recorded(out: Path, method: str) -> list[dict]:
    lines = (out / "vertex" / "vertex_requests.jsonl").read_text().splitlines()
    return [r["request"] for r in map(json.loads, lines) if r["method"] == method]


# --- the double's registry (no TF, fast) ------------------------------------------------------------------------


def test_registry_versions_aliases_and_deploy_rules(tmp_path):
    registry = Registry(str(tmp_path / "state.json"), "p-rehearsal", "us-central1", "4711")
    parent = "projects/p-rehearsal/locations/us-central1"
    model = {"display_name": "digits", "artifact_uri": "/m/1", "container_spec": {"image_uri": "img"}}
    name, first = registry.upload(parent, model)
    assert first == "1" and registry.version(name)["version_aliases"] == ["default"]
    # answered with the project's number, as Vertex names resources; found by its ID too
    assert name.startswith("projects/4711/locations/us-central1/models/")
    assert registry.version(name.replace("4711", "p-rehearsal"))["name"] == name
    _, second = registry.upload(parent, {**model, "artifact_uri": "/m/2"}, parent_model=name)
    assert second == "2" and registry.version(name)["version_id"] == "1"  # a new version is not the default
    registry.merge_aliases(f"{name}@2", ["champion", "default"])
    assert registry.version(f"{name}@champion")["artifact_uri"] == "/m/2"
    assert registry.version(name)["version_id"] == "2" and registry.version(f"{name}@1")["version_aliases"] == []
    with pytest.raises(ApiError, match="no version or alias 'blue'"):
        registry.version(f"{name}@blue")
    with pytest.raises(ApiError, match="this rehearsal's project and location"):
        registry.upload("projects/other/locations/us-central1", model)
    with pytest.raises(ApiError, match="model.container_spec.image_uri is required"):
        registry.upload(parent, {**model, "container_spec": {}})
    endpoint = registry.create_endpoint(parent, {"display_name": "e"})["name"]
    version, split = registry.plan_deploy(endpoint, {"model": f"{name}@champion"}, {"0": 100})
    assert version["version_id"] == "2" and split == {"0": 100}
    registry.add_deployed(endpoint, {"id": "7", "model": name, "model_version_id": "2", "create_time": 1}, split)
    with pytest.raises(ApiError, match="traffic_split must sum to 100"):
        registry.plan_deploy(endpoint, {"model": f"{name}@1"}, {"0": 10, "7": 80})
    with pytest.raises(ApiError, match="deployed models that do not exist: \\['9'\\]"):
        registry.plan_deploy(endpoint, {"model": f"{name}@1"}, {"0": 10, "9": 90})
    with pytest.raises(ApiError, match="deployed model 7 still serves 100 %"):
        registry.remove_deployed(endpoint, "7", {})
    # the state survives: the next rehearsal finds the champion and the endpoint
    again = Registry(str(tmp_path / "state.json"), "p-rehearsal", "us-central1", "4711")
    assert again.version(f"{name}@champion")["version_id"] == "2"
    assert again.endpoint(endpoint)["traffic_split"] == {"7": 100}


def test_lists_are_ordered_and_paged_as_vertex_pages_them(tmp_path):
    """Three endpoints named alike: the GAPIC client follows the double's two-item pages; `order_by` is honoured
    and a field Vertex does not order by is refused."""
    from google.api_core.exceptions import InvalidArgument
    from google.cloud import aiplatform_v1

    from pipelines.rehearsal import redirect
    from pipelines.rehearsal.api import VertexDouble

    double = VertexDouble(str(tmp_path), str(tmp_path / "state.json"), "p-rehearsal", "4711", "europe-west4").start()
    parent = "projects/p-rehearsal/locations/europe-west4"
    created = []
    for _ in range(3):
        created.append(double.registry.create_endpoint(parent, {"display_name": "e"})["name"])
        time.sleep(0.01)  # creation times a millisecond apart at least
    try:
        redirect.install(double.grpc_target, double.http_base, "p-rehearsal")
        client = aiplatform_v1.EndpointServiceClient(
            client_options={"api_endpoint": "europe-west4-aiplatform.googleapis.com"}
        )
        oldest = client.list_endpoints(
            request={"parent": parent, "filter": 'display_name="e"', "order_by": "create_time"}
        )
        newest = client.list_endpoints(request={"parent": parent, "order_by": "create_time desc"})
        assert [e.name for e in oldest] == created and [e.name for e in newest] == created[::-1]
        first = client.list_endpoints(request={"parent": parent}).pages
        assert [len(page.endpoints) for page in first] == [2, 1]
        with pytest.raises(InvalidArgument, match="order_by 'name': use create_time, update_time, display_name"):
            list(client.list_endpoints(request={"parent": parent, "order_by": "name"}))
    finally:
        double.stop()


def test_a_deployed_model_serves_on_vertexs_routes_within_the_online_limit(tmp_path, gcs_emulator):
    """DeployModel answers an operation at once; the container starts in it on Vertex's copy of the artifacts with
    Vertex's AIP_* routes; the endpoint's predict route forwards to the container's and refuses a body over an online
    request's 1.5 MiB; undeploying deletes the copy."""
    import numpy as np
    import requests
    from google.cloud.aiplatform_v1.types import endpoint as endpoint_pb, endpoint_service

    from pipelines.rehearsal import gcs
    from pipelines.rehearsal.api import VertexDouble
    from tests.serving_models import toy_model

    model_dir = toy_model(str(tmp_path / "toy"), k=2)
    gcs.upload(Path(model_dir), "gs://test-bucket/models/toy")
    double = VertexDouble(str(tmp_path / "d"), str(tmp_path / "state.json"), "p-rehearsal", "4711", "us-central1")
    double.start()
    parent = "projects/p-rehearsal/locations/us-central1"
    try:
        spec = {"image_uri": "serving:1"}
        name, _ = double.registry.upload(
            parent, {"display_name": "toy", "artifact_uri": "gs://test-bucket/models/toy", "container_spec": spec}
        )
        endpoint = double.registry.create_endpoint(parent, {"display_name": "e"})["name"]
        operation = double.deploy(
            endpoint_service.DeployModelRequest(
                endpoint=endpoint, deployed_model=endpoint_pb.DeployedModel(model=name), traffic_split={"0": 100}
            )
        )
        assert not operation.done  # a long-running operation, as on Vertex
        deadline = time.time() + 120
        while not operation.done and time.time() < deadline:
            time.sleep(0.2)
        assert operation.done and not operation.HasField("error"), operation
        [deployed] = double.registry.endpoint(endpoint)["deployed_models"]
        route = f"/v1/endpoints/{endpoint.rsplit('/', 1)[-1]}/deployedModels/{deployed['id']}"
        log = (tmp_path / "d" / "endpoints" / f"{deployed['id']}.log").read_text()
        assert f"health {route}, predict {route}:predict" in log
        copy = f"gs://caip-tenant-4711/endpoints/{endpoint.rsplit('/', 1)[-1]}/deployedModels/{deployed['id']}/model"
        assert f"copying {copy}" in log  # AIP_STORAGE_URI: Vertex's own copy, not the registered artifacts
        url = f"{double.http_base}/v1/{endpoint}:predict"
        answer = requests.post(url, json={"instances": [[1.0, 2.0, 3.0]]}, timeout=30)
        assert answer.status_code == 200 and answer.json()["predictions"][0]["y"] == [2.0, 4.0, 6.0]
        big = {"instances": np.ones((100_000, 3)).tolist()}  # about 1.7 MB of JSON
        refused = requests.post(url, json=big, timeout=30)
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == "Request payload size exceeds the limit: 1572864 bytes."
        copied = [b.name for b in gcs_emulator.client.list_blobs("caip-tenant-4711")]
        assert "saved_model.pb" in {name.rsplit("/", 1)[-1] for name in copied}
        double.registry.set_traffic(endpoint, {})
        undo = double._undeploy(
            endpoint_service.UndeployModelRequest(endpoint=endpoint, deployed_model_id=deployed["id"])
        )
        while not undo.done and time.time() < deadline:
            time.sleep(0.2)
        assert undo.done and not undo.HasField("error"), undo
        assert list(gcs_emulator.client.list_blobs("caip-tenant-4711")) == []  # the copy goes with the deployment
    finally:
        double.stop()


def test_tuning_trials_get_their_values_as_vertex_appends_them():
    from pipelines.rehearsal.jobs import vertex_trial_flags

    values = {"learning_rate": 0.004, "hidden_units": 64, "batch_size": 32.0, "optimizer": "adam"}
    assert vertex_trial_flags(values) == [
        "--learning_rate=0.004",
        "--hidden_units=64.0",  # an integer parameter arrives as a double, and the trainer takes it
        "--batch_size=32.0",
        "--optimizer=adam",
    ]


def test_a_subprocess_talks_to_the_double(tmp_path):
    """redirect.environment(): a fresh process's GAPIC client reaches the double, not aiplatform.googleapis.com."""
    from pipelines.rehearsal import redirect
    from pipelines.rehearsal.api import VertexDouble

    double = VertexDouble(str(tmp_path), str(tmp_path / "state.json"), "p-rehearsal", "4711", "europe-west4").start()
    try:
        code = (
            "from google.cloud import aiplatform_v1\n"
            "client = aiplatform_v1.ModelServiceClient(client_options={'api_endpoint': "
            "'europe-west4-aiplatform.googleapis.com'})\n"
            "print(list(client.list_models(parent='projects/p-rehearsal/locations/europe-west4')))\n"
        )
        env = {**os.environ, **redirect.environment(double.grpc_target, double.http_base, "p-rehearsal")}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    finally:
        double.stop()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    [line] = (tmp_path / "vertex_requests.jsonl").read_text().splitlines()
    assert json.loads(line)["method"] == "ModelService.ListModels"


# --- end to end --------------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_two_rehearsals_a_canary_its_promotion_and_a_batch_job(tmp_path):
    state = tmp_path / "state"
    platform = load_config(sets=IDENTITY, environ={}).platform
    study = load_config(sets=IDENTITY, environ={}).study
    # 1: the fixed-hyperparameter branch, a new registry model and a new endpoint
    first = cli(
        "rehearse", "--out", tmp_path / "run1", "--state", state, *SETS, "--param", "tune=false", "--param", "epochs=3"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((tmp_path / "run1" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["default-hyperparameters-2"] == "SUCCEEDED" and statuses["hyperparameter-tuning-job"] == "SKIPPED"
    assert statuses["model-upload-2"] == statuses["endpoint-create"] == "SUCCEEDED"  # nothing existed yet
    # the trainer's progress lines, unchanged, in the custom job's log (Vertex: the job's container log)
    [job_log] = (tmp_path / "run1" / "vertex" / "jobs").glob("*/job.log")
    epochs = [line for line in job_log.read_text().splitlines() if line.startswith('TFPIPE_PROGRESS {"stage": "train"')]
    assert any('"event": "epoch"' in line and '"done": 3, "total": 3' in line for line in epochs), epochs
    assert summary["gate"]["blessed"] and summary["gate"]["champion"] is None
    [model] = summary["vertex"]["models"]
    assert set(model["versions"][0]["aliases"]) == {"default", "champion"}  # moved once the version served
    expect.check_custom_job(recorded(tmp_path / "run1", "JobService.CreateCustomJob")[0], platform, workers=2)
    # data prep: the Dataflow job it would have sent (checked by Beam's validator), run on the direct runner
    sent = json.loads((tmp_path / "run1" / "dataflow" / "dataflow-options.json").read_text())
    assert {k: sent[k] for k in ("runner", "project", "region", "service_account_email", "network")} == {
        "runner": "DataflowRunner",
        "project": "my-project",
        "region": platform.location,
        "service_account_email": platform.service_account,
        "network": "vpc",
    }
    assert sent["dataflow_kms_key"] == platform.encryption_spec_key_name
    assert sent["sdk_container_image"] == platform.components_image and sent["sdk_location"] == "container"
    assert re.fullmatch(
        r"gs://rehearsal/pipeline-root/[-\w]+/prepare-data/dataset-dataflow/temp", sent["temp_location"]
    )
    assert {"env=test", "team=ml"} <= set(sent["labels"])
    assert summary["dataset"]["examples"] == 1797
    expect.check_upload(recorded(tmp_path / "run1", "POST models:upload")[0], platform)
    expect.check_endpoint_create(recorded(tmp_path / "run1", "POST endpoints")[0], platform)
    expect.check_deploy(_deploys(tmp_path / "run1")[0], platform)

    # 2: the tuning branch, compared with the first run's version, deployed as a 50 % canary
    canary = [*SETS, "--param", "epochs=3", "--param", "tuning_trial_epochs=1", "--param", "traffic_percentage=50"]
    canary += ["--param", "champion_tolerance=1.0"]
    second = cli("rehearse", "--out", tmp_path / "run2", "--state", state, *canary)
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((tmp_path / "run2" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["hyperparameter-tuning-job"] == statuses["read-best-trial"] == "SUCCEEDED"
    assert len(summary["tuning"]["trials"]) == 2 and summary["tuning"]["best"]["status"] == "SUCCEEDED"
    assert statuses["model-upload"] == "SUCCEEDED" and statuses["endpoint-create"] == "SKIPPED"
    assert summary["gate"]["champion"]["name"] == f"champion {model['name']}@1"
    assert f"champion {model['name']}@1's" in summary["gate"]["reason"]
    expect.check_tuning_job(recorded(tmp_path / "run2", "JobService.CreateHyperparameterTuningJob")[0], platform, study)
    [endpoint] = summary["vertex"]["endpoints"]
    assert sorted(endpoint["traffic_split"].values()) == [50, 50] and len(endpoint["deployed_models"]) == 2
    [model] = summary["vertex"]["models"]
    assert [set(v["aliases"]) for v in model["versions"]] == [{"default", "champion"}, set()]  # canary: no alias

    promoted = cli("promote", "--rehearsal", state, *SETS)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    saved = json.loads((state / "vertex_state.json").read_text())
    [endpoint] = saved["endpoints"].values()
    assert list(endpoint["traffic_split"].values()) == [100] and len(endpoint["deployed_models"]) == 1
    assert [set(v["version_aliases"]) for v in next(iter(saved["models"].values()))["versions"]] == [
        set(),
        {"champion", "default"},
    ]

    # 2 again on unchanged data, as a schedule would: Vertex's cache serves the data prep, the tuning job and the
    # training job (their inputs hold nothing unique to a run); the gate then finds the candidate is the champion
    again = cli("rehearse", "--out", tmp_path / "run2-again", "--state", state, *canary)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads((tmp_path / "run2-again" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    for step in ("prepare-data", "hyperparameter-tuning-job", "custom-training-job", "import-trained-model"):
        assert statuses[step] == "CACHED", (step, statuses)
    assert statuses["fingerprint-data"] == statuses["find-registry-champion"] == "SUCCEEDED"  # never cached
    assert "↺ custom-training-job served from cache" in again.stdout
    assert not recorded(tmp_path / "run2-again", "JobService.CreateCustomJob")
    assert not recorded(tmp_path / "run2-again", "JobService.CreateHyperparameterTuningJob")

    # 3: a batch prediction job on the champion, local instances staged into the GCS emulator
    instances = tmp_path / "instances.jsonl"
    instances.write_text(
        "".join(json.dumps(np.full((8, 8, 1), i, np.float32).tolist()) + "\n" for i in range(4)) + "not json\n"
    )
    batch = cli(
        "rehearse",
        "--pipeline",
        "batch_prediction",
        "--out",
        tmp_path / "run3",
        "--state",
        state,
        *SETS,
        "--param",
        f"instances={instances}",
        "--param",
        "max_error_fraction=0.5",
    )
    assert batch.returncode == 0, batch.stdout + batch.stderr
    summary = json.loads((tmp_path / "run3" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["model-batch-predict"] == statuses["check-batch-prediction-job"] == "SUCCEEDED"
    assert summary["batch_prediction"]["succeeded"] == 4 and summary["batch_prediction"]["failed"] == 1
    [staged] = summary["batch_prediction"]["files"]
    assert staged.startswith("gs://") and staged.endswith("/instances.jsonl")
    assert summary["batch_prediction"]["seconds"] > 0
    assert (
        "<h2>Batch prediction</h2><p>5 instances from\n1 file(s): 4 predicted"
        in (tmp_path / "run3" / "report.html").read_text()
    )
    [job] = recorded(tmp_path / "run3", "JobService.CreateBatchPredictionJob")
    expect.check_batch_job(job, platform)
    assert job["batch_prediction_job"]["model"] == f"{model['name']}@2"  # the promoted champion
    output = summary["batch_prediction"]["output_directory"]
    assert output.startswith("gs://")
    from core.storage import gcs_client, split_gcs
    from pipelines.rehearsal import gcs

    with gcs.gcs_emulator(str(state / "gcs"), "rehearsal") as host:  # the rehearsals' Cloud Storage, kept in --state
        os.environ["STORAGE_EMULATOR_HOST"] = host
        try:
            bucket, prefix = split_gcs(output)
            results = gcs_client().bucket(bucket).blob(f"{prefix}/prediction.results-00000-of-00001")
            assert len(results.download_as_text().splitlines()) == 4
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]
    for run in ("run1", "run2", "run3"):  # every artifact and output location Vertex got: gs://
        locations = _locations(tmp_path / run)
        assert locations and all(uri.startswith("gs://") for _, uri in locations), (run, locations)
    assert _locations(tmp_path / "run2-again") == []  # its Vertex jobs were cache hits: no request named a location


LOCATIONS = ("artifact_uri", "output_uri_prefix", "uris", "gcs_output_directory", "--data-dir", "--job-dir")


def _locations(out: Path) -> list[tuple[str, str]]:
    """(field, value) of every Cloud Storage location in the recorded requests: URIs fields, and the trainer's
    location flags in job arguments."""
    found: list[tuple[str, str]] = []

    def walk(value, key=""):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            if key == "args":
                found.extend((a, b) for a, b in zip(value, value[1:]) if a in LOCATIONS)
            for item in value:
                walk(item, key)
        elif key in LOCATIONS and isinstance(value, str):
            found.append((key, value))

    for line in (out / "vertex" / "vertex_requests.jsonl").read_text().splitlines():
        walk(json.loads(line)["request"])
    return found


def _deploys(out: Path) -> list[dict]:
    lines = (out / "vertex" / "vertex_requests.jsonl").read_text().splitlines()
    return [r["request"] for r in map(json.loads, lines) if r["method"].endswith(":deployModel")]


@pytest.mark.e2e
def test_a_wrong_wire_fails_with_the_step_and_the_apis_message(tmp_path):
    """The custom job's base output directory wired to the plan's display name instead of its directory: the
    double refuses CreateCustomJob as Vertex AI would, and the rehearsal names the step and the message."""
    compiled = tmp_path / "template.yaml"
    assert cli("compile", "--target", "vertex", *IMAGE_SETS, "--output", compiled).returncode == 0
    spec = yaml.safe_load(compiled.read_text())
    wire = spec["root"]["dag"]["tasks"]["custom-training-job"]["inputs"]["parameters"]["base_output_directory"]
    wire["taskOutputParameter"]["outputParameterKey"] = "display_name"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = cli(
        "rehearse",
        "--template",
        broken,
        "--out",
        tmp_path / "run",
        "--state",
        tmp_path / "state",
        "--param",
        "tune=false",
        "--param",
        "epochs=1",
    )
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "Error: custom-training-job: Vertex AI: job_spec.base_output_directory.output_uri_prefix 'tfpipe-training-"
    ) and error.endswith("-train' is not a Cloud Storage URI (gs://BUCKET/PATH)")
    statuses = {
        s["name"]: s["status"] for s in json.loads((tmp_path / "run" / "run_summary.json").read_text())["steps"]
    }
    assert statuses["custom-training-job"] == "FAILED" and statuses["evaluate-model"] == "SKIPPED"
