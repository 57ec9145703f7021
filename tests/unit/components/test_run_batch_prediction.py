import base64
import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from components.lib.batch.budget import BatchPredictionError, check_error_budget
from components.lib.batch.instances import InstanceConfig, instance_config
from components.run_batch_prediction import batch_predict, resolve_model
from tests.helpers.data import IRIS_FEATURES, iris_csv
from tests.helpers.model_answers import prepared_class_ids

SHARD = re.compile(r"^prediction\.(results|errors_stats)-(\d{5})-of-(\d{5})$")


def save_module(module, path) -> str:
    import tensorflow as tf

    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve.get_concrete_function()})
    return str(path)


@pytest.fixture(scope="module")
def strings_model(tmp_path_factory):
    """`x_bytes` strings → `length` (bytes); inputs of 1000 bytes or more fail inside the model."""
    import tensorflow as tf

    class Strings(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="x_bytes")])
        def serve(self, x_bytes):
            length = tf.strings.length(x_bytes)
            with tf.control_dependencies([tf.debugging.assert_less(length, 1000, message="too long")]):
                return {"length": tf.identity(length)}

    return save_module(Strings(), tmp_path_factory.mktemp("strings") / "model")


@pytest.fixture(scope="module")
def tabular_model(tmp_path_factory):
    """`features` float32 [None, 3] → `class_id` (argmax) and `total`."""
    import tensorflow as tf

    class Tabular(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
        def serve(self, features):
            return {"class_id": tf.argmax(features, axis=1), "total": tf.reduce_sum(features, axis=1)}

    return save_module(Tabular(), tmp_path_factory.mktemp("tabular") / "model")


def read_output(directory, name: str, shards: int) -> tuple[list, list]:
    """(results, errors) lines of a local output directory, after checking its layout."""
    directory = Path(directory)
    assert re.fullmatch(rf"prediction-{name}-\d{{4}}_\d{{2}}_\d{{2}}T\d{{2}}_\d{{2}}_\d{{2}}_\d{{3}}Z", directory.name)
    expected = {
        f"prediction.{kind}-{k:05d}-of-{shards:05d}" for kind in ("results", "errors_stats") for k in range(shards)
    }
    assert {p.name for p in directory.iterdir()} == expected
    lines = {
        kind: [
            json.loads(line)
            for k in range(shards)
            for line in (directory / f"prediction.{kind}-{k:05d}-of-{shards:05d}").read_text().splitlines()
        ]
        for kind in ("results", "errors_stats")
    }
    return lines["results"], lines["errors_stats"]


def write_lines(path, lines) -> str:
    Path(path).write_text("".join(line + "\n" for line in lines))
    return str(path)


def b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode()}


def test_jsonl_digits_match_the_signature_and_bad_lines_become_errors(trained_model, digits_data, tmp_path):
    import tensorflow as tf

    from trainer import data

    stats = data.load_stats(str(digits_data))
    images = np.concatenate(
        [x.numpy() for x, _ in data.make_dataset(str(digits_data), "test", stats, 256, training=False)]
    )[:40].astype(np.float32)
    small = images[0, :6, :6]  # another valid shape: the model resizes
    dumps = [json.dumps(x.tolist()) for x in images]
    first = write_lines(tmp_path / "a.jsonl", dumps[:20] + ["{not json", json.dumps(np.zeros((8, 8, 3)).tolist()), ""])
    write_lines(tmp_path / "b.jsonl", dumps[20:] + [json.dumps({"image": small.tolist()}), '"hello"'])

    summary = batch_predict(
        str(trained_model / "model"),
        f"{first},{tmp_path}/b*.jsonl",
        "jsonl",
        str(tmp_path / "out"),
        "digits",
        batch_size=16,
    )
    results, errors = read_output(summary["output_directory"], "digits", 2)
    assert (summary["instances"], summary["succeeded"], summary["failed"]) == (44, 41, 3)
    assert len(results) == 41 and len(errors) == 3 and summary["files"] == [first, str(tmp_path / "b.jsonl")]
    assert all(
        set(r) == {"instance", "prediction"} and set(r["prediction"]) == {"probabilities", "class_id"} for r in results
    )
    signature = tf.saved_model.load(str(trained_model / "model")).signatures["serving_default"]
    expected = signature(image=tf.constant(images))["class_id"].numpy()
    by_instance = {json.dumps(r["instance"]): r["prediction"] for r in results}
    assert [by_instance[d]["class_id"] for d in dumps] == expected.tolist()
    assert (
        by_instance[json.dumps({"image": small.tolist()})]["class_id"]
        == signature(image=tf.constant(small[None]))["class_id"].numpy()[0]
    )
    assert {e["error"]["code"] for e in errors} == {3}
    messages = {json.dumps(e["instance"]): e["error"]["message"] for e in errors}
    assert messages['"{not json"'].startswith("invalid JSON")
    assert "expects shape [?,?,1] per instance, got [8, 8, 3]" in messages[json.dumps(np.zeros((8, 8, 3)).tolist())]
    assert "cannot convert" in messages['"hello"']


