import json
import os

import pytest
import yaml

from components import fingerprint_data as fp_module
from components.fingerprint_data import GCS_FIELDS, fingerprint, fingerprint_data
from components.lib.prep.sources import DataError, folder_files
from core.storage import staged
from tests.helpers.data import write_images

IMAGE = "example.com/tfpipe/components:abc"


def touch(path, delta_ns=1_000_000_000):
    """Move a file's mtime by `delta_ns` (explicitly: no reliance on clock resolution)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + delta_ns))


def test_local_folder_same_data_same_digest_any_listing_order(tmp_path, monkeypatch):
    src = write_images(tmp_path / "src", per_class=3)
    first = fingerprint(str(src))
    assert first["kind"] == "folder" and first["files"] == 6
    assert first["bytes"] == sum(p.stat().st_size for p in src.rglob("*.png"))
    assert first["digest"].startswith("sha256:") and len(first["digest"]) == len("sha256:") + 64
    assert fingerprint(str(src)) == first
    assert fingerprint(f"file://{src}")["digest"] == first["digest"]
    monkeypatch.setattr(fp_module, "folder_files", lambda root: folder_files(root)[::-1])
    assert fingerprint(str(src))["digest"] == first["digest"]


def test_local_folder_file_added_or_touched_changes_the_digest(tmp_path):
    src = write_images(tmp_path / "src", per_class=3)
    before = fingerprint(str(src))["digest"]
    touch(src / "cats" / "cats_000.png")
    touched = fingerprint(str(src))["digest"]
    assert touched != before
    write_images(tmp_path / "src", classes=("birds",), per_class=1)
    added = fingerprint(str(src))
    assert added["digest"] not in (before, touched) and added["files"] == 7
    (src / "README.txt").write_text("outside any class folder: prep lists it in stats.json's ignored_files")
    assert fingerprint(str(src))["digest"] != added["digest"]


def test_local_csv_file(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("a,b,label\n1,2,x\n3,4,y\n")
    result = fingerprint(str(path))
    assert (result["kind"], result["files"], result["bytes"]) == ("csv", 1, path.stat().st_size)
    assert fingerprint(str(path)) == result
    path.write_text("a,b,label\n1,2,x\n3,5,y\n")  # same size, new content
    touch(path)
    assert fingerprint(str(path))["digest"] != result["digest"]


def test_csv_globs_list_every_matched_file_local_and_gcs(tmp_path, gcs_emulator):
    """A glob data source (prep reads every file it matches) runs through the fingerprint step too: a matching file
    added changes the digest; a glob that matches nothing fails as prep does."""
    header, rows = "a,b,label\n", "".join(f"{i},{i % 3},{'xy'[i % 2]}\n" for i in range(30))
    for part in ("part-1.csv", "part-2.csv"):
        (tmp_path / part).write_text(header + rows)
    (tmp_path / "notes.txt").write_text("not matched")
    pattern = str(tmp_path / "part-*.csv")
    first = fingerprint(pattern)
    assert (first["kind"], first["files"]) == ("csv", 2) and fingerprint(pattern) == first
    (tmp_path / "part-3.csv").write_text(header + rows)
    assert fingerprint(pattern)["files"] == 3 and fingerprint(pattern)["digest"] != first["digest"]
    stats = prepare_source(pattern, tmp_path / "out")
    assert stats["records"] == 90
    assert _same_error_as_prep(str(tmp_path / "none-*.csv"), tmp_path) == f"nothing found at {tmp_path}/none-*.csv"

    for part in ("tables/part-1.csv", "tables/part-2.csv", "tables/other.txt"):
        gcs_emulator.blob(part).upload_from_string(header + rows)
    remote = fingerprint("gs://test-bucket/tables/part-*.csv")
    assert (remote["kind"], remote["files"]) == ("csv", 2)
    gcs_emulator.blob("tables/part-1.csv").upload_from_string(header + rows)  # rewritten: a new generation
    assert fingerprint("gs://test-bucket/tables/part-*.csv")["digest"] != remote["digest"]
    assert _same_error_as_prep("gs://test-bucket/tables/none-*.csv", tmp_path).startswith("nothing found at gs://")


def prepare_source(data_source, out):
    from components.prepare_data import prepare

    return prepare(data_source, str(out), num_workers=1, val_fraction=0.2, test_fraction=0.2)


def test_builtin_is_stable_per_dataset_and_scikit_learn_version(monkeypatch):
    digits = fingerprint("builtin:digits")
    assert digits == fingerprint("builtin:digits")
    assert (digits["kind"], digits["files"], digits["bytes"]) == ("builtin", 0, 0)
    assert fingerprint("builtin:iris")["digest"] != digits["digest"]
    monkeypatch.setattr(fp_module.metadata, "version", lambda name: "0.0-other")
    assert fingerprint("builtin:digits")["digest"] != digits["digest"]


def _same_error_as_prep(data_source, tmp_path):
    from components.prepare_data import prepare

    with pytest.raises((DataError, FileNotFoundError)) as prep_error:
        prepare(data_source, str(tmp_path / "out"), num_workers=1)
    with pytest.raises(type(prep_error.value)) as fp_error:
        fingerprint(data_source)
    assert str(fp_error.value) == str(prep_error.value)
    return str(fp_error.value)


@pytest.mark.parametrize(
    "name, message",
    [
        ("missing", "data source not found: "),
        ("missing.csv", "CSV file not found: "),
        ("notes.txt", "unsupported data source "),
    ],
)
def test_missing_or_unsupported_local_source_gives_preps_error(tmp_path, name, message):
    (tmp_path / "notes.txt").write_text("not data")
    assert _same_error_as_prep(str(tmp_path / name), tmp_path).startswith(message)


def test_unknown_builtin_gives_preps_error(tmp_path):
    assert "unknown built-in dataset 'mnist'" in _same_error_as_prep("builtin:mnist", tmp_path)


def _upload_images(bucket, tmp_path, folder="flowers", **kwargs):
    src = write_images(tmp_path / "src", **kwargs)
    for path in sorted(src.rglob("*.png")):
        bucket.blob(f"{folder}/{path.relative_to(src).as_posix()}").upload_from_filename(str(path))
    return src


def test_gcs_folder_added_rewritten_or_unchanged(tmp_path, gcs_emulator, monkeypatch):
    _upload_images(gcs_emulator, tmp_path, per_class=3)
    gcs_emulator.blob("flowers-other/cats/x.png").upload_from_string(b"not under flowers/")
    uri = "gs://test-bucket/flowers"
    first = fingerprint(uri)
    assert first["kind"] == "folder" and first["files"] == 6
    with staged(uri) as local:  # every file prep reads
        assert len(folder_files(local)) == first["files"]
        assert sum(os.path.getsize(os.path.join(local, f)) for f in folder_files(local)) == first["bytes"]
    assert fingerprint(uri) == first  # nothing changed
    assert fingerprint(uri + "/")["digest"] == first["digest"]

    def reversed_listing(u, fields=None):
        folder, blobs = real(u, fields=fields)
        return folder, blobs[::-1]

    real = fp_module.gcs_objects
    with monkeypatch.context() as m:
        m.setattr(fp_module, "gcs_objects", reversed_listing)
        assert fingerprint(uri)["digest"] == first["digest"]  # independent of listing order

    gcs_emulator.blob("flowers/cats/new.png").upload_from_filename(str(tmp_path / "src" / "cats" / "cats_000.png"))
    added = fingerprint(uri)
    assert added["digest"] != first["digest"] and added["files"] == 7
    assert fingerprint(uri) == added

    gcs_emulator.blob("flowers/dogs/dogs_001.png").upload_from_filename(
        str(tmp_path / "src" / "dogs" / "dogs_001.png")
    )  # same name, same bytes: a new generation
    rewritten = fingerprint(uri)
    assert rewritten["digest"] not in (first["digest"], added["digest"])
    assert (rewritten["files"], rewritten["bytes"]) == (added["files"], added["bytes"])


def test_gcs_csv_object_and_errors(tmp_path, gcs_emulator):
    blob = gcs_emulator.blob("tables/d.csv")
    blob.upload_from_string("f1,label\n1,0\n2,1\n")
    result = fingerprint("gs://test-bucket/tables/d.csv")
    assert (result["kind"], result["files"], result["bytes"]) == ("csv", 1, len("f1,label\n1,0\n2,1\n"))
    assert fingerprint("gs://test-bucket/tables/d.csv") == result
    blob.upload_from_string("f1,label\n1,0\n2,1\n")
    assert fingerprint("gs://test-bucket/tables/d.csv")["digest"] != result["digest"]

    gcs_emulator.blob("notes.txt").upload_from_string("not data")
    assert _same_error_as_prep("gs://test-bucket/notes.txt", tmp_path).startswith("unsupported data source ")
    assert _same_error_as_prep("gs://test-bucket/missing", tmp_path) == "nothing found at gs://test-bucket/missing"


@pytest.fixture
def paged_listing(gcs_emulator, monkeypatch):
    """The emulator's object listing in pages of 2 (it has no paging of its own); records the `fields` asked."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import objects

    asked = []

    def ls(request, response, storage, *args, **kwargs):
        objects.ls(request, response, storage, *args, **kwargs)
        body = json.loads(response._content)
        start = int(request.query.get("pageToken", ["0"])[0])
        items = body.get("items", [])
        body["items"] = items[start : start + 2]
        if start + 2 < len(items):
            body["nextPageToken"] = str(start + 2)
        asked.append(request.query.get("fields", [None])[0])
        response.json(body)

    for _, handlers in server.HANDLERS:
        if handlers.get(server.GET) is objects.ls:
            monkeypatch.setitem(handlers, server.GET, ls)
    return asked


