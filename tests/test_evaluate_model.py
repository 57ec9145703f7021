import json
import threading

import pytest

from components import model_repository
from components.evaluate_model import ModelError, decide, evaluate, evaluate_saved_model


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
    assert report["examples"] == stats["splits"]["test"]["examples"]
    matrix = report["confusion_matrix"]
    assert len(matrix) == 10 and sum(map(sum, matrix)) == report["examples"]
    assert report["accuracy"] == pytest.approx(sum(matrix[i][i] for i in range(10)) / report["examples"])
    assert report["accuracy"] > 0.8 and report["loss"] > 0


def test_gate_compares_with_champion_from_repository(trained_model, digits_data, tmp_path):
    repo = str(tmp_path / "repo")
    first = evaluate(str(trained_model / "model"), str(digits_data), 0.5, repo, "digits")
    assert first["blessed"] and first["champion"] is None
    model_repository.publish(str(trained_model / "model"), repo, "digits",
                             {"metrics": {"test_accuracy": first["accuracy"]}})
    second = evaluate(str(trained_model / "model"), str(digits_data), 0.5, repo, "digits", champion_tolerance=0.0)
    assert second["blessed"] and second["champion"]["version"] == 1
    assert second["champion"]["accuracy"] == pytest.approx(first["accuracy"])
    assert second["champion"]["source"] == "re-evaluated on this test split"
    worse = evaluate(str(trained_model / "model"), str(digits_data), 0.5, repo, "other-name")
    assert worse["champion"] is None  # champions are per model name


def test_gate_re_evaluates_a_champion_in_a_gcs_repository(trained_model, digits_data, gcs_emulator):
    model_repository.publish(str(trained_model / "model"), "gs://test-bucket/repo", "digits",
                             {"metrics": {"test_accuracy": 0.1}})
    report = evaluate(str(trained_model / "model"), str(digits_data), 0.5, "gs://test-bucket/repo", "digits")
    assert report["champion"]["path"] == "gs://test-bucket/repo/digits/1"
    assert report["champion"]["source"] == "re-evaluated on this test split"
    assert report["champion"]["accuracy"] == pytest.approx(report["accuracy"])


def test_missing_model_and_bad_parameters(digits_data, tmp_path):
    with pytest.raises(ModelError, match="no SavedModel at .*saved_model.pb missing"):
        evaluate(str(tmp_path / "nothing"), str(digits_data), 0.5)
    with pytest.raises(ModelError, match="accuracy_threshold must be in"):
        evaluate(str(tmp_path), str(digits_data), 1.5)


def test_repository_versions_increase_and_never_overwrite(trained_model, tmp_path):
    repo = str(tmp_path / "repo")
    model = str(trained_model / "model")
    versions = []
    threads = [threading.Thread(target=lambda: versions.append(model_repository.publish(model, repo, "m", {})))
               for _ in range(4)]
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
