"""The evaluation gate (components/evaluate_model.py) and the champion look-ups it compares with
(components/find_repository_champion.py, components/find_registry_champion.py): model repository locally, Model
Registry alias on Vertex AI (GAPIC stubs, champion SavedModel on the GCS emulator)."""

import json
import shutil
import threading
from types import SimpleNamespace

import pytest
import tensorflow as tf
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.model_service.transports.grpc import ModelServiceGrpcTransport
from google.cloud.aiplatform_v1.types import model as model_pb, model_service

from components.evaluate_model import decide, evaluate, same_artifacts
from components.find_registry_champion import find_registry_champion
from components.find_repository_champion import find_repository_champion
from components.lib.deploy import model_repository
from components.lib.evaluation import ModelError, evaluate_saved_model
from tests.doubles.gapic import FakeStub

PARENT = "projects/my-project/locations/europe-west4"
REGISTRY_MODEL = f"{PARENT}/models/111"


def save_untrained(stats_dir, path, labels=None):
    """A model of the trainer's architecture for `stats_dir`'s data, never trained (about chance accuracy), with
    the trainer's serving signatures and labels file."""
    import tensorflow as tf

    from trainer import data, model as models

    stats = data.load_stats(str(stats_dir))
    models.keras.utils.set_random_seed(0)
    model = models.build_model(stats, filters=4, hidden_units=8, dropout=0.0)
    model.save(str(path), save_format="tf", signatures=models.serving_signatures(model, stats))
    tf.io.gfile.makedirs(f"{path}/assets.extra")
    (path / "assets.extra" / "labels.txt").write_text("\n".join(labels or stats["labels"]) + "\n")
    return path


@pytest.fixture(scope="module")
def weak_model(digits_data, tmp_path_factory):
    return save_untrained(digits_data, tmp_path_factory.mktemp("weak") / "model")


@pytest.fixture(scope="module")
def tabular_model(tmp_path_factory):
    from components.prepare_data import prepare

    iris = tmp_path_factory.mktemp("iris") / "data"
    prepare("builtin:iris", str(iris), num_workers=1)
    # the digits labels: the serving input is the only difference from the digits models
    return save_untrained(iris, tmp_path_factory.mktemp("iris-model") / "model", [str(i) for i in range(10)])


def test_decide_threshold_and_champion():
    assert decide(0.97, 0.95, None, 0.01) == (True, "test accuracy 0.9700 clears the threshold 0.9500; no champion yet")
    blessed, reason = decide(0.90, 0.95, None, 0.01)
    assert not blessed and "below the threshold 0.9500" in reason
    blessed, reason = decide(0.96, 0.95, 0.98, 0.01, "champion v3")
    assert not blessed and "worse than champion v3's 0.9800 minus the tolerance 0.0100" in reason
    assert decide(0.975, 0.95, 0.98, 0.01)[0]


def test_evaluate_reports_metrics_and_confusion_matrix(trained_model, digits_data):
    report = evaluate_saved_model(str(trained_model / "model"), str(digits_data))
    stats = json.loads((digits_data / "stats.json").read_text())
    assert report.examples == stats["splits"]["test"]["examples"]
    matrix = report.confusion_matrix
    assert len(matrix) == 10 and sum(map(sum, matrix)) == report.examples
    assert report.accuracy == pytest.approx(sum(matrix[i][i] for i in range(10)) / report.examples)
    assert report.accuracy > 0.8 and report.loss > 0


def test_gate_against_the_repository_champion(trained_model, weak_model, digits_data, tmp_path):
    repo, good, weak = str(tmp_path / "repo"), str(trained_model / "model"), str(weak_model)
    assert find_repository_champion(repo, "digits") == ("", "", "")
    first = evaluate(good, str(digits_data), 0.5, model_uri=good)
    assert first["blessed"] and first["champion"] is None and "no champion yet" in first["reason"]
    model_repository.publish(good, repo, "digits", {"source_model_uri": "gs://bucket/run-1/model"})
    champion = find_repository_champion(repo, "digits")
    assert champion == (f"{repo}/digits/1", "champion v1", "gs://bucket/run-1/model")
    # a worse candidate is rejected, naming the champion and both accuracies
    worse = evaluate(weak, str(digits_data), 0.0, *champion[:2], 0.01, "gs://bucket/run-2/model", champion[2])
    assert not worse["blessed"]
    assert worse["reason"] == (
        f"test accuracy {worse['accuracy']:.4f} is worse than champion v1's "
        f"{first['accuracy']:.4f} minus the tolerance 0.0100"
    )
    assert worse["champion"] == {
        "name": "champion v1",
        "path": f"{repo}/digits/1",
        "accuracy": first["accuracy"],
        "source": "re-evaluated on this test split",
    }
    # an equal one clears it (re-evaluated with the same code: the same number)
    again = evaluate(good, str(digits_data), 0.5, *champion[:2], 0.0, "gs://bucket/run-3/model", champion[2])
    assert again["blessed"] and again["champion"]["accuracy"] == pytest.approx(first["accuracy"])
    # the champion itself, from a cached training on unchanged data: nothing new to publish
    cached = evaluate(good, str(digits_data), 0.5, *champion[:2], 0.0, "/gcs/bucket/run-1/model/", champion[2])
    assert not cached["blessed"] and "the candidate is champion v1 itself" in cached["reason"]
    assert find_repository_champion(repo, "other-name") == ("", "", "")  # champions are per model name


