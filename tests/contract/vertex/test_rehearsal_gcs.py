"""The rehearsal's Cloud Storage (pipelines/rehearsal/gcs.py): TensorFlow's own gs:// file system, the Python client
and the steps' `/gcs/` mount all reach one GCS emulator, which takes what Cloud Storage takes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pipelines.rehearsal import gcs
from tests.helpers.rehearsal import tensorflow_on_gcs


@pytest.fixture
def emulator(tmp_path, monkeypatch):
    with gcs.gcs_emulator(str(tmp_path / "gcs"), "b") as host:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
        yield host


def blobs(prefix: str) -> dict:
    from core.storage import gcs_client

    return {b.name: b for b in gcs_client().list_blobs("b", prefix=prefix)}


def test_tensorflow_writes_and_reads_gs_uris_on_the_emulator(emulator, tmp_path):
    """Through the rehearsal's HTTPS proxy: chunked uploads keep their bytes, a folder marker `m/` sits beside
    `m/variables/...`, a SavedModel saves, loads and is renamed, and the Python client reads what TensorFlow wrote."""
    script = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        import tensorflow as tf

        data = np.random.default_rng(7).bytes(3_000_000)
        with tf.io.gfile.GFile("gs://b/raw/random.bin", "wb") as f:
            f.write(data)
        tf.io.gfile.makedirs("gs://b/m/assets")
        module = tf.Module()
        module.v = tf.Variable([1.0, 2.0])
        module.f = tf.function(lambda x: x * module.v, input_signature=[tf.TensorSpec([2], tf.float32)])
        tf.saved_model.save(module, "gs://b/m")
        tf.io.gfile.rename("gs://b/raw/random.bin", "gs://b/raw/moved.bin")
        loaded = tf.saved_model.load("gs://b/m")
        json.dump({
            "read_back": tf.io.gfile.GFile("gs://b/raw/moved.bin", "rb").read() == data,
            "old_gone": not tf.io.gfile.exists("gs://b/raw/random.bin"),
            "listing": sorted(tf.io.gfile.listdir("gs://b/m")),
            "prediction": loaded.f(tf.constant([3.0, 3.0])).numpy().tolist(),
        }, sys.stdout)
        """
    )
    result = tensorflow_on_gcs(script, emulator, tmp_path)
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {
        "read_back": True,
        "old_gone": True,
        "listing": ["assets/", "fingerprint.pb", "saved_model.pb", "variables/"],
        "prediction": [3.0, 6.0],
    }
    import numpy as np

    written = blobs("")
    assert written["raw/moved.bin"].download_as_bytes() == np.random.default_rng(7).bytes(3_000_000)
    assert "m/" in written and "m/variables/variables.index" in written and "raw/random.bin" not in written