def test_gcs_listing_follows_pages_with_trimmed_fields(tmp_path, gcs_emulator, paged_listing):
    _upload_images(gcs_emulator, tmp_path, per_class=3)
    result = fingerprint("gs://test-bucket/flowers")
    assert result["files"] == 6
    assert paged_listing == [GCS_FIELDS] * 3  # three pages of two
    assert "nextPageToken" in GCS_FIELDS


def test_step_returns_the_digest_and_logs_one_line(tmp_path, capsys):
    src = write_images(tmp_path / "src", per_class=2)
    assert fingerprint_data(str(src)) == fingerprint(str(src))["digest"]
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "(folder): 4 files, " in out[0] and out[0].endswith(fingerprint(str(src))["digest"])


def test_prepare_records_the_fingerprint_in_stats(tmp_path):
    from kfp.dsl import Artifact, Dataset

    from components.prepare_data import prepare, prepare_data

    stats = prepare("builtin:iris", str(tmp_path / "plain"), num_workers=1, val_fraction=0.2, test_fraction=0.2)
    assert stats["data_fingerprint"] == ""
    dataset, stats_artifact = Dataset(uri=str(tmp_path / "step")), Artifact(uri=str(tmp_path / "stats.json"))
    prepare_data(
        "builtin:iris", 1, 0.2, 0.2, 0, "label", 0.05, "", dataset, stats_artifact, data_fingerprint="sha256:abc"
    )
    assert json.loads((tmp_path / "step" / "stats.json").read_text())["data_fingerprint"] == "sha256:abc"
    assert json.loads((tmp_path / "stats.json").read_text())["data_fingerprint"] == "sha256:abc"
    assert dataset.metadata["data_fingerprint"] == "sha256:abc"


