"""The double's batch prediction (pipelines/rehearsal/batch.py): instances sent `batch_size` at a time to the model's
real serving container, answers written in Vertex's layout on Cloud Storage (the GCS emulator)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from components.lib.batch.instances import instance_config
from pipelines.rehearsal import jobs
from pipelines.rehearsal.batch import predict_files


def png(seed: int, size: int = 100) -> bytes:
    """An RGB PNG of noise: about 30 KB at 100 x 100."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def image_container(tmp_path):
    from tests.helpers.serving_models import image_bytes_model

    model = image_bytes_model(str(tmp_path / "model"))
    process, url = jobs.start_container(model, "1", "2", str(tmp_path / "container.log"))
    try:
        yield url
    finally:
        jobs.stop_container(process)


def lines(bucket, name: str) -> list[dict]:
    return [json.loads(line) for line in bucket.blob(name).download_as_text().splitlines()]


def test_a_file_list_of_images_in_batches_of_64(gcs_emulator, image_container):
    """64 listed PNGs of about 30 KB (a 2.6 MB request, over the online limit) are one request and all predicted; a
    listed file that cannot be read fails alone; a batch holding a corrupt image fails as a whole, with the
    container's message, as Vertex reports a failed request."""
    images = [png(i) for i in range(64)]
    assert all(25_000 < len(i) < 35_000 for i in images)
    for i, data in enumerate(images):
        gcs_emulator.blob(f"images/{i}.png").upload_from_string(data)
    gcs_emulator.blob("images/corrupt.png").upload_from_string(b"not a png")
    listed = [f"gs://test-bucket/images/{i}.png" for i in range(64)]
    gcs_emulator.blob("in/a.txt").upload_from_string("\n".join([*listed, "gs://test-bucket/images/missing.png"]))
    gcs_emulator.blob("in/b.txt").upload_from_string(f"{listed[0]}\ngs://test-bucket/images/corrupt.png\n")

    succeeded, failed = predict_files(
        image_container,
        ["gs://test-bucket/in/a.txt", "gs://test-bucket/in/b.txt"],
        "file-list",
        instance_config("file-list"),
        64,
        {},
        "gs://test-bucket/out/prediction-m-1",
    )
    assert (succeeded, failed) == (64, 3)
    results = lines(gcs_emulator, "out/prediction-m-1/prediction.results-00000-of-00002")
    assert [r["instance"] for r in results] == listed
    expected = [float(np.frombuffer(_pixels(data), np.uint8).mean()) for data in images[:3]]
    assert [r["prediction"] for r in results[:3]] == pytest.approx(expected, rel=1e-4)
    [missing] = lines(gcs_emulator, "out/prediction-m-1/prediction.errors_stats-00000-of-00002")
    assert missing["instance"] == "gs://test-bucket/images/missing.png" and missing["error"]["code"] == 3
    assert lines(gcs_emulator, "out/prediction-m-1/prediction.results-00001-of-00002") == []
    refused = lines(gcs_emulator, "out/prediction-m-1/prediction.errors_stats-00001-of-00002")
    assert [e["instance"] for e in refused] == [listed[0], "gs://test-bucket/images/corrupt.png"]
    assert {e["error"]["code"] for e in refused} == {3} and all("HTTP 400" in e["error"]["message"] for e in refused)


def _pixels(data: bytes) -> bytes:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).tobytes()


def test_jsonl_objects_with_a_key_and_parameters(gcs_emulator, tmp_path):
    """JSONL objects with a key field: the key stays out of the instance and names the result; `parameters` reach
    the container (here a signature it does not have: every instance fails with its message)."""
    from tests.helpers.serving_models import toy_model

    model = toy_model(str(tmp_path / "toy"), k=3, single_output=True)
    process, url = jobs.start_container(model, "1", "2", str(tmp_path / "container.log"))
    try:
        rows = [{"id": f"r{i}", "x": [1.0, float(i), 2.0]} for i in range(5)]
        gcs_emulator.blob("in/rows.jsonl").upload_from_string("".join(json.dumps(r) + "\n" for r in rows))
        config = instance_config("jsonl", key_field="id", included_fields=["x"], instance_type="object")
        counts = predict_files(url, ["gs://test-bucket/in/rows.jsonl"], "jsonl", config, 2, {}, "gs://test-bucket/o")
        assert counts == (5, 0)
        results = lines(gcs_emulator, "o/prediction.results-00000-of-00001")
        assert [r["key"] for r in results] == [f"r{i}" for i in range(5)]
        assert [r["prediction"] for r in results] == [[3.0, 3.0 * i, 6.0] for i in range(5)]

        other = {"signature_name": "serving_image_bytes"}
        counts = predict_files(url, ["gs://test-bucket/in/rows.jsonl"], "jsonl", config, 2, other, "gs://test-bucket/p")
        assert counts == (0, 5)
        errors = lines(gcs_emulator, "p/prediction.errors_stats-00000-of-00001")
        assert "serving_image_bytes" in errors[0]["error"]["message"]
    finally:
        jobs.stop_container(process)