def test_a_champion_with_other_labels_or_inputs_stops_the_gate(trained_model, tabular_model, digits_data, tmp_path):
    relabelled = tmp_path / "relabelled"
    shutil.copytree(trained_model / "model", relabelled)
    (relabelled / "assets.extra" / "labels.txt").write_text("\n".join(f"c{i}" for i in range(10)) + "\n")
    good = str(trained_model / "model")
    with pytest.raises(ModelError) as error:
        evaluate(good, str(digits_data), 0.5, str(relabelled), "champion v4")
    digits = [str(i) for i in range(10)]
    assert str(error.value) == (
        f"champion v4 is a different model: it has labels {[f'c{i}' for i in range(10)]} (this model: {digits}). "
        "Publishing this model as its next version would change what its clients get: use another model name for "
        "this data (the model_name parameter; on Vertex AI platform.model_display_name)"
    )
    with pytest.raises(
        ModelError,
        match=r"champion v2 is a different model: it has serving input "
        r"\{'features': 'float32\[None, 4\]'\} \(this model: \{'image': 'float32\[None, None, "
        r"None, 1\]'\}\)",
    ):
        evaluate(good, str(digits_data), 0.5, str(tabular_model), "champion v2")
    # a candidate without a signature the champion's clients may call (the encoded-image one)
    pixels_only = tmp_path / "pixels-only"
    loaded = tf.saved_model.load(good)
    tf.saved_model.save(loaded, str(pixels_only), signatures={"serving_default": loaded.signatures["serving_default"]})
    shutil.copytree(trained_model / "model" / "assets.extra", pixels_only / "assets.extra")
    with pytest.raises(
        ModelError,
        match=r"champion v5 is a different model: it has signature 'serving_image_bytes' "
        r"with input \{'image_bytes': 'string\[None\]'\} \(this model: no such signature\)",
    ):
        evaluate(str(pixels_only), str(digits_data), 0.5, good, "champion v5")
    assert evaluate(good, str(digits_data), 0.5, str(pixels_only), "champion v6")["champion"]  # a superset: fine


def test_missing_model_and_bad_parameters(trained_model, digits_data, tmp_path):
    with pytest.raises(ModelError, match="no SavedModel at .*saved_model.pb missing"):
        evaluate(str(tmp_path / "nothing"), str(digits_data), 0.5)
    with pytest.raises(ModelError, match="accuracy_threshold must be in"):
        evaluate(str(tmp_path), str(digits_data), 1.5)
    with pytest.raises(ModelError, match="no SavedModel at .*missing-champion"):
        evaluate(str(trained_model / "model"), str(digits_data), 0.5, str(tmp_path / "missing-champion"))


def same_checks(saved, expected) -> None:
    """Smoke checks equal signature by signature: the examples' dtype and values (byte strings exactly), the class
    ids."""
    assert [c.signature for c in saved] == [c.signature for c in expected]
    for got, want in zip(saved, expected, strict=True):
        assert got.examples.dtype == want.examples.dtype and got.examples.shape == want.examples.shape
        assert got.examples.tolist() == want.examples.tolist(), got.signature
        assert got.class_ids.tolist() == want.class_ids.tolist(), got.signature