def test_csv_rows_become_lists_and_wrong_field_counts_become_errors(tabular_model, tmp_path):
    rows = [[1, 5.5, 2], [9, 0, -1], [0.5, 0.25, 3]]
    with open(tmp_path / "a.csv", "w", newline="") as f:
        csv.writer(f).writerows([["a", "b", "c"], *rows, [1, 2], ["x", 1, 2]])
    write_lines(tmp_path / "b.csv", ["a,b,c", "4,4,5", "", "7,1,1,1"])

    summary = batch_predict(
        tabular_model, str(tmp_path / "*.csv"), "csv", str(tmp_path / "out"), "tab", batch_size=2, parallelism=2
    )
    results, errors = read_output(summary["output_directory"], "tab", 2)
    assert (len(results), len(errors)) == (4, 3) and summary["instances"] == 7
    assert [r["instance"] for r in results] == [*rows, [4, 4, 5]]
    assert [r["prediction"]["class_id"] for r in results] == [int(np.argmax(r)) for r in [*rows, [4, 4, 5]]]
    assert results[0]["prediction"]["total"] == 8.5
    messages = {json.dumps(e["instance"]): (e["error"]["code"], e["error"]["message"]) for e in errors}
    assert messages['["1", "2"]'] == (3, "the row has 2 fields; the header has 3")
    assert messages['["7", "1", "1", "1"]'] == (3, "the row has 4 fields; the header has 3")
    assert messages['["x", 1, 2]'][0] == 3 and "cannot convert" in messages['["x", 1, 2]'][1]


def test_csv_shaped_like_the_training_csv_is_matched_to_the_models_feature_columns(iris_model, tmp_path):
    """The header is matched to the model's feature columns by name, in any order; the label column (and any other
    extra column) is not sent."""
    import tensorflow as tf

    columns = ["label", *reversed(IRIS_FEATURES), "id"]
    path, features = iris_csv(tmp_path / "iris.csv", columns)
    summary = batch_predict(str(iris_model / "model"), path, "csv", str(tmp_path / "out"), "iris")
    results, errors = read_output(summary["output_directory"], "iris", 1)
    assert (summary["succeeded"], summary["failed"], errors) == (150, 0, [])
    signature = tf.saved_model.load(str(iris_model / "model")).signatures["serving_default"]
    expected = signature(features=tf.constant(features))["class_id"].numpy().tolist()
    assert [r["prediction"]["class_id"] for r in results] == expected
    assert results[0]["instance"][0] == "setosa" and len(results[0]["instance"]) == 6  # the row as given

    # the same with a key column: the output carries the key; named exclusions are checked against the features
    keyed = batch_predict(
        str(iris_model / "model"),
        path,
        "csv",
        str(tmp_path / "keyed"),
        "iris",
        key_field="id",
        excluded_fields=["label"],
    )
    results, _ = read_output(keyed["output_directory"], "iris", 1)
    assert results[3] == {"key": "r3", "prediction": results[3]["prediction"]}
    assert [r["prediction"]["class_id"] for r in results] == expected
    with pytest.raises(ValueError, match=r"excluded_fields names the model's feature column\(s\) \['petal width"):
        batch_predict(
            str(iris_model / "model"), path, "csv", str(tmp_path / "x"), "iris", excluded_fields=["petal width (cm)"]
        )

    short, _ = iris_csv(tmp_path / "short.csv", ["label", *IRIS_FEATURES[:3]])
    with pytest.raises(ValueError, match=r"lacks the model's feature column\(s\) \['petal width \(cm\)'\]"):
        batch_predict(str(iris_model / "model"), short, "csv", str(tmp_path / "y"), "iris")


