import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from tests.helpers.data import write_images  # noqa: E402
from tests.helpers.processes import free_port, train  # noqa: E402
from tests.helpers.shared import built_once  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--images", action="store_true", help="run tests/images: the built images (make test-images)")


def pytest_collection_modifyitems(items):
    """The tests under tests/e2e are the `e2e` tier (`make test` runs it after `make test-fast`)."""
    e2e = Path(__file__).parent / "e2e"
    for item in items:
        if e2e in item.path.parents:
            item.add_marker(pytest.mark.e2e)


def pytest_ignore_collect(collection_path, config):
    """tests/images runs the images `make images` built: only with --images (`make test-images`)."""
    if collection_path == Path(__file__).parent / "images" and not config.getoption("--images"):
        return True
    return None


@pytest.fixture(scope="session")
def digits_data(tmp_path_factory):
    """builtin:digits prepared for 2 workers (shared by trainer, evaluation and repository tests)."""

    def build(folder):
        from components.prepare_data import prepare

        prepare("builtin:digits", str(folder / "data"), num_workers=2)

    return built_once(tmp_path_factory, "digits", build) / "data"


@pytest.fixture(scope="session")
def trained_model(digits_data, tmp_path_factory):
    """A small model trained on digits by one trainer process (no cluster: default strategy)."""

    def build(job):
        hypertune = {"CLOUD_ML_HP_METRIC_FILE": str(job / "hypertune" / "output.metrics"), "CLOUD_ML_TRIAL_ID": "7"}
        train(digits_data, job, "--epochs", "8", "--learning-rate", "0.003", env=hypertune)

    return built_once(tmp_path_factory, "trained-model", build)


@pytest.fixture(scope="session")
def iris_model(tmp_path_factory):
    """An MLP trained on builtin:iris by one trainer process: a tabular model naming its 4 feature columns."""

    def build(root):
        from components.prepare_data import prepare

        prepare("builtin:iris", str(root / "data"), num_workers=1, val_fraction=0.2, test_fraction=0.2)
        train(root / "data", root / "job", "--epochs", "30", "--batch-size", "16", "--learning-rate", "0.01")

    return built_once(tmp_path_factory, "iris", build) / "job"


@pytest.fixture(scope="session")
def image_folder_model(tmp_path_factory):
    """A CNN trained by one trainer process on an image folder (RGB PNGs of 20×16 px in class folders `cats`,
    `dogs`, prepared at 12×12): (folder, prepared data, job directory)."""

    def build(root):
        from components.prepare_data import prepare

        write_images(root / "images", per_class=16, size=(20, 16))
        prepare(
            str(root / "images"), str(root / "data"), num_workers=1, image_size=12, val_fraction=0.2, test_fraction=0.2
        )
        train(root / "data", root / "job", "--epochs", "8", "--batch-size", "8", "--learning-rate", "0.01")

    root = built_once(tmp_path_factory, "image-folder", build)
    return root / "images", root / "data", root / "job"


@pytest.fixture
def gcs_emulator(monkeypatch):
    """A real GCS JSON API server (gcp-storage-emulator), in memory, on a free localhost port, with one empty bucket
    `test-bucket` (returned). It answers one request at a time, so each test has its own (a connection another test
    left open would hold it); its listen backlog is raised from socketserver's 5, or clients reading at once (prep's
    REMOTE_READS) see their connections dropped and retried a second later, which Cloud Storage never does. Clients
    connect without credentials, as the emulator takes them: the storage client (core.storage) and Beam's GCS IO
    (which would otherwise look for credentials for 20 seconds)."""
    import http.server

    from apache_beam.internal.gcp import auth
    from gcp_storage_emulator.server import create_server

    monkeypatch.setattr(http.server.HTTPServer, "request_queue_size", 128)
    monkeypatch.setattr(auth._Credentials, "_credentials_init", True)
    monkeypatch.setattr(auth._Credentials, "_credentials", None)

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="test-bucket")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        from core.storage import gcs_client

        yield gcs_client().bucket("test-bucket")
    finally:
        server.stop()
