"""Rehearsals that run at once on one --state share it as runs share one project: the registry and endpoints
(pipelines/rehearsal/registry.py) and Cloud Storage (one emulator per state, pipelines/rehearsal/gcs.py). Two
Registry objects on one file stand for two processes: each takes the file's `flock` on its own descriptor."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading

from pipelines.rehearsal import gcs
from pipelines.rehearsal.registry import ApiError, Registry

PARENT = "projects/308452716099/locations/us-central1"
MODEL = {"display_name": "m", "artifact_uri": "gs://b/model", "container_spec": {"image_uri": "r/serve:1"}}


def registry(path) -> Registry:
    return Registry(str(path), "p", "us-central1", "308452716099")


def test_a_run_sees_the_models_and_endpoints_another_run_made_after_it_started(tmp_path):
    path = tmp_path / "vertex_state.json"
    first, second = registry(path), registry(path)  # both started on an empty state
    model, version = first.upload(PARENT, MODEL)
    endpoint = second.create_endpoint(PARENT, {"display_name": "e"})["name"]
    assert (model, version) == (f"{PARENT}/models/1002", "1")
    assert second.upload(PARENT, {**MODEL, "artifact_uri": "gs://b/model-2"}, parent_model=model) == (model, "2")
    assert [v["version_id"] for v in first.versions(model)] == ["1", "2"]
    assert first.endpoint(endpoint)["display_name"] == "e"
    assert [e["name"] for e in first.list_endpoints(PARENT, "e")] == [endpoint]
    try:
        first.create_endpoint(PARENT, {"display_name": "e"}, endpoint_id="tfpipe-e")
        second.create_endpoint(PARENT, {"display_name": "e"}, endpoint_id="tfpipe-e")
        raise AssertionError("the second run created the endpoint the first had created")
    except ApiError as e:
        assert e.status == "ALREADY_EXISTS", e.message


def test_ids_drawn_at_once_by_two_runs_are_all_different_and_every_change_is_kept(tmp_path):
    path = tmp_path / "vertex_state.json"
    runs = [registry(path), registry(path)]
    drawn: list[list[str]] = [[], []]

    def draw(index: int) -> None:
        for _ in range(25):
            drawn[index].append(runs[index].new_id())
            runs[index].create_endpoint(PARENT, {"display_name": f"e{index}"})

    threads = [threading.Thread(target=draw, args=(i,)) for i in (0, 1)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ids = drawn[0] + drawn[1]
    assert len(set(ids)) == 50
    for run in runs:
        assert len(run.list_endpoints(PARENT, "e0")) == len(run.list_endpoints(PARENT, "e1")) == 25
    assert len(registry(path).list_endpoints(PARENT, None)) == 50


def test_a_deploy_checked_before_another_run_undeployed_its_model_is_refused_when_it_lands(tmp_path):
    """A DeployModel's split is checked when the request arrives and again when the operation adds the deployed
    model: a split naming a deployed model another run has undeployed meanwhile is refused."""
    path = tmp_path / "vertex_state.json"
    first, second = registry(path), registry(path)
    model, _ = first.upload(PARENT, MODEL)
    endpoint = first.create_endpoint(PARENT, {"display_name": "e"})["name"]
    first.add_deployed(endpoint, {"id": "1", "model": model, "model_version_id": "1"}, {"0": 100})
    first.add_deployed(endpoint, {"id": "2", "model": model, "model_version_id": "1"}, {"1": 100, "0": 0})
    first.set_traffic(endpoint, {"1": 90, "2": 10})
    _, split = first.plan_deploy(endpoint, {"model": model}, {"1": 80, "2": 10, "0": 10})
    second.set_traffic(endpoint, {"1": 100})
    second.remove_deployed(endpoint, "2", {})
    try:
        first.add_deployed(endpoint, {"id": "3", "model": model, "model_version_id": "1"}, split)
        raise AssertionError("a split naming an undeployed model was applied")
    except ApiError as e:
        assert e.status == "INVALID_ARGUMENT" and "['2']" in e.message, e.message
    assert [d["id"] for d in second.endpoint(endpoint)["deployed_models"]] == ["1"]


CHILD = textwrap.dedent(
    """
    import os, sys
    from google.cloud import storage
    from pipelines.rehearsal import gcs

    with gcs.gcs_emulator(sys.argv[1], "b") as host:
        os.environ["STORAGE_EMULATOR_HOST"] = host
        bucket = storage.Client(project="p").bucket("b")
        bucket.blob("second").upload_from_string(bucket.blob("first").download_as_bytes() + b"+second")
        print(host, flush=True)
        sys.stdin.readline()  # the test lets it go on once the first user has tried to leave
        bucket.blob("third").upload_from_string(b"third")
    """
)


def _objects(directory: str) -> dict:
    from google.cloud import storage

    with gcs.gcs_emulator(directory, "b") as host, _storage_host(host):
        bucket = storage.Client(project="p").bucket("b")
        return {b.name: b.download_as_bytes() for b in bucket.list_blobs()}


@contextlib.contextmanager
def _storage_host(host: str):
    import os

    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if saved is None:
            del os.environ["STORAGE_EMULATOR_HOST"]
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved


def test_rehearsals_at_once_share_one_emulator_which_stops_when_the_last_leaves(tmp_path):
    from google.cloud import storage

    directory = str(tmp_path / "gcs")
    first = contextlib.ExitStack()
    host = first.enter_context(gcs.gcs_emulator(directory, "b"))
    with _storage_host(host):
        storage.Client(project="p").bucket("b").blob("first").upload_from_string(b"first")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, directory], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == host  # the second rehearsal uses the first one's emulator
        leaving = threading.Thread(target=first.close)
        leaving.start()
        leaving.join(2)
        assert leaving.is_alive()  # the first waits while the second still uses the emulator
        child.stdin.write("go on\n")
        child.stdin.flush()
        assert child.wait(60) == 0
        leaving.join(30)
        assert not leaving.is_alive()
    finally:
        child.kill()
        first.close()
    assert _objects(directory) == {"first": b"first", "second": b"first+second", "third": b"third"}