def test_jsonl_objects_as_arrays_of_the_models_feature_columns(iris_model, tmp_path):
    lines = [
        json.dumps({"label": "x", **{f: 1.0 + i for i, f in enumerate(reversed(IRIS_FEATURES))}}),
        json.dumps({IRIS_FEATURES[0]: 5.0}),
        json.dumps([5.1, 3.5, 1.4, 0.2]),
    ]
    summary = batch_predict(
        str(iris_model / "model"),
        write_lines(tmp_path / "a.jsonl", lines),
        "jsonl",
        str(tmp_path / "out"),
        "iris",
        instance_type="array",
    )
    results, errors = read_output(summary["output_directory"], "iris", 1)
    assert len(results) == 2 and [e["error"]["message"] for e in errors] == [
        f"the object lacks the model's feature field(s) {IRIS_FEATURES[1:]}"
    ]


def test_included_and_excluded_fields_without_feature_names(tabular_model, tmp_path):
    """A model that does not name its features gets what the options select, in the order they say."""
    write_lines(tmp_path / "a.csv", ["c,label,a,b", "1,x,7,2", "3,y,1,1"])
    out = batch_predict(
        tabular_model, str(tmp_path / "a.csv"), "csv", str(tmp_path / "i"), "tab", included_fields=["a", "b", "c"]
    )
    assert [r["prediction"]["class_id"] for r in read_output(out["output_directory"], "tab", 1)[0]] == [0, 2]
    out = batch_predict(
        tabular_model, str(tmp_path / "a.csv"), "csv", str(tmp_path / "e"), "tab", excluded_fields="label"
    )  # file order: c, a, b
    assert [r["prediction"]["class_id"] for r in read_output(out["output_directory"], "tab", 1)[0]] == [1, 0]
    write_lines(tmp_path / "b.jsonl", ['{"a": 1, "b": 9, "c": 2, "id": 7}', '{"a": 1}', "[1, 2, 3]"])
    out = batch_predict(
        tabular_model,
        str(tmp_path / "b.jsonl"),
        "jsonl",
        str(tmp_path / "j"),
        "tab",
        included_fields=["a", "b", "c"],
        instance_type="array",
    )
    results, errors = read_output(out["output_directory"], "tab", 1)
    assert [r["prediction"]["class_id"] for r in results] == [1, 2]  # the array line passes unchanged
    assert [e["error"]["message"] for e in errors] == ["the object lacks included field(s) ['b', 'c']"]
    with pytest.raises(ValueError, match="included_fields \\['d'\\] are not columns of the header"):
        batch_predict(
            tabular_model, str(tmp_path / "a.csv"), "csv", str(tmp_path / "x"), "tab", included_fields=["a", "d"]
        )