def test_the_proxy_answers_only_googles_storage_hosts(emulator, tmp_path):
    import socket

    with gcs.tensorflow_gcs(emulator, tmp_path / "tls") as env:
        port = int(env["https_proxy"].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 403")


def test_the_mount_copies_only_what_changed(emulator, tmp_path):
    """A task's outputs are pushed from the mount and its inputs pulled into it; objects with the same bytes are not
    copied again, so their generations (which data fingerprints and caches see) stay."""
    mount = gcs.Mount(tmp_path / "mount")
    folder = mount.path("gs://b/run/task/model")
    assert mount.uri(folder) == "gs://b/run/task/model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "v.index").write_bytes(b"index")
    mount.push("gs://b/run/task/model")
    first = {name: b.generation for name, b in blobs("run/").items()}
    assert set(first) == {"run/task/model/saved_model.pb", "run/task/model/variables/v.index"}

    (folder / "variables" / "v.index").write_bytes(b"index, changed")
    mount.push("gs://b/run/task/model")
    second = {name: b.generation for name, b in blobs("run/").items()}
    assert second["run/task/model/saved_model.pb"] == first["run/task/model/saved_model.pb"]
    assert second["run/task/model/variables/v.index"] != first["run/task/model/variables/v.index"]

    elsewhere = gcs.Mount(tmp_path / "other")
    elsewhere.pull("gs://b/run/task/model")
    pulled = elsewhere.path("gs://b/run/task/model/variables/v.index")
    assert pulled.read_bytes() == b"index, changed"
    before = pulled.stat().st_mtime_ns
    elsewhere.pull("gs://b/run/task/model")
    assert pulled.stat().st_mtime_ns == before  # the same bytes: not downloaded again


def test_objects_outlive_the_emulator_that_stored_them(tmp_path, monkeypatch):
    """A rehearsal's state keeps its objects; the next rehearsal's emulator, on another port, serves them (their
    download links are rewritten to it)."""
    for attempt in range(2):
        with gcs.gcs_emulator(str(tmp_path / "gcs"), "b") as host:
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
            if attempt == 0:
                gcs.upload(Path(__file__), "gs://b/kept/test.py")
            else:
                [blob] = blobs("kept/").values()
                assert blob.download_as_bytes() == Path(__file__).read_bytes()


def test_a_deployed_models_copy(emulator, tmp_path):
    (tmp_path / "m" / "variables").mkdir(parents=True)
    (tmp_path / "m" / "saved_model.pb").write_bytes(b"graph")
    (tmp_path / "m" / "variables" / "v.data").write_bytes(b"weights")
    gcs.upload(tmp_path / "m", "gs://b/models/m")
    assert gcs.copy_folder("gs://b/models/m", "gs://tenant/copy/m") == "gs://tenant/copy/m"
    from core.storage import gcs_client

    copied = {b.name: b.download_as_bytes() for b in gcs_client().list_blobs("tenant")}
    assert copied == {"copy/m/saved_model.pb": b"graph", "copy/m/variables/v.data": b"weights"}
    gcs.delete_folder("gs://tenant/copy/m")
    assert list(gcs_client().list_blobs("tenant")) == []


def test_the_rehearsals_buckets_keep_nothing_deleted(emulator):
    """What rehearsals delete (deployed models' copies, the trainer's temporary files) leaves the disk at once: the
    rehearsal's buckets have no soft delete (Cloud Storage keeps deleted objects 7 days by default)."""
    from core.storage import gcs_client

    gcs.upload(Path(__file__), "gs://b/x.py")
    gcs.copy_folder("gs://b/x.py", "gs://tenant/copy")
    gcs.delete_folder("gs://tenant/copy")
    gcs_client().bucket("b").blob("x.py").delete()
    for name in ("b", "tenant"):
        assert gcs_client().get_bucket(name).soft_delete_policy.retention_duration_seconds == 0
        assert list(gcs_client().list_blobs(name, soft_deleted=True)) == []


def test_tensorflow_reads_in_blocks_of_the_rehearsals_size(emulator, tmp_path, monkeypatch):
    """TensorFlow's gs:// reader asks for one block per read of a small object: `READ_BLOCK_MB`, not its 64 MB
    default, whose buffer it would zero at every file it opens."""
    from gcp_storage_emulator import server

    from core.storage import gcs_client

    handle, ranges = server.Router.handle, []

    def recorded(self, method):
        if method == "GET" and self._request_handler.path.endswith("small.bin"):
            ranges.append(self._request_handler.headers.get("Range"))
        return handle(self, method)

    monkeypatch.setattr(server.Router, "handle", recorded)
    gcs_client().bucket("b").blob("raw/small.bin").upload_from_string(b"x" * 1000)
    script = 'import tensorflow as tf; print(len(tf.io.gfile.GFile("gs://b/raw/small.bin", "rb").read()))'
    result = tensorflow_on_gcs(script, emulator, tmp_path)
    assert result.stdout.split() == ["1000"]
    assert ranges == [f"bytes=0-{gcs.READ_BLOCK_MB * 2**20 - 1}"]
