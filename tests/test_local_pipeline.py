"""The whole pipeline through kfp.local, as `make run` runs it (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from serving.client import PredictionError, ServingClient
from tests.conftest import write_images, write_shapes

pytestmark = pytest.mark.e2e


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *args], capture_output=True, text=True, cwd=cwd, timeout=900
    )


@pytest.fixture
def serving_state(tmp_path, monkeypatch):
    """Isolated local-server records; stops any server a run left behind."""
    monkeypatch.setenv("TFPIPE_SERVING_STATE", str(tmp_path / "serving"))
    yield
    from serving.lifecycle import stop_server

    stop_server(str(tmp_path / "repo"))  # the whole server, every model a test published


def test_full_local_run_blessed_then_impossible_threshold_skips_downstream(tmp_path, serving_state):
    repo = tmp_path / "repo"
    first = run_cli(
        "run", "--out", str(tmp_path / "run1"), "--model-repository", str(repo), "--rest-port", "0", "--grpc-port", "0"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((tmp_path / "run1" / "run_summary.json").read_text())
    assert summary["status"] == "SUCCEEDED" and summary["pipeline"] == "tfpipe-training"
    assert [(s["name"], s["status"]) for s in summary["steps"]] == [
        ("find-repository-champion", "SUCCEEDED"),
        ("fingerprint-data", "SUCCEEDED"),
        ("prepare-data", "SUCCEEDED"),
        ("check-champion", "SUCCEEDED"),
        ("tune-hyperparameters", "SUCCEEDED"),
        ("train-model", "SUCCEEDED"),
        ("evaluate-model", "SUCCEEDED"),
        ("publish-model", "SUCCEEDED"),
        ("quantize-model", "SUCCEEDED"),
        ("deploy-model", "SUCCEEDED"),
    ]
    assert summary["registry"] == {
        "model_name": "tfpipe-model",
        "version": 1,
        "repository": str(repo),
        "path": str(repo / "tfpipe-model" / "1"),
    }
    endpoint = summary["endpoint"]
    assert endpoint["served_version"] == 1 and endpoint["started_by_this_run"]
    assert endpoint["stop"] == f"python -m pipelines stop-serving --model-base-path {repo} --model-name tfpipe-model"
    assert endpoint["stop"] in first.stdout
    client = ServingClient(endpoint["rest_url"], endpoint["grpc_target"], "tfpipe-model")
    images = np.zeros((2, 8, 8, 1), np.float32)
    rest, grpc_out = client.predict(images), client.predict(images, protocol="grpc")
    np.testing.assert_array_equal(rest["class_id"], grpc_out["class_id"])
    assert rest["probabilities"].shape == (2, 10)
    assert all(s["seconds"] > 0 for s in summary["steps"])
    peaks = {s["name"]: s["peak_memory_bytes"] for s in summary["steps"]}
    assert all(peaks.values()), peaks  # every step measured, the 0.1 s ones too
    assert peaks["train-model"] > peaks["prepare-data"]  # two TensorFlow workers against no TensorFlow
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

    second = run_cli(
        "run",
        "--out",
        str(tmp_path / "run2"),
        "--model-repository",
        str(repo),
        "--accuracy-threshold",
        "1.0",
        "--epochs",
        "2",
        "--no-tune",
    )
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((tmp_path / "run2" / "run_summary.json").read_text())
    assert summary["status"] == "SUCCEEDED"
    assert not summary["gate"]["blessed"] and "below the threshold 1.0000" in summary["gate"]["reason"]
    assert summary["gate"]["champion"]["name"] == "champion v1"
    assert summary["gate"]["champion"]["path"] == str(repo / "tfpipe-model" / "1")
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["publish-model"] == statuses["quantize-model"] == "SKIPPED"
    assert summary["tflite"] is None
    assert summary["tuning"] == {**summary["tuning"], "enabled": False, "trials": []}
    assert summary["training"]["hyperparameters"]["learning_rate"] == 0.003  # the pipeline's value
    assert statuses["deploy-model"] == "SKIPPED" and summary["endpoint"] is None
    assert sorted(p.name for p in (repo / "tfpipe-model").iterdir() if p.name.isdigit()) == ["1"]
    assert "NOT BLESSED" in second.stdout
    assert client.status()[0] == {
        "version": "1",
        "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }

    instances = tmp_path / "instances.jsonl"
    instances.write_text(
        "".join(json.dumps(np.full((8, 8, 1), i, np.float32).tolist()) + "\n" for i in range(5))
        + "not json\n"
        + json.dumps([[1.0]])
        + "\n"
    )
    third = run_cli(
        "run",
        "--pipeline",
        "batch_prediction",
        "--instances",
        str(instances),
        "--out",
        str(tmp_path / "run3"),
        "--model-repository",
        str(repo),
        "--max-error-fraction",
        "0.5",
    )
    assert third.returncode == 0, third.stdout + third.stderr
    batch = json.loads((tmp_path / "run3" / "run_summary.json").read_text())["batch_prediction"]
    assert (batch["instances"], batch["succeeded"], batch["failed"]) == (7, 5, 2)
    assert batch["model"] == str(repo / "tfpipe-model" / "1")
    output = Path(batch["output_directory"])
    results = (output / "prediction.results-00000-of-00001").read_text().splitlines()
    errors = (output / "prediction.errors_stats-00000-of-00001").read_text().splitlines()
    assert len(results) == 5 and len(errors) == 2
    assert "5 ok, 2 failed of 7 instances" in third.stdout

    stop = run_cli("stop-serving", "--model-base-path", str(repo), "--model-name", "tfpipe-model")
    assert stop.returncode == 0, stop.stderr
    with pytest.raises(PredictionError, match="cannot reach"):
        client.status()


def test_a_users_small_csv_with_three_workers_then_batch_predictions_on_the_same_csv(tmp_path):
    """The wine data as a user's CSV (178 rows, a `label` column, one bad value): trained with 3 workers (each holds
    less than one global batch), then the same file, label column included, predicted with the published model."""
    from tests.test_train_model import wine_csv

    data, repo = wine_csv(tmp_path / "wine.csv"), tmp_path / "repo"
    trained = run_cli(
        "run",
        "--data-source",
        str(data),
        "--workers",
        "3",
        "--no-tune",
        "--no-deploy",
        "--accuracy-threshold",
        "0.5",
        "--model-repository",
        str(repo),
        "--model-name",
        "wine",
        "--out",
        str(tmp_path / "run1"),
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    summary = json.loads((tmp_path / "run1" / "run_summary.json").read_text())
    assert summary["training"]["num_workers"] == 3 and summary["training"]["attempts"] == 1
    assert summary["dataset"]["quarantined"] == 1 and summary["metrics"]["test_accuracy"] > 0.8
    assert summary["registry"]["version"] == 1

    batch = run_cli(
        "run",
        "--pipeline",
        "batch_prediction",
        "--instances",
        str(data),
        "--instances-format",
        "csv",
        "--model-repository",
        str(repo),
        "--model-name",
        "wine",
        "--out",
        str(tmp_path / "run2"),
    )
    assert batch.returncode == 0, batch.stdout + batch.stderr
    assert "batch prediction: 177 ok, 1 failed of 178 instances" in batch.stdout  # the bad value

    other = run_cli(  # another data set under the champion's name: stopped right after data prep
        "run",
        "--data-source",
        "builtin:iris",
        "--model-repository",
        str(repo),
        "--model-name",
        "wine",
        "--out",
        str(tmp_path / "run3"),
    )
    assert other.returncode == 1
    assert (
        "Error: check-champion: champion v1 is a different model: it has labels ['0', '1', '2'] (this data: "
        "['setosa', 'versicolor', 'virginica']) and feature columns "
    ) in (other.stdout + other.stderr)
    statuses = {
        s["name"]: s["status"] for s in json.loads((tmp_path / "run3" / "run_summary.json").read_text())["steps"]
    }
    assert statuses["prepare-data"] == "SUCCEEDED" and statuses["check-champion"] == "FAILED"
    assert statuses.get("tune-hyperparameters") != "SUCCEEDED" and statuses.get("train-model") != "SUCCEEDED"


def test_batch_prediction_on_a_users_csv_and_an_all_failing_run(tmp_path, iris_model):
    """`run --pipeline batch_prediction` on a CSV shaped like the training CSV (label column, another column order)
    predicts every row; a run whose instances all fail fails, with the counts."""
    from tests.test_run_batch_prediction import IRIS_FEATURES, iris_csv

    path, _ = iris_csv(tmp_path / "iris.csv", ["label", *reversed(IRIS_FEATURES)])
    ok = run_cli(
        "run",
        "--pipeline",
        "batch_prediction",
        "--instances",
        path,
        "--instances-format",
        "csv",
        "--model",
        str(iris_model / "model"),
        "--model-name",
        "iris",
        "--out",
        str(tmp_path / "run1"),
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "batch prediction: 150 ok, 0 failed of 150 instances" in ok.stdout
    log = (tmp_path / "run1" / "logs" / "run-batch-prediction.log").read_text()
    assert f"instances from columns {IRIS_FEATURES}; not sent: ['label']" in log

    (tmp_path / "words.jsonl").write_text('"a"\n"b"\n"c"\n')
    failed = run_cli(
        "run",
        "--pipeline",
        "batch_prediction",
        "--instances",
        str(tmp_path / "words.jsonl"),
        "--model",
        str(iris_model / "model"),
        "--model-name",
        "iris",
        "--out",
        str(tmp_path / "run2"),
    )
    assert failed.returncode == 1
    assert (
        "Error: run-batch-prediction: 3 of 3 instances failed, 0 succeeded (100.0%), above max_error_fraction "
        "10.0% (in "
    ) in failed.stderr
    assert json.loads((tmp_path / "run2" / "run_summary.json").read_text())["status"] == "FAILED"


def test_failing_step_is_one_clear_line(tmp_path):
    write_images(tmp_path / "one", classes=("only",), per_class=4)
    result = run_cli(
        "run",
        "--out",
        str(tmp_path / "run"),
        "--data-source",
        str(tmp_path / "one"),
        "--model-repository",
        str(tmp_path / "repo"),
    )
    assert result.returncode == 1
    assert "Error: prepare-data: need at least two classes, found 1: ['only']" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["status"] == "FAILED"
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["fingerprint-data"] == "SUCCEEDED" and statuses["prepare-data"] == "FAILED"
    assert {name for name, status in statuses.items() if status == "SKIPPED"} >= {
        "tune-hyperparameters",
        "train-model",
        "evaluate-model",
        "publish-model",
        "quantize-model",
        "deploy-model",
    }
    assert "need at least two classes" in (tmp_path / "run" / "logs" / "prepare-data.log").read_text()


def test_runs_in_a_row_reuse_the_live_server_and_survive_a_killed_one(tmp_path, serving_state):
    """Run after run on one repository: the second run deploys on the server the first left up, the third starts
    a new one after that server was killed; each ends with the summary and exit code 0."""
    import os
    import signal
    import time

    repo = tmp_path / "repo"
    common = [
        "--model-repository",
        str(repo),
        "--no-tune",
        "--epochs",
        "3",
        "--rest-port",
        "0",
        "--grpc-port",
        "0",
        "--accuracy-threshold",
        "0",
        "--set",
        "parameters.champion_tolerance=1",
    ]
    summaries, outputs = [], []
    for run in range(1, 4):
        if run == 3:  # the live server dies without a word
            os.kill(summaries[-1]["endpoint"]["pid"], signal.SIGKILL)
            time.sleep(0.5)
        done = run_cli("run", "--out", str(tmp_path / f"run{run}"), *common)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        summaries.append(json.loads((tmp_path / f"run{run}" / "run_summary.json").read_text()))
        outputs.append(done.stdout)
    first, second, third = (s["endpoint"] for s in summaries)
    assert [e["served_version"] for e in (first, second, third)] == [1, 2, 3]
    assert first["started_by_this_run"] and not second["started_by_this_run"] and third["started_by_this_run"]
    assert second["pid"] == first["pid"] and second["rest_url"] == first["rest_url"] and second["log"] == first["log"]
    assert third["pid"] != first["pid"]
    for run, output in enumerate(outputs, start=1):
        assert f"serving version {run}: REST" in output and f"published tfpipe-model version {run}:" in output
        deploy_log = (tmp_path / f"run{run}" / "logs" / "deploy-model.log").read_text()
        assert f"serving tfpipe-model version {run}: REST" in deploy_log and f"version {run}.0" not in deploy_log
    client = ServingClient(third["rest_url"], third["grpc_target"], "tfpipe-model")
    assert client.status()[0]["version"] == "3"

    # another model name on its own data: served by the same server, beside the first, on the same ports
    shapes = run_cli(
        "run",
        "--out",
        str(tmp_path / "run4"),
        *common,
        "--data-source",
        str(write_shapes(tmp_path / "shapes", per_class=30, size=24)),
        "--model-name",
        "shapes",
    )
    assert shapes.returncode == 0, shapes.stdout + shapes.stderr
    fourth = json.loads((tmp_path / "run4" / "run_summary.json").read_text())["endpoint"]
    assert not fourth["started_by_this_run"] and fourth["pid"] == third["pid"]
    assert (fourth["rest_url"], fourth["served_version"]) == (third["rest_url"], 1)
    assert client.status()[0]["version"] == "3"  # the first model still answers, unchanged
    shapes_client = ServingClient(third["rest_url"], third["grpc_target"], "shapes")
    assert shapes_client.status()[0]["state"] == "AVAILABLE"
    answer = shapes_client.predict(np.zeros((1, 24, 24, 3), np.float32), protocol="grpc")
    assert answer["probabilities"].shape == (1, 3)