@pytest.mark.parametrize(
    "instances_format, options, message",
    [
        ("csv", {"included_fields": ["a"], "excluded_fields": ["b"]}, "not both"),
        ("csv", {"instance_type": "object"}, "CSV rows reach the model as arrays"),
        ("jsonl", {"instance_type": "array"}, "give included_fields"),
        ("jsonl", {"instance_type": "table"}, "unknown instance_type 'table'"),
        ("jsonl", {"key_field": "id", "included_fields": ["id", "a"]}, "key_field 'id' is never sent"),
        (
            "file-list",
            {"excluded_fields": ["a"]},
            "excluded_fields applies to jsonl, csv and bigquery instances, not file-list",
        ),
        (
            "tf-record",
            {"key_field": "k", "instance_type": "array"},
            "key_field, instance_type apply to jsonl, csv and bigquery",
        ),
    ],
)
def test_instance_config_refuses_what_could_not_work(instances_format, options, message):
    with pytest.raises(ValueError, match=message):
        instance_config(instances_format, **options)


def test_instance_config_defaults_to_the_models_feature_columns():
    features = ("a", "b")
    assert instance_config("csv", feature_names=features) == InstanceConfig(included_fields=features, by_features=True)
    assert instance_config(
        "csv", key_field="id", excluded_fields="label, id", feature_names=features
    ) == InstanceConfig(key_field="id", included_fields=features, by_features=True)
    assert instance_config("csv", included_fields=["b", "a"], feature_names=features) == InstanceConfig(
        included_fields=("b", "a")
    )  # named by the user: as given
    assert instance_config("jsonl", feature_names=features) == InstanceConfig()  # objects stay objects
    assert instance_config("jsonl", instance_type="array", feature_names=features) == InstanceConfig(
        "array", included_fields=features, by_features=True
    )
    assert instance_config("csv") == InstanceConfig()  # no names known: every column but the key


def test_key_field_replaces_the_instance_by_its_key(tabular_model, tmp_path):
    write_lines(tmp_path / "a.csv", ["id,a,b,c", "k1,1,7,2", "k2,3,1,1"])
    write_lines(tmp_path / "b.jsonl", ['{"id": 5, "features": [0, 0, 1]}', '{"features": [1, 0, 0]}'])

    csv_results, _ = read_output(
        batch_predict(tabular_model, str(tmp_path / "a.csv"), "csv", str(tmp_path / "c"), "tab", key_field="id")[
            "output_directory"
        ],
        "tab",
        1,
    )
    assert csv_results == [
        {"key": "k1", "prediction": {"class_id": 1, "total": 10.0}},
        {"key": "k2", "prediction": {"class_id": 0, "total": 5.0}},
    ]
    results, errors = read_output(
        batch_predict(tabular_model, str(tmp_path / "b.jsonl"), "jsonl", str(tmp_path / "j"), "tab", key_field="id")[
            "output_directory"
        ],
        "tab",
        1,
    )
    assert results == [{"key": 5, "prediction": {"class_id": 2, "total": 1.0}}]
    assert errors == [
        {
            "instance": {"features": [1, 0, 0]},
            "error": {"code": 3, "message": "key_field 'id' needs an object instance with that field"},
        }
    ]


@pytest.mark.parametrize("instances_format", ["tf-record", "tf-record-gzip"])
def test_tf_records_reach_the_model_as_b64(strings_model, tmp_path, instances_format):
    import tensorflow as tf

    options = "GZIP" if instances_format == "tf-record-gzip" else None
    records = [b"a", b"hello", b"\x00\xffbinary", b""]
    for name, items in (("a", records), ("b", [b"x" * 1500, b"ok"])):
        with tf.io.TFRecordWriter(str(tmp_path / f"{name}.tfrecord"), options) as writer:
            for record in items:
                writer.write(record)

    summary = batch_predict(
        strings_model, str(tmp_path / "*.tfrecord"), instances_format, str(tmp_path / "out"), "strings", batch_size=3
    )
    results, errors = read_output(summary["output_directory"], "strings", 2)
    assert summary["signature_name"] == "serving_default"  # it takes strings: the records as they are
    # the batch the model fails on is retried instance by instance: only the failing instance is an error
    assert results == [{"instance": b64(r), "prediction": len(r)} for r in [*records, b"ok"]]
    assert [e["instance"] for e in errors] == [b64(b"x" * 1500)]
    assert all(e["error"]["code"] == 13 and "too long" in e["error"]["message"] for e in errors)


