"""The double's batch prediction (pipelines/rehearsal/batch.py): instances sent `batch_size` at a time to the model's
real serving container, answers written in Vertex's layout on Cloud Storage (the GCS emulator); its input conversion
(batch_input.py) against the examples of Vertex's "Get batch predictions from a custom trained model" (section "Input
data requirements") and `BatchPredictionJob.InstanceConfig`, and against the project's self-hosted reader."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import orjson
import pytest

from components.lib.batch.instances import Files, Item, instance_config, read_instances
from pipelines.rehearsal import jobs
from pipelines.rehearsal.batch import predict_files
from pipelines.rehearsal.batch_input import VertexInstanceConfig, vertex_instance_config, vertex_instances


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
        VertexInstanceConfig(),
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
        config = vertex_instance_config(
            "jsonl", {"key_field": "id", "included_fields": ["x"], "instance_type": "object"}
        )
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


def convert(instances_format: str, data: bytes, config: dict | None = None) -> list[Item]:
    """The double's items for one input file's bytes."""
    parsed = vertex_instance_config(instances_format, config or {})
    return list(vertex_instances(io.BytesIO(data), instances_format, parsed, Files()))


def sent(items: list[Item]) -> bytes:
    """The `instances` of the request body the container receives for the valid items."""
    return orjson.dumps([item.instance for item in items if item.error is None])


def test_jsonl_lines_are_sent_as_they_are():
    """Docs, JSON Lines, example 1 (arrays) and example 2 (objects): each line is an instance as it is."""
    arrays = convert("jsonl", b"[1, 2, 3, 4]\n[5, 6, 7, 8]\n")
    assert sent(arrays) == b"[[1,2,3,4],[5,6,7,8]]"
    objects = convert("jsonl", b'{ "values": [1, 2, 3, 4], "key": 1 }\n\n{ "values": [5, 6, 7, 8], "key": 2 }\n')
    assert sent(objects) == b'[{"values":[1,2,3,4],"key":1},{"values":[5,6,7,8],"key":2}]'
    assert convert("jsonl", b"[1,\n") == [
        Item("[1,", error="line 1 is not JSON: unexpected end of data: line 1 column 4 (char 3)")
    ]


def test_csv_quoted_values_are_strings_and_unquoted_ones_floats():
    """Docs, CSV: the header first, strings in double quotes, values without quotes read as floating point numbers,
    no value holding a newline; the example's rows are sent as `[[0.1,1.2,"cat1"],[4.0,5.0,"cat2"]]`. A row Vertex
    cannot convert fails alone."""
    example = convert("csv", b'"input1","input2","input3"\n0.1,1.2,"cat1"\n4.0,5.0,"cat2"\n')
    assert sent(example) == b'[[0.1,1.2,"cat1"],[4.0,5.0,"cat2"]]'
    rows = convert(
        "csv",
        b'"n","s"\r\n1,"2.5"\r\nabc,"x"\r\n3,"two\r\nlines"\r\n4\r\n-5e1,"say ""hi"""\r\n',
    )
    assert sent(rows) == b'[[1.0,"2.5"],[-50.0,"say \\"hi\\""]]'
    assert [(item.given, item.error) for item in rows if item.error] == [
        (
            'abc,"x"',
            "the unquoted value 'abc' is not a number (Vertex reads values without quotes as floating point numbers; "
            "enclose strings in double quotes)",
        ),
        ('3,"two\nlines"', "a value holds a newline, which Vertex does not accept in CSV"),
        ("4", "the row has 1 values; the header has 2"),
    ]


def _tf_records(path, records: list[bytes], compression: str = "") -> bytes:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path), options=compression or None) as writer:
        for record in records:
            writer.write(record)
    return path.read_bytes()