def test_the_gate_step_saves_the_candidates_smoke_checks_for_the_vertex_deploys_check(
    trained_model, digits_data, tmp_path
):
    """The KFP step writes the candidate's smoke checks as JSON: the test split's first 8 examples as float32
    arrays and PNG-encoded, with the class ids `reference_checks` computes from the SavedModel."""
    import numpy as np
    from kfp import dsl

    from components.evaluate_model import evaluate_model
    from components.lib.deploy.smoke import read_checks, reference_checks
    from tests.helpers.model_answers import model_outputs, split_examples

    def artifact(kind, path):
        made = kind(uri=str(path))
        made.path = str(path)
        return made

    model_dir = str(trained_model / "model")
    smoke = artifact(dsl.Artifact, tmp_path / "smoke_checks")
    blessed = evaluate_model(
        artifact(dsl.Model, model_dir),
        artifact(dsl.Dataset, digits_data),
        0.5,
        0.01,
        "",
        "",
        "",
        dsl.Metrics(),
        dsl.ClassificationMetrics(),
        artifact(dsl.Artifact, tmp_path / "evaluation"),
        smoke,
    )
    assert blessed
    saved = read_checks(smoke.path)
    same_checks(saved, reference_checks(model_dir, str(digits_data)))
    pixels = split_examples(str(digits_data), 8)
    assert [c.signature for c in saved] == ["serving_default", "serving_image_bytes"]
    assert saved[0].examples.dtype == np.float32 and saved[0].examples.tolist() == pixels.tolist()
    assert saved[0].class_ids.tolist() == model_outputs(model_dir, pixels)["class_id"].tolist()
    decoded = [tf.io.decode_png(png).numpy() for png in saved[1].examples]  # the same pixels, losslessly
    assert np.array_equal(np.array(decoded), pixels.astype(np.uint8))
    record = json.loads((tmp_path / "smoke_checks").read_text())["checks"]
    assert [sorted(c) for c in record] == [["class_ids", "examples", "signature"]] * 2
    assert record[0]["examples"]["dtype"] == "<f4" and record[0]["examples"]["shape"] == [8, 8, 8, 1]
    assert record[1]["examples"]["dtype"] == "bytes" and len(record[1]["examples"]["base64"]) == 8


def test_the_gate_saves_an_rgb_image_models_smoke_checks(image_folder_model, tmp_path):
    """A CNN on an image folder: the PNG bytes read back exactly as encoded, the class ids the SavedModel's."""
    from components.lib.deploy.smoke import read_checks, reference_checks

    _, data_dir, job = image_folder_model
    model_dir, path = str(job / "model"), str(tmp_path / "smoke_checks")
    evaluate(model_dir, str(data_dir), 0.0, smoke_checks=path)
    saved, expected = read_checks(path), reference_checks(model_dir, str(data_dir))
    same_checks(saved, expected)
    assert [c.signature for c in saved] == ["serving_default", "serving_image_bytes"]
    assert saved[0].examples.shape[1:] == (12, 12, 3)
    assert [png[:8] for png in saved[1].examples] == [b"\x89PNG\r\n\x1a\n"] * len(saved[1].examples)


def test_a_candidate_without_class_ids_fails_the_gate_that_saves_smoke_checks(digits_data, tmp_path):
    """The deploy's check compares class ids: a `serving_default` without them fails the gate saving the checks."""
    from components.lib.deploy.smoke import SmokeFailed

    class Uniform(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="image")])
        def serve(self, image):
            return {"probabilities": tf.fill([tf.shape(image)[0], 10], 0.1)}

    model = Uniform()
    tf.saved_model.save(model, str(tmp_path / "model"), signatures={"serving_default": model.serve})
    assert evaluate(str(tmp_path / "model"), str(digits_data), 0.0)["blessed"]
    with pytest.raises(
        SmokeFailed, match=r"^the model's serving_default has no class_id output \(\['probabilities'\]\)$"
    ):
        evaluate(str(tmp_path / "model"), str(digits_data), 0.0, smoke_checks=str(tmp_path / "smoke_checks"))


def test_same_artifacts():
    assert same_artifacts("gs://b/run/model", "/gcs/b/run/model/")
    assert not same_artifacts("gs://b/run/model", "gs://b/run2/model")
    assert not same_artifacts("", "")


@pytest.fixture
def registry(monkeypatch):
    """ModelService's ListModels / GetModel: one registry model whose `champion` alias is on version 3 (artifacts on
    the emulator), or no model at all (`registry.models = []`)."""
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "other-project"))
    state = SimpleNamespace(
        models=[REGISTRY_MODEL],
        aliases={"champion": "3"},
        artifact_uri="gs://test-bucket/runs/run-1/custom-training-job/model",
    )

    def list_models(request):
        return model_service.ListModelsResponse(
            models=[model_pb.Model(name=n, display_name="digits") for n in state.models]
        )

    def get_model(request):
        from google.api_core.exceptions import NotFound

        name, _, version = request.name.partition("@")
        if version not in state.aliases:
            raise NotFound(f"model {request.name} not found")
        return model_pb.Model(
            name=name,
            version_id=state.aliases[version],
            artifact_uri=state.artifact_uri,
            version_aliases=[version, "default"],
        )

    state.list = FakeStub(list_models).bind(ModelServiceGrpcTransport, "list_models", monkeypatch)
    state.get = FakeStub(get_model).bind(ModelServiceGrpcTransport, "get_model", monkeypatch)
    return state