def test_a_truncated_tf_record_file_ends_with_an_error_line(strings_model, tmp_path):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(tmp_path / "a.tfrecord")) as writer:
        for record in (b"one", b"two"):
            writer.write(record)
    (tmp_path / "a.tfrecord").write_bytes((tmp_path / "a.tfrecord").read_bytes()[:-3])

    summary = batch_predict(strings_model, str(tmp_path / "a.tfrecord"), "tf-record", str(tmp_path / "out"), "s")
    results, errors = read_output(summary["output_directory"], "s", 1)
    assert results == [{"instance": b64(b"one"), "prediction": 3}]
    assert errors == [{"instance": "record 1", "error": {"code": 3, "message": "corrupted TFRecord: truncated record"}}]


def test_file_list_sends_each_file_as_b64(strings_model, tmp_path):
    paths = [tmp_path / f"{i}.bin" for i in range(3)]
    for i, path in enumerate(paths):
        path.write_bytes(b"z" * (i * 10 + 1))
    write_lines(tmp_path / "list.txt", [str(p) for p in paths] + ["", str(tmp_path / "missing.bin")])

    summary = batch_predict(strings_model, str(tmp_path / "list.txt"), "file-list", str(tmp_path / "out"), "s")
    results, errors = read_output(summary["output_directory"], "s", 1)
    assert results == [{"instance": str(p), "prediction": i * 10 + 1} for i, p in enumerate(paths)]
    assert errors[0]["instance"] == str(tmp_path / "missing.bin") and errors[0]["error"]["code"] == 3
    assert errors[0]["error"]["message"].startswith("cannot read")


def test_a_file_list_of_images_is_predicted_from_the_files_bytes(image_folder_model, tmp_path):
    """PNG paths from the image folder the model was trained on: the batch job calls the model's encoded-image
    signature (as Vertex, the files reach the model as {"b64": ...}), which decodes and prepares them as data prep
    did; a file that is not an image fails alone."""
    folder, data_dir, job = image_folder_model
    paths = sorted(str(p) for p in folder.rglob("*.png"))
    (tmp_path / "notes.png").write_text("not an image")
    listing = write_lines(tmp_path / "list.txt", paths[:20] + [str(tmp_path / "notes.png")] + paths[20:])
    summary = batch_predict(str(job / "model"), listing, "file-list", str(tmp_path / "out"), "pets", batch_size=8)
    assert summary["signature_name"] == "serving_image_bytes"
    results, errors = read_output(summary["output_directory"], "pets", 1)
    assert (summary["succeeded"], summary["failed"]) == (len(paths), 1)
    expected = prepared_class_ids(job / "model", data_dir)
    assert {r["instance"]: r["prediction"]["class_id"] for r in results} == {
        p: expected[str(Path(p).relative_to(folder))] for p in paths
    }
    [error] = errors
    assert error["instance"] == str(tmp_path / "notes.png") and error["error"]["code"] == 13
    assert "model execution failed" in error["error"]["message"]

    # serving_default by name: the bytes do not fit its pixel input (every instance is an error line)
    named = batch_predict(
        str(job / "model"), listing, "file-list", str(tmp_path / "named"), "pets", signature_name="serving_default"
    )
    assert (named["signature_name"], named["succeeded"]) == ("serving_default", 0)
    with pytest.raises(
        ValueError,
        match=r"no signature 'nope'; available: \['serving_default', "
        r"'serving_image_bytes'\]",
    ):
        batch_predict(str(job / "model"), listing, "file-list", str(tmp_path / "x"), "pets", signature_name="nope")


