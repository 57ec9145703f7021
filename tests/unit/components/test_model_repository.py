import os
import threading
from http import HTTPStatus

import pytest

from components.lib.deploy import model_repository
from components.lib.deploy.model_repository import champion, publish, read_version, remove_version, versions
from core.names import InvalidName


@pytest.fixture(scope="session")
def small_model(tmp_path_factory):
    """A tiny SavedModel (one variable, a serving_default signature)."""
    import tensorflow as tf

    class Scale(tf.Module):
        def __init__(self):
            self.factor = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            return {"y": x * self.factor}

    path = tmp_path_factory.mktemp("small") / "model"
    module = Scale()
    tf.saved_model.save(module, str(path), signatures=module.__call__)
    return path


@pytest.fixture
def gcs_repo(gcs_emulator, monkeypatch):
    """The emulator, taught GCS's write precondition, which it ignores (see test_stock_emulator_ignores_...): a
    multipart upload whose ifGenerationMatch differs from the live object's generation (0: none) gets 412. The check
    and the write happen under one lock, atomically as on GCS."""
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    upload, lock = objects._multipart_upload, threading.Lock()

    def conditional_upload(request, response, storage):
        name = request.query.get("name", [request.data["meta"].get("name")])[0]
        wanted = request.query.get("ifGenerationMatch")
        with lock:
            if wanted:
                try:
                    live = storage.get_file_obj(request.params["bucket_name"], name)["generation"]
                except NotFound:
                    live = "0"
                if live != wanted[0]:
                    response.status = HTTPStatus.PRECONDITION_FAILED
                    response.json({"error": {"code": 412, "message": "conditionNotMet"}})
                    return
            upload(request, response, storage)

    monkeypatch.setattr(objects, "_multipart_upload", conditional_upload)
    return gcs_emulator


def names(bucket, prefix):
    return sorted(b.name[len(prefix) :] for b in bucket.list_blobs(prefix=prefix))


def model_files(model):
    return sorted(str(p.relative_to(model)) for p in model.rglob("*") if p.is_file())