def test_tf_records_and_listed_files_are_b64(gcs_emulator, tmp_path):
    """Docs, TFRecord and file list: each record, and each listed file's content, is sent as `{"b64": ...}`; a record
    whose checksum differs, and a listed file that cannot be read, fail alone."""
    records = [b"\x00\x01", b"abc", b""]
    expected = b'[{"b64":"AAE="},{"b64":"YWJj"},{"b64":""}]'
    assert sent(convert("tf-record", _tf_records(tmp_path / "a.tfrecord", records))) == expected
    assert sent(convert("tf-record-gzip", _tf_records(tmp_path / "a.tfrecord.gz", records, "GZIP"))) == expected
    data = bytearray(_tf_records(tmp_path / "b.tfrecord", [b"abc", b"def"]))
    data[12] = ord("x")  # the first record's data, not its length: the second record is still read
    assert [(i.given, i.instance, i.error) for i in convert("tf-record", bytes(data))] == [
        ("record 0", None, "the record's data is corrupt (its checksum differs)"),
        ({"b64": "ZGVm"}, {"b64": "ZGVm"}, None),
    ]

    gcs_emulator.blob("f/one.bin").upload_from_string(b"\xff\x00")
    gcs_emulator.blob("f/two.txt").upload_from_string(b"two")
    listed = b"gs://test-bucket/f/one.bin\n\ngs://test-bucket/f/missing\ngs://test-bucket/f/two.txt\n"
    items = convert("file-list", listed)
    assert sent(items) == b'[{"b64":"/wA="},{"b64":"dHdv"}]'
    assert [i.given for i in items] == [f"gs://test-bucket/f/{n}" for n in ("one.bin", "missing", "two.txt")]
    assert items[1].error.startswith("cannot read gs://test-bucket/f/missing: 404")


def test_instance_config_picks_fields_and_orders_arrays():
    """InstanceConfig: the key field never reaches the model and names the result; included_fields pick (and, for
    "array", order) the fields; excluded_fields drop them; "object" needs an object on every line, "array" needs
    included_fields for an object's order; the result's `instance` is the line as given."""
    lines = b'{"id": "a", "x": 1, "y": [2], "z": "s"}\n{"x": 3, "y": [4]}\n[5, 6]\n'
    keyed = convert("jsonl", lines, {"key_field": "id", "included_fields": ["y", "x"], "instance_type": "array"})
    assert keyed == [
        Item({"id": "a", "x": 1, "y": [2], "z": "s"}, "a", [[2], 1]),
        Item({"x": 3, "y": [4]}, error="the object has no key_field 'id'"),
        Item([5, 6], error="instance_config needs a JSON object on each line; this line is not one"),
    ]
    assert [i.instance for i in convert("jsonl", lines, {"excluded_fields": ["y", "id"]})] == [
        {"x": 1, "z": "s"},
        {"x": 3},
        None,
    ]
    assert [i.error for i in convert("jsonl", lines, {"instance_type": "object"})] == [
        None,
        None,
        "instance_config needs a JSON object on each line; this line is not one",
    ]
    assert [(i.instance, i.error) for i in convert("jsonl", lines, {"instance_type": "array"})] == [
        (None, "instance_type 'array' needs included_fields to order an object's values"),
        (None, "instance_type 'array' needs included_fields to order an object's values"),
        ([5, 6], None),
    ]
    table = b'"id","a","b","c"\n"k1",1,2,3\n"k2",4,5,6\n'
    assert [(i.key, i.instance) for i in convert("csv", table, {"key_field": "id", "included_fields": ["c", "a"]})] == [
        ("k1", [3.0, 1.0]),
        ("k2", [6.0, 4.0]),
    ]
    assert [i.instance for i in convert("csv", table, {"excluded_fields": ["b", "id"]})] == [[1.0, 3.0], [4.0, 6.0]]


@pytest.mark.parametrize(
    ("instances_format", "config", "message"),
    [
        ("jsonl", {"included_fields": ["a"], "excluded_fields": ["b"]}, "when included_fields is populated"),
        ("jsonl", {"instance_type": "row"}, "instance_type 'row': supported values are object, array"),
        ("csv", {"instance_type": "object"}, "instance_type 'object' does not apply to csv"),
        ("tf-record", {"instance_type": "array"}, "instance_type 'array' does not apply to tf-record"),
        ("file-list", {"key_field": "k"}, "file-list records are sent whole"),
        ("bigquery", {}, "the rehearsal reads jsonl, csv, tf-record, tf-record-gzip, file-list"),
    ],
)
def test_the_job_fails_for_an_instance_config_vertex_refuses(instances_format, config, message):
    """Checked before any input is read or the container asked."""
    job = {
        "input_config": {"instances_format": instances_format, "gcs_source": {"uris": ["gs://test-bucket/none"]}},
        "instance_config": config,
        "output_config": {"predictions_format": "jsonl", "gcs_destination": {"output_uri_prefix": "gs://b/o"}},
    }
    with pytest.raises(jobs.JobError, match=re.escape(message)):
        jobs.run_batch_job(job, "http://127.0.0.1:9/unused", "m")