def test_signature_choice():
    from components.lib.batch.signatures import choose_signature

    image = {"serving_default": {"image": False}, "serving_image_bytes": {"image_bytes": True}}
    assert choose_signature(image, "", "file-list") == "serving_image_bytes"
    assert choose_signature(image, "", "tf-record") == "serving_image_bytes"
    assert choose_signature(image, "", "jsonl") == "serving_default"
    assert choose_signature(image, "serving_default", "file-list") == "serving_default"
    strings = {"serving_default": {"x_bytes": True}, "serving_image_bytes": {"image_bytes": True}}
    assert choose_signature(strings, "", "file-list") == "serving_default"  # it takes the bytes itself
    assert choose_signature({}, "", "file-list") == "serving_default"  # unknown signatures: the default
    assert choose_signature({}, "other", "jsonl") == "other"


def test_gcs_model_inputs_and_output(strings_model, gcs_emulator, tmp_path):
    for path in Path(strings_model).rglob("*"):
        if path.is_file():
            gcs_emulator.blob(f"models/s/{path.relative_to(strings_model)}").upload_from_filename(str(path))
    for name, values in (("part-1.jsonl", [b"ab", b"cde"]), ("part-2.jsonl", [b"f"])):
        gcs_emulator.blob(f"in/{name}").upload_from_string("".join(json.dumps(b64(v)) + "\n" for v in values))
    gcs_emulator.blob("in/other.txt").upload_from_string("not an input")

    summary = batch_predict(
        "gs://test-bucket/models/s", "gs://test-bucket/in/part-*.jsonl", "jsonl", "gs://test-bucket/out/", "s"
    )
    assert summary["files"] == ["gs://test-bucket/in/part-1.jsonl", "gs://test-bucket/in/part-2.jsonl"]
    assert re.fullmatch(r"gs://test-bucket/out/prediction-s-[\dT_]+Z", summary["output_directory"])
    folder = summary["output_directory"][len("gs://test-bucket/") :]
    blobs = {
        b.name[len(folder) + 1 :]: b.download_as_bytes()
        for b in gcs_emulator.client.list_blobs("test-bucket", prefix=folder + "/")
    }
    assert sorted(blobs) == [
        "prediction.errors_stats-00000-of-00002",
        "prediction.errors_stats-00001-of-00002",
        "prediction.results-00000-of-00002",
        "prediction.results-00001-of-00002",
    ]
    results = blobs["prediction.results-00000-of-00002"].splitlines()
    assert [json.loads(line)["prediction"] for line in results] == [2, 3]
    assert blobs["prediction.errors_stats-00001-of-00002"] == b""
    with pytest.raises(FileNotFoundError, match="no input files match"):
        batch_predict("gs://test-bucket/models/s", "gs://test-bucket/in/*.csv", "csv", "gs://test-bucket/o", "s")


def test_bad_arguments_are_rejected_before_any_output(strings_model, tmp_path):
    write_lines(tmp_path / "a.jsonl", ['"x"'])
    with pytest.raises(FileNotFoundError, match="no input files match"):
        batch_predict(strings_model, f"{tmp_path}/a.jsonl,{tmp_path}/nothing-*.jsonl", "jsonl", str(tmp_path), "s")
    with pytest.raises(ValueError, match="allowed: jsonl, csv, tf-record, tf-record-gzip, file-list$"):
        batch_predict(strings_model, str(tmp_path / "a.jsonl"), "parquet", str(tmp_path), "s")
    with pytest.raises(ValueError) as bigquery:
        batch_predict(strings_model, "bq://my-project.shop.rows", "bigquery", str(tmp_path), "s")
    assert str(bigquery.value) == (
        "instances_format bigquery: the batch predictor of targets local and kubeflow reads files, and there is no "
        "BigQuery here; run the batch prediction on target vertex, or export the table to files (jsonl, csv, "
        "tf-record, tf-record-gzip, file-list)"
    )
    with pytest.raises(ValueError, match="key_field applies to jsonl, csv and bigquery"):
        batch_predict(strings_model, str(tmp_path / "a.jsonl"), "tf-record", str(tmp_path), "s", key_field="id")
    assert [p.name for p in tmp_path.iterdir()] == ["a.jsonl"]