def publish_concurrently(model, base, count):
    published = []
    threads = [
        threading.Thread(target=lambda i=i: published.append(publish(str(model), base, "m", {"run": i})))
        for i in range(count)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return published


def test_local_versions_increase_with_metadata(small_model, tmp_path):
    repo = str(tmp_path / "repo")
    assert versions(repo, "m") == [] and champion(repo, "m") is None
    published = [publish(str(small_model), repo, "m", {"run": i}) for i in range(3)]
    assert [v.number for v in published] == [1, 2, 3]
    assert versions(repo, "m") == [1, 2, 3]
    assert published[2] == model_repository.Version(3, f"{repo}/m/3", {"run": 2, "version": 3, "model_name": "m"})
    assert champion(repo, "m") == published[2]
    assert read_version(repo, "m", 1).metadata == {"run": 0, "version": 1, "model_name": "m"}
    assert (tmp_path / "repo/m/1/saved_model.pb").read_bytes() == (small_model / "saved_model.pb").read_bytes()
    assert model_files(tmp_path / "repo/m/2") == sorted(model_files(small_model) + [model_repository.METADATA_FILE])
    assert sorted(p.name for p in (tmp_path / "repo/m").iterdir()) == [".claims", "1", "2", "3"]


def test_local_existing_version_is_never_overwritten(small_model, tmp_path):
    repo = tmp_path / "repo"
    (repo / "m/3").mkdir(parents=True)
    (repo / "m/3/saved_model.pb").write_bytes(b"made by hand")
    assert publish(str(small_model), str(repo), "m", {}).number == 4
    assert (repo / "m/3/saved_model.pb").read_bytes() == b"made by hand"
    assert versions(str(repo), "m") == [3, 4]
    assert read_version(str(repo), "m", 3).metadata == {}


def test_local_concurrent_publishes_get_distinct_versions(small_model, tmp_path):
    repo = str(tmp_path / "repo")
    published = publish_concurrently(small_model, repo, 8)
    assert sorted(v.number for v in published) == list(range(1, 9))
    assert versions(repo, "m") == list(range(1, 9))
    for v in published:
        assert read_version(repo, "m", v.number).metadata == v.metadata
        assert v.metadata["version"] == v.number
    assert sorted(v.metadata["run"] for v in published) == list(range(8))
    assert sorted(p.name for p in (tmp_path / "repo/m").iterdir()) == [".claims"] + [str(n) for n in range(1, 9)]


def test_local_remove_version_never_reuses_its_number(small_model, tmp_path):
    repo = str(tmp_path / "repo")
    for _ in range(2):
        publish(str(small_model), repo, "m", {})
    remove_version(repo, "m", 2)
    assert versions(repo, "m") == [1] and champion(repo, "m").number == 1
    assert not (tmp_path / "repo/m/2").exists()
    assert publish(str(small_model), repo, "m", {}).number == 3
    # a version made without a claim (by hand, or by an older publish) is claimed when removed
    (tmp_path / "repo/m/7").mkdir()
    (tmp_path / "repo/m/7/saved_model.pb").write_bytes(b"x")
    remove_version(repo, "m", 7)
    assert publish(str(small_model), repo, "m", {}).number == 8
    assert versions(repo, "m") == [1, 3, 8]
    assert sorted(p.name for p in (tmp_path / "repo/m").iterdir()) == [".claims", "1", "3", "8"]
    with pytest.raises(FileNotFoundError, match="no version 2 in"):
        remove_version(repo, "m", 2)


def test_errors(small_model, tmp_path):
    repo = str(tmp_path / "repo")
    for call in (
        lambda: publish(str(small_model), "", "m", {}),
        lambda: versions("", "m"),
        lambda: read_version("", "m", 1),
        lambda: remove_version("", "m", 1),
    ):
        with pytest.raises(ValueError, match="no model repository configured"):
            call()
    assert champion("", "m") is None
    with pytest.raises(FileNotFoundError, match=f"no saved_model.pb in {tmp_path}"):
        publish(str(tmp_path), repo, "m", {})
    with pytest.raises(FileNotFoundError, match=f"no saved_model.pb in {repo}/m/1"):
        read_version(repo, "m", 1)
    assert versions(repo, "m") == []


@pytest.mark.parametrize("name", ["", "..", "../escape", "a/b", ".claims", "a b"])
def test_a_name_that_is_no_path_segment_is_refused_before_the_disk_is_touched(small_model, tmp_path, name):
    repo = str(tmp_path / "repo")
    for call in (
        lambda: publish(str(small_model), repo, name, {}),
        lambda: versions(repo, name),
        lambda: read_version(repo, name, 1),
        lambda: remove_version(repo, name, 1),
        lambda: champion(repo, name),
    ):
        with pytest.raises(InvalidName, match="^model_name: one path segment"):
            call()
    assert list(tmp_path.iterdir()) == []


def test_a_model_folder_linked_out_of_the_repository_is_neither_written_nor_emptied(small_model, tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "elsewhere" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "linked").symlink_to(tmp_path / "elsewhere")
    for call in (
        lambda: publish(str(small_model), str(tmp_path / "repo"), "linked", {}),
        lambda: remove_version(str(tmp_path / "repo"), "linked", 1),
    ):
        with pytest.raises(InvalidName, match=f"^model_name: must stay inside {tmp_path / 'repo'}"):
            call()
    assert os.listdir(tmp_path / "elsewhere") == ["1"]


def test_stock_emulator_ignores_if_generation_match(gcs_emulator):
    """Why gcs_repo exists: unpatched, a create-if-absent of an existing object succeeds and overwrites it."""
    gcs_emulator.blob("claim").upload_from_string("first", if_generation_match=0)
    gcs_emulator.blob("claim").upload_from_string("second", if_generation_match=0)
    assert gcs_emulator.blob("claim").download_as_text() == "second"


def test_gcs_publish_read_champion_and_remove(small_model, gcs_repo, monkeypatch):
    from google.api_core.exceptions import PreconditionFailed
    from google.cloud.storage import Blob

    base = "gs://test-bucket/repo"
    assert versions(base, "m") == [] and champion(base, "m") is None
    first = publish(str(small_model), base, "m", {"run": "a"})
    second = publish(str(small_model), base, "m", {"run": "b"})
    assert (first.number, second.number) == (1, 2)
    assert versions(base, "m") == [1, 2]
    assert read_version(base, "m", 1) == model_repository.Version(
        1, f"{base}/m/1", {"run": "a", "version": 1, "model_name": "m"}
    )
    assert (
        champion(base, "m")
        == second
        == model_repository.Version(2, f"{base}/m/2", {"run": "b", "version": 2, "model_name": "m"})
    )
    assert names(gcs_repo, "repo/m/2/") == sorted(model_files(small_model) + [model_repository.METADATA_FILE])
    assert gcs_repo.blob("repo/m/2/saved_model.pb").download_as_bytes() == (small_model / "saved_model.pb").read_bytes()
    blobs = {b.name: int(b.generation) for b in gcs_repo.list_blobs(prefix="repo/m/2/")}
    assert blobs.pop("repo/m/2/saved_model.pb") > max(blobs.values())  # written last
    with pytest.raises(PreconditionFailed):  # the claim is create-if-absent
        gcs_repo.blob("repo/m/.claims/2").upload_from_string("x", if_generation_match=0)

    deleted, delete = [], Blob.delete
    monkeypatch.setattr(Blob, "delete", lambda blob, *a, **kw: (deleted.append(blob.name), delete(blob, *a, **kw)))
    remove_version(base, "m", 2)
    assert deleted[0] == "repo/m/2/saved_model.pb" and len(deleted) == len(blobs) + 1
    assert names(gcs_repo, "repo/m/2/") == []
    assert versions(base, "m") == [1] and champion(base, "m").number == 1
    assert names(gcs_repo, "repo/m/.claims/") == ["1", "2"]
    assert publish(str(small_model), base, "m", {}).number == 3
    with pytest.raises(FileNotFoundError, match="no version 2 in gs://test-bucket/repo/m"):
        remove_version(base, "m", 2)


def test_gcs_concurrent_publishes_get_distinct_versions(small_model, gcs_repo):
    base = "gs://test-bucket"
    published = publish_concurrently(small_model, base, 8)
    assert sorted(v.number for v in published) == list(range(1, 9))
    assert versions(base, "m") == list(range(1, 9))
    for v in published:
        assert read_version(base, "m", v.number) == v and v.metadata["version"] == v.number
    assert sorted(v.metadata["run"] for v in published) == list(range(8))


def test_gcs_lost_claim_race_moves_on_and_a_retried_claim_is_recognised(small_model, gcs_repo, monkeypatch):
    from google.cloud.storage import Blob

    base = "gs://test-bucket/repo"
    upload = Blob.upload_from_string

    def racing_upload(blob, data, **kwargs):
        if blob.name == "repo/m/.claims/1":  # another publish claims 1 between our listing and our claim
            upload(gcs_repo.blob(blob.name), "racer", if_generation_match=0)
        if blob.name == "repo/m/.claims/3":  # our claim lands but its reply is lost: the retry gets 412
            upload(blob, data, **kwargs)
        return upload(blob, data, **kwargs)

    monkeypatch.setattr(Blob, "upload_from_string", racing_upload)
    assert publish(str(small_model), base, "m", {}).number == 2
    assert gcs_repo.blob("repo/m/.claims/1").download_as_text() == "racer"
    assert publish(str(small_model), base, "m", {}).number == 3
    assert versions(base, "m") == [2, 3]


def test_gcs_partial_version_is_not_listed(small_model, gcs_repo):
    base = "gs://test-bucket/repo"
    gcs_repo.blob("repo/m/5/variables/variables.index").upload_from_string(b"half")
    gcs_repo.blob(f"repo/m/5/{model_repository.METADATA_FILE}").upload_from_string('{"version": 5}')
    assert versions(base, "m") == [] and champion(base, "m") is None
    with pytest.raises(FileNotFoundError, match="no saved_model.pb in gs://test-bucket/repo/m/5"):
        read_version(base, "m", 5)
    assert publish(str(small_model), base, "m", {}).number == 6  # never writes into a partial version
    assert names(gcs_repo, "repo/m/5/") == [f"{model_repository.METADATA_FILE}", "variables/variables.index"]
    assert versions(base, "m") == [6] and champion(base, "m").number == 6
    remove_version(base, "m", 5)
    assert names(gcs_repo, "repo/m/5/") == [] and names(gcs_repo, "repo/m/.claims/") == ["5", "6"]
