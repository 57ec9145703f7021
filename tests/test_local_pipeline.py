"""The whole pipeline through kfp.local, as `make run` runs it (slow)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_images

pytestmark = pytest.mark.e2e


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipelines", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def test_full_local_run_blessed_then_impossible_threshold_skips_downstream(tmp_path):
    repo = tmp_path / "repo"
    first = run_cli("run", "--out", str(tmp_path / "run1"), "--model-repository", str(repo))
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((tmp_path / "run1" / "run_summary.json").read_text())
    assert summary["status"] == "SUCCEEDED" and summary["pipeline"] == "tfpipe-training"
    assert [(s["name"], s["status"]) for s in summary["steps"]] == [
        ("prepare-data", "SUCCEEDED"), ("tune-hyperparameters", "SUCCEEDED"), ("train-model", "SUCCEEDED"),
        ("evaluate-model", "SUCCEEDED"), ("publish-model", "SUCCEEDED"), ("quantize-model", "SUCCEEDED")]
    assert all(s["seconds"] > 0 for s in summary["steps"])
    assert summary["metrics"]["test_accuracy"] >= 0.95
    assert summary["gate"]["blessed"] and summary["gate"]["champion"] is None
    assert summary["training"]["num_workers"] == 2 and summary["training"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert summary["dataset"]["examples"] == 1797
    assert summary["model"]["published_version"] == 1
    metadata = json.loads((repo / "tfpipe-model" / "1" / "assets.extra" / "model_metadata.json").read_text())
    assert metadata["metrics"]["test_accuracy"] == summary["metrics"]["test_accuracy"]
    assert metadata["pipeline_run_id"] and metadata["data"]["source"] == "builtin:digits"
    for name in ("report.html", "training_curves.png", "confusion_matrix.png"):
        assert (tmp_path / "run1" / name).stat().st_size > 1000
    assert "▶ train-model" in first.stdout and "gate: BLESSED" in first.stdout
    tuning = summary["tuning"]
    assert tuning["enabled"] and len(tuning["trials"]) == 4 and tuning["best"]["status"] == "SUCCEEDED"
    assert summary["training"]["hyperparameters"]["learning_rate"] == tuning["best"]["parameters"]["learning_rate"]
    assert summary["training"]["hyperparameters"]["hidden_units"] == tuning["best"]["parameters"]["hidden_units"]
    tflite = summary["tflite"]
    assert tflite["published"] and tflite["publish_mode"] == "dynamic"
    assert [m["mode"] for m in tflite["modes"]] == ["float32", "dynamic", "float16", "int8"]
    assert "TFLite" in (tmp_path / "run1" / "report.html").read_text()
    run_root = summary["artifacts"]
    assert (Path(run_root) / "quantize-model" / "tflite_model" / "model.tflite").stat().st_size > 1000
    assert "| dynamic |" in (Path(run_root) / "quantize-model" / "table").read_text()

    second = run_cli("run", "--out", str(tmp_path / "run2"), "--model-repository", str(repo),
                     "--accuracy-threshold", "1.0", "--epochs", "2", "--no-tune")
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((tmp_path / "run2" / "run_summary.json").read_text())
    assert summary["status"] == "SUCCEEDED"
    assert not summary["gate"]["blessed"] and "below the threshold 1.0000" in summary["gate"]["reason"]
    assert summary["gate"]["champion"]["version"] == 1
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["publish-model"] == statuses["quantize-model"] == "SKIPPED"
    assert summary["tflite"] is None
    assert summary["tuning"] == {**summary["tuning"], "enabled": False, "trials": []}
    assert summary["training"]["hyperparameters"]["learning_rate"] == 0.003  # the pipeline's value
    assert sorted(p.name for p in (repo / "tfpipe-model").iterdir()) == ["1"]
    assert "NOT BLESSED" in second.stdout


def test_failing_step_is_one_clear_line(tmp_path):
    write_images(tmp_path / "one", classes=("only",), per_class=4)
    result = run_cli("run", "--out", str(tmp_path / "run"), "--data-source", str(tmp_path / "one"),
                     "--model-repository", str(tmp_path / "repo"))
    assert result.returncode == 1
    assert "Error: prepare-data: need at least two classes, found 1: ['only']" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["status"] == "FAILED"
    assert [s["status"] for s in summary["steps"]] == ["FAILED"] + ["SKIPPED"] * 5
    assert "need at least two classes" in (tmp_path / "run" / "logs" / "prepare-data.log").read_text()