def test_model_resolution_and_kfp_step(strings_model, tmp_path):
    from kfp.dsl import Artifact

    from components.lib.deploy.model_repository import publish
    from components.run_batch_prediction import run_batch_prediction

    repo = str(tmp_path / "repo")
    with pytest.raises(FileNotFoundError, match="has no versions"):
        resolve_model(repo, "s", "")
    first, second = (publish(strings_model, repo, "s", {}) for _ in range(2))
    assert resolve_model(repo, "s", "") == second.path
    assert resolve_model(repo, "s", "1") == first.path
    assert resolve_model("", "s", "/models/x") == "/models/x"
    with pytest.raises(FileNotFoundError, match=r"no version 7 .* versions: \[1, 2\]"):
        resolve_model(repo, "s", "7")
    with pytest.raises(ValueError, match="no model repository"):
        resolve_model("", "s", "")

    write_lines(tmp_path / "a.jsonl", [json.dumps(b64(b"abc")), "[1]"])
    predictions = Artifact(uri=str(tmp_path / "predictions"))
    outputs = run_batch_prediction(
        repo, "s", "1", str(tmp_path / "a.jsonl"), "jsonl", 8, "", [], [], "", 0.5, "", predictions
    )
    assert (outputs.succeeded, outputs.failed) == (1, 1)
    assert outputs.output_directory.startswith(str(tmp_path / "predictions" / "prediction-s-"))
    assert predictions.metadata["model"] == first.path and predictions.metadata["instances"] == 2
    assert read_output(outputs.output_directory, "s", 1)[0] == [{"instance": b64(b"abc"), "prediction": 3}]


def test_a_run_with_more_failed_instances_than_its_budget_fails_the_step(tabular_model, tmp_path):
    """Every row fails (the label column is sent to a model that does not name its features): the step fails with
    the counts, after writing every errors line."""
    from kfp.dsl import Artifact

    from components.lib.batch.budget import BatchPredictionError
    from components.run_batch_prediction import run_batch_prediction

    write_lines(tmp_path / "a.csv", ["a,b,c,label", "1,2,3,x", "4,5,6,y", "7,8,9,z"])
    predictions = Artifact(uri=str(tmp_path / "predictions"))
    with pytest.raises(
        BatchPredictionError,
        match=r"^3 of 3 instances failed, 0 succeeded \(100\.0%\), above "
        r"max_error_fraction 10\.0% \(in .*/predictions/prediction-t-",
    ):
        run_batch_prediction(
            "", "t", tabular_model, str(tmp_path / "a.csv"), "csv", 8, "", [], [], "", 0.1, "", predictions
        )
    [output] = (tmp_path / "predictions").iterdir()
    assert len(read_output(output, "t", 1)[1]) == 3
    outputs = run_batch_prediction(
        "",
        "t",
        tabular_model,
        str(tmp_path / "a.csv"),
        "csv",
        8,
        "",
        [],
        ["label"],
        "",
        0.1,
        "",
        Artifact(uri=str(tmp_path / "p2")),
    )
    assert (outputs.succeeded, outputs.failed) == (3, 0)


def test_error_budget():
    assert check_error_budget(9, 1, 0.1) == "1 of 10 instances failed, 9 succeeded (10.0%; max_error_fraction 10.0%)"
    assert check_error_budget(0, 5, 1.0).startswith("5 of 5 instances failed")  # the user accepts any share
    with pytest.raises(
        BatchPredictionError,
        match=r"^1 of 10 instances failed, 9 succeeded \(10\.0%\), above "
        r"max_error_fraction 0\.0% \(job j\);",
    ):
        check_error_budget(9, 1, 0.0, " (job j)")
    with pytest.raises(BatchPredictionError, match="no instances were predicted: the input holds none"):
        check_error_budget(0, 0, 0.5)
    with pytest.raises(ValueError, match="max_error_fraction must be in"):
        check_error_budget(1, 0, 1.5)