def upload_folder(bucket, local, prefix):
    for path in local.rglob("*"):
        if path.is_file():
            bucket.blob(f"{prefix}/{path.relative_to(local)}").upload_from_filename(str(path))


def test_vertex_gate_against_the_registry_champion(registry, trained_model, weak_model, digits_data, gcs_emulator):
    """The champion is the version holding the alias, re-evaluated from its artifact_uri on this test split: a
    worse candidate is rejected, a better one blessed."""
    upload_folder(gcs_emulator, weak_model, "runs/run-1/custom-training-job/model")
    champion = find_registry_champion("digits", "champion", "my-project", "europe-west4")
    assert champion == (
        "gs://test-bucket/runs/run-1/custom-training-job/model",
        f"champion {REGISTRY_MODEL}@3",
        "gs://test-bucket/runs/run-1/custom-training-job/model",
    )
    assert [(c[0], c[1]) for c in registry.list.calls] == [
        (
            "ListModelsRequest",
            model_service.ListModelsRequest(parent=PARENT, filter='display_name="digits"', order_by="create_time"),
        )
    ]
    assert [(c[0], c[1].name, c[2]) for c in registry.get.calls] == [
        ("GetModelRequest", f"{REGISTRY_MODEL}@champion", "europe-west4-aiplatform.googleapis.com:443")
    ]
    weak_accuracy = evaluate_saved_model(str(weak_model), str(digits_data)).accuracy
    better = evaluate(
        str(trained_model / "model"),
        str(digits_data),
        0.5,
        *champion[:2],
        0.01,
        "gs://test-bucket/runs/run-2/custom-training-job/model",
        champion[2],
    )
    assert better["blessed"] and better["champion"]["accuracy"] == pytest.approx(weak_accuracy)
    assert f"champion {REGISTRY_MODEL}@3's {weak_accuracy:.4f}" in better["reason"]
    # the better model becomes the champion; the weak one comes back as a candidate and is rejected
    upload_folder(gcs_emulator, trained_model / "model", "runs/run-2/custom-training-job/model")
    registry.aliases["champion"], registry.artifact_uri = "4", "gs://test-bucket/runs/run-2/custom-training-job/model"
    champion = find_registry_champion("digits", "champion", "my-project", "europe-west4")
    worse = evaluate(
        str(weak_model),
        str(digits_data),
        0.0,
        *champion[:2],
        0.01,
        "gs://test-bucket/runs/run-3/custom-training-job/model",
        champion[2],
    )
    assert not worse["blessed"]
    assert worse["reason"].startswith(
        f"test accuracy {worse['accuracy']:.4f} is worse than champion {REGISTRY_MODEL}@4's {better['accuracy']:.4f}"
    )


def test_vertex_no_champion_without_the_model_or_the_alias(registry):
    registry.aliases = {}
    assert find_registry_champion("digits", "champion", "my-project", "europe-west4") == ("", "", "")
    registry.models = []
    assert find_registry_champion("digits", "champion", "my-project", "europe-west4") == ("", "", "")
    assert len(registry.get.calls) == 1  # no model: no version look-up


def test_repository_versions_increase_and_never_overwrite(trained_model, tmp_path):
    repo = str(tmp_path / "repo")
    model = str(trained_model / "model")
    versions = []
    threads = [
        threading.Thread(target=lambda: versions.append(model_repository.publish(model, repo, "m", {})))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(v.number for v in versions) == [1, 2, 3, 4]
    assert model_repository.versions(repo, "m") == [1, 2, 3, 4]
    champ = model_repository.champion(repo, "m")
    assert champ.number == 4 and champ.metadata["version"] == 4
    assert not [p for p in (tmp_path / "repo" / "m").iterdir() if p.name.startswith(".tmp")]
    with pytest.raises(FileNotFoundError, match="no saved_model.pb"):
        model_repository.publish(str(tmp_path), repo, "m", {})
    assert model_repository.champion("", "m") is None
    with pytest.raises(ValueError, match="no model repository configured"):
        model_repository.publish(model, "", "m", {})