def test_a_csv_header_lacking_a_named_column_fails_the_job(gcs_emulator):
    gcs_emulator.blob("in/a.csv").upload_from_string(b'"a","b"\n1,2\n')
    job = {
        "input_config": {"instances_format": "csv", "gcs_source": {"uris": ["gs://test-bucket/in/*.csv"]}},
        "instance_config": {"key_field": "id"},
        "output_config": {
            "predictions_format": "jsonl",
            "gcs_destination": {"output_uri_prefix": "gs://test-bucket/o"},
        },
    }
    with pytest.raises(jobs.JobError, match=re.escape("the CSV header ['a', 'b'] has no column(s) ['id']")):
        jobs.run_batch_job(job, "http://127.0.0.1:9/unused", "m")


AGREED = [  # (format, file's bytes, instance config): files both conversions give the same instances for
    ("jsonl", b"[1, 2.5, 3]\n\n[4, 5, 6]\n", {}),
    ("jsonl", b'{"k": 1, "a": "s", "b": [1.5]}\n{"a": 2, "b": []}\n7\n', {"key_field": "k"}),
    (
        "jsonl",
        b'{"k": 1, "a": "s", "b": [1.5]}\n{"k": 2, "b": []}\n',
        {"included_fields": ["b", "a"], "instance_type": "array"},
    ),
    ("jsonl", b'{"a": 1, "b": 2, "c": 3}\n', {"excluded_fields": ["b"], "instance_type": "object"}),
    ("csv", b'"input1","input2","input3"\n0.1,1.2,"cat1"\n4.0,5.0,"cat2"\n', {}),
    ("csv", b'"id","a","b","c"\n"k1",1.5,2.0,"x"\n"k2",0.5,1\n', {"key_field": "id", "included_fields": ["c", "a"]}),
    ("csv", b'"a","b","c"\n1.5,2.0,"x"\n', {"excluded_fields": ["b"]}),
    ("tf-record", None, {}),
    ("tf-record-gzip", None, {}),
    ("file-list", b"gs://test-bucket/f/one.bin\ngs://test-bucket/f/missing\n\ngs://test-bucket/f/two.txt\n", {}),
]


def _both(instances_format: str, data: bytes, config: dict) -> tuple[bytes, bytes]:
    """The (key, instance, failed) of each record as JSON (1 and 1.0 differ there), by the project's reader and by
    the double."""
    project = instance_config(instances_format, feature_names=(), **config)
    ours = read_instances(io.BytesIO(data), instances_format, project, Files(), "input")
    vertex = convert(instances_format, data, config)
    return (
        orjson.dumps([(i.key, i.instance, i.error is not None) for i in ours]),
        orjson.dumps([(i.key, i.instance, i.error is not None) for i in vertex]),
    )


@pytest.mark.parametrize(("instances_format", "data", "config"), AGREED)
def test_the_self_hosted_reader_converts_as_vertex(gcs_emulator, tmp_path, instances_format, data, config):
    """The project's batch step (read_instances) sends the model what Vertex sends it, record for record."""
    if data is None:
        data = _tf_records(tmp_path / "r", [b"\x00\x01", b"abc"], "GZIP" if instances_format.endswith("gzip") else "")
    gcs_emulator.blob("f/one.bin").upload_from_string(b"\xff\x00")
    gcs_emulator.blob("f/two.txt").upload_from_string(b"two")
    ours, vertex = _both(instances_format, data, config)
    assert ours == vertex and vertex != b"[]"


@pytest.mark.xfail(
    strict=True, reason="known difference: the self-hosted CSV reader types values by their text, not by their quoting"
)
def test_the_self_hosted_reader_types_csv_values_as_vertex():
    """Vertex: a quoted value is a string, an unquoted one a float, an unquoted text fails its row. The project's
    reader parses quoted numbers as numbers, unquoted integers as integers and keeps unquoted text."""
    ours, vertex = _both("csv", b'"a","b"\n"2.5",1\n"3",2.5\nabc,"x"\n', {})
    assert ours == vertex