def test_kfp_component_interface():
    from kfp import dsl

    from components.run_batch_prediction import run_batch_prediction

    spec = dsl.component(run_batch_prediction, base_image="python:3.11", install_kfp_package=False).component_spec
    assert {name: i.type for name, i in spec.inputs.items()} == {
        "model_repository": "String",
        "model_name": "String",
        "model": "String",
        "instances": "String",
        "instances_format": "String",
        "batch_size": "Integer",
        "key_field": "String",
        "included_fields": "List",
        "excluded_fields": "List",
        "instance_type": "String",
        "max_error_fraction": "Float",
        "signature_name": "String",
    }
    assert {name: o.type for name, o in spec.outputs.items()} == {
        "predictions": "system.Artifact@0.0.1",
        "output_directory": "String",
        "succeeded": "Integer",
        "failed": "Integer",
    }


@pytest.mark.parametrize(
    "options", [{}, {"key_field": "id"}, {"key_field": "id", "included_fields": "a,b,c", "instance_type": "array"}]
)
def test_jsonl_parsed_in_other_processes_writes_what_one_process_writes(tabular_model, tmp_path, options):
    """Chunks of lines parsed in worker processes and replayed in order: the same results lines in the same order,
    and the same errors lines, as parsing in the predicting process, across chunk boundaries (4 × 8 lines a chunk
    here), with the instance config applied in the workers. Only the interleaving of unreadable lines with
    instances that do not convert may differ in the errors file: a chunk converts its last partial batch at its
    end."""
    rng = np.random.default_rng(0)
    by_fields = "included_fields" in options

    def instance(key: str, row: list):
        if by_fields:
            return {"id": key, **dict(zip("abc", row))}
        return {"id": key, "features": row} if options else row

    lines = []
    for i in range(150):
        row = [round(float(v), 3) for v in rng.uniform(-1, 1, 3)]
        lines.append(json.dumps(instance(f"k{i}", row)))
        if i % 17 == 3:
            lines.append("{broken")
        if i % 23 == 5:
            lines.append(json.dumps({"id": f"w{i}", "features": [1, 2]} if options and not by_fields else [1, 2]))
        if i % 29 == 7:
            lines += ["", json.dumps({"features": row}) if options else '"text"']
    write_lines(tmp_path / "a.jsonl", lines)
    write_lines(tmp_path / "b.jsonl", lines[::-1])
    outputs = {}
    for processes in (0, 1, 2):
        summary = batch_predict(
            tabular_model,
            str(tmp_path / "*.jsonl"),
            "jsonl",
            str(tmp_path / f"out{processes}"),
            "tab",
            batch_size=4,
            parallelism=2,
            parse_processes=processes,
            **options,
        )
        directory = Path(summary["output_directory"])
        outputs[processes] = (
            {
                p.name: p.read_bytes() if "results" in p.name else sorted(p.read_bytes().splitlines())
                for p in directory.iterdir()
            },
            (summary["succeeded"], summary["failed"]),
        )
    assert outputs[0] == outputs[1] == outputs[2]
    files, (succeeded, failed) = outputs[0]
    assert succeeded == 300 and failed > 20
    assert sum(len(c.splitlines()) if isinstance(c, bytes) else len(c) for c in files.values()) == succeeded + failed


def test_bigquery_rows_are_arrays_of_the_models_feature_columns_unless_sent_as_objects():
    """Vertex sends a BigQuery row as an array in the table's column order: the job names the model's feature
    columns, as for CSV rows; as objects, the row's columns go by name."""
    features = ["a", "b"]
    assert instance_config("bigquery", key_field="id", feature_names=features) == InstanceConfig(
        "", "id", ("a", "b"), (), True
    )
    assert instance_config("bigquery", instance_type="object", feature_names=features) == InstanceConfig("object")