def test_compiled_pipeline_never_caches_the_fingerprint_and_feeds_prepare_data(tmp_path):
    from kfp import compiler, dsl

    from components.prepare_data import prepare_data

    fingerprint_op = dsl.component(fingerprint_data, base_image=IMAGE, install_kfp_package=False)
    prepare_op = dsl.component(prepare_data, base_image=IMAGE, install_kfp_package=False)

    @dsl.pipeline(name="fingerprint-check")
    def pipeline(data_source: str = "gs://bucket/flowers"):
        fp = fingerprint_op(data_source=data_source).set_caching_options(False)
        prepare_op(
            data_source=data_source,
            num_workers=1,
            val_fraction=0.1,
            test_fraction=0.1,
            image_size=0,
            label_column="label",
            max_corrupt_fraction=0.05,
            split_salt="",
            data_fingerprint=fp.output,
        )

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    spec = yaml.safe_load(path.read_text())
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["fingerprint-data"]["cachingOptions"] == {}  # never served from the cache
    assert tasks["prepare-data"]["cachingOptions"] == {"enableCache": True}
    assert tasks["prepare-data"]["inputs"]["parameters"]["data_fingerprint"] == {
        "taskOutputParameter": {"producerTask": "fingerprint-data", "outputParameterKey": "Output"}
    }
    assert tasks["fingerprint-data"]["inputs"]["parameters"]["data_source"] == {
        "componentInputParameter": "data_source"
    }
    assert (
        spec["components"]["comp-fingerprint-data"]["outputDefinitions"]["parameters"]["Output"]["parameterType"]
        == "STRING"
    )
    optional = spec["components"]["comp-prepare-data"]["inputDefinitions"]["parameters"]["data_fingerprint"]
    assert optional["isOptional"] is True and optional["defaultValue"] == ""
    assert spec["deploymentSpec"]["executors"]["exec-fingerprint-data"]["container"]["image"] == IMAGE
