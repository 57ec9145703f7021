"""The rehearsal's Vertex AI API double (pipelines/rehearsal/): its registry, endpoints, lists and routes, as Vertex
answers them (the whole rehearsal: tests/e2e/test_rehearsals.py)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipelines.rehearsal.registry import ApiError, Registry

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
        with redirect.redirected(double.grpc_target, double.http_base, "p-rehearsal"):
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
    Vertex's AIP_* routes; the endpoint's predict route (REST and gRPC) forwards to the container's, names the
    deployed model that answered and refuses a body over an online request's 1.5 MiB; a later double on the same state
    serves it again; undeploying deletes the copy; an endpoint is deleted only with nothing deployed."""
    import grpc
    import requests
    from google.api_core.exceptions import FailedPrecondition
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform_v1.services.endpoint_service.transports.grpc import EndpointServiceGrpcTransport
    from google.cloud.aiplatform_v1.services.prediction_service.transports.grpc import (
        PredictionServiceGrpcTransport,
    )
    from google.cloud.aiplatform_v1.types import endpoint as endpoint_pb, endpoint_service

    from pipelines.rehearsal import gcs
    from pipelines.rehearsal.api import VertexDouble
    from tests.helpers.serving_models import toy_model

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
        operation = double.endpoint_service.deploy_model(
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
        # Vertex names the deployed model, model and version that answered (REST and gRPC alike)
        assert {k: answer.json()[k] for k in ("deployedModelId", "model", "modelVersionId")} == {
            "deployedModelId": deployed["id"],
            "model": name,
            "modelVersionId": "1",
        }
        # the next rehearsal (a new double on the saved state) finds the model deployed, and it still serves
        double.stop()
        double = VertexDouble(str(tmp_path / "d2"), str(tmp_path / "state.json"), "p-rehearsal", "4711", "us-central1")
        double.start()
        predictor = aiplatform_v1.PredictionServiceClient(
            transport=PredictionServiceGrpcTransport(channel=grpc.insecure_channel(double.grpc_target))
        )
        answered = predictor.predict(endpoint=endpoint, instances=[[1.0, 2.0, 3.0]])
        assert answered.deployed_model_id == deployed["id"] and answered.model_version_id == "1"
        assert list(answered.predictions[0]["y"]) == [2.0, 4.0, 6.0]
        endpoints = aiplatform_v1.EndpointServiceClient(
            transport=EndpointServiceGrpcTransport(channel=grpc.insecure_channel(double.grpc_target))
        )
        with pytest.raises(FailedPrecondition, match=f"has deployed models \\({deployed['id']}\\)"):
            endpoints.delete_endpoint(name=endpoint)
        big = {"instances": np.ones((100_000, 3)).tolist()}  # about 1.7 MB of JSON
        refused = requests.post(f"{double.http_base}/v1/{endpoint}:predict", json=big, timeout=30)
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == "Request payload size exceeds the limit: 1572864 bytes."
        copied = [b.name for b in gcs_emulator.client.list_blobs("caip-tenant-4711")]
        assert "saved_model.pb" in {name.rsplit("/", 1)[-1] for name in copied}
        double.registry.set_traffic(endpoint, {})
        undo = double.endpoint_service.undeploy_model(
            endpoint_service.UndeployModelRequest(endpoint=endpoint, deployed_model_id=deployed["id"])
        )
        while not undo.done and time.time() < deadline:
            time.sleep(0.2)
        assert undo.done and not undo.HasField("error"), undo
        assert list(gcs_emulator.client.list_blobs("caip-tenant-4711")) == []  # the copy goes with the deployment
        endpoints.delete_endpoint(name=endpoint).result(timeout=30)  # nothing deployed: Vertex deletes it
        assert double.registry.list_endpoints(parent, None) == []
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


# --- a model version's commit ----------------------------------------------------------------------------------

COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"  # a git SHA-1


def test_an_uploaded_version_keeps_its_commit_label_and_a_label_vertex_refuses_is_refused(tmp_path):
    """The compiled find-model and create-model steps and GCPC's upload launcher, each a process talking to the double
    as in a rehearsal: find-model outputs the labels (the run's and source_commit), the model's creation and a new
    version's upload take them, and each version holds them, in GetModel's answer and the rehearsal summary. An upper-case commit fails find-model before any
    upload; labels holding one are refused by the double as Vertex refuses them, and no version is made."""
    import grpc
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform_v1.services.model_service.transports import ModelServiceGrpcTransport

    from pipelines.rehearsal import redirect
    from pipelines.rehearsal.api import VertexDouble
    from pipelines.rehearsal.run import vertex_section
    from tests.helpers.compiled import compiled_docs, dag
    from tests.helpers.gcpc import Launch
    from tests.helpers.platforms import LABELS, PLATFORM

    spec = compiled_docs("vertex", "training", PLATFORM)[0]
    find = dag(spec, "comp-condition-4")["find-model"]["inputs"]["parameters"]
    constants = {name: v["runtimeValue"]["constant"] for name, v in find.items() if "runtimeValue" in v}
    created = dag(spec, "comp-condition-8")["create-model"]  # no such model yet: this project's step creates it
    task = dag(spec, "comp-condition-7")["model-upload"]  # the model exists: GCPC uploads a version of it
    for labelled in (created, task):
        assert labelled["inputs"]["parameters"]["labels"] == {
            "componentInputParameter": "pipelinechannel--find-model-labels"
        }
    creation = {
        name: v["runtimeValue"]["constant"]
        for name, v in created["inputs"]["parameters"].items()
        if "runtimeValue" in v
    }
    artifacts = "gs://b/root/import-trained-model/job_dir/model"
    unmanaged = {
        "uri": artifacts,
        "type": "google.UnmanagedContainerModel",
        "metadata": {"containerSpec": PLATFORM.serving_container_spec()},
    }
    double = VertexDouble(  # the set-up of PLATFORM: its key's grants
        str(tmp_path / "d"), str(tmp_path / "state.json"), "my-project", "4711", "europe-west4", platform=PLATFORM
    )
    double.start()
    env = {**os.environ, **redirect.environment(double.grpc_target, double.http_base, "my-project")}

    def step(module: str, arguments: dict) -> subprocess.CompletedProcess:
        code = (
            "import json, sys\n"
            f"from components.{module} import {module}\n"
            f"print(json.dumps({module}(**json.loads(sys.argv[1]))._asdict()))\n"
        )
        command = [sys.executable, "-c", code, json.dumps(arguments)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    def find_model(commit: str) -> subprocess.CompletedProcess:
        arguments = {**constants, "project": "my-project", "artifact_uri": artifacts, "source_commit": commit}
        return step("find_model", arguments)

    def upload(labels: dict, folder: str, parent: str) -> subprocess.CompletedProcess:
        given = {"project": "my-project", "labels": labels}
        model = {"uri": f"https://x/v1/{parent}", "type": "google.VertexModel", "metadata": {"resourceName": parent}}
        inputs = {"unmanaged_container_model": unmanaged, "parent_model": model}
        launch = Launch(spec, task, given, inputs, tmp_path / folder)
        command = [sys.executable, "-m", launch.module, *launch.args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    try:
        found = find_model(COMMIT)
        assert found.returncode == 0, found.stderr
        outputs = json.loads(found.stdout.splitlines()[-1])
        assert (outputs["resource_name"], outputs["labels"]) == ("", {**LABELS, "source_commit": COMMIT})
        made = step(
            "create_model",
            {
                **creation,
                "project": "my-project",
                "artifact_uri": artifacts,
                "labels": outputs["labels"],
                "pipeline_job_id": "run-1",
            },
        )
        assert made.returncode == 0, made.stderr
        [model] = vertex_section(double, tmp_path)["models"]
        done = upload(outputs["labels"], "first", model["name"])
        assert done.returncode == 0, done.stderr
        [model] = vertex_section(double, tmp_path)["models"]
        assert [v["labels"] for v in model["versions"]] == [{**LABELS, "source_commit": COMMIT}] * 2
        channel = grpc.insecure_channel(double.grpc_target)
        client = aiplatform_v1.ModelServiceClient(transport=ModelServiceGrpcTransport(channel=channel))
        assert dict(client.get_model(name=f"{model['name']}@2").labels) == {**LABELS, "source_commit": COMMIT}

        refused = find_model(COMMIT.upper())
        assert refused.returncode != 0
        assert refused.stderr.splitlines()[-1] == (
            f"core.names.InvalidName: source_commit: '{COMMIT.upper()}' is not a Google Cloud label value (it must "
            "match ^[a-z0-9_-]{0,63}$)"
        )
        refused = upload({**LABELS, "source_commit": COMMIT.upper()}, "second", model["name"])
        assert refused.returncode != 0
        assert [e["message"] for e in double.errors] == [
            f"labels: invalid label source_commit={COMMIT.upper()!r} (keys ^[a-z][a-z0-9_-]{{0,62}}$, values "
            "^[a-z0-9_-]{0,63}$)"
        ]
        assert len(vertex_section(double, tmp_path)["models"][0]["versions"]) == 2
    finally:
        double.stop()
