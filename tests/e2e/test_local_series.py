"""The whole pipeline through kfp.local, as `make run` runs it: one series of runs on one model repository, as a
user makes them, shared by the tests below: the default run on a terminal (the study, the final training, publish,
quantize, a new local server); its server killed, a run that starts a new one; a run whose model fails an impossible
threshold; another model on its own data, served by the same server; batch predictions with the champion, stdout a
pipe; `stop-serving`. What a test needs of the server while it ran is observed at that moment and kept."""

import json
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from core import progress
from serving.client import PredictionError, ServingClient
from tests.helpers.data import write_shapes
from tests.helpers.processes import run_cli, summary_of
from tests.helpers.terminal import run_on_a_terminal


@dataclass
class Series:
    root: Path
    repo: Path
    summaries: dict[str, dict] = field(default_factory=dict)
    stdout: dict[str, str] = field(default_factory=dict)
    screens: list[list[str]] = field(default_factory=list)  # the default run's terminal, read after read
    seen: dict[str, object] = field(default_factory=dict)  # what the server answered at a given moment


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    root = tmp_path_factory.mktemp("series")
    repo = root / "repo"
    env = {**os.environ, "TFPIPE_SERVING_STATE": str(root / "serving"), "COLUMNS": "160", "TF_CPP_MIN_LOG_LEVEL": "2"}
    s = Series(root, repo)
    ports = ["--rest-port", "0", "--grpc-port", "0"]
    retrain = ["--no-tune", "--epochs", "3", *ports, "--accuracy-threshold", "0"]
    retrain += ["--set", "parameters.champion_tolerance=1"]

    def run(name: str, *args: str) -> dict:
        done = run_cli("run", "--out", str(root / name), "--model-repository", str(repo), *args, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        s.stdout[name] = done.stdout
        s.summaries[name] = summary_of(root / name)
        return s.summaries[name]

    try:
        # the default run on a terminal: the study (4 trials, 2 at a time), 15 epochs, deploy on a new server
        argv = ["-m", "pipelines", "run", "--out", str(root / "default"), "--model-repository", str(repo), *ports]
        code, s.screens, final = run_on_a_terminal(argv, env)
        assert code == 0, "\n".join(final)
        s.stdout["default"] = "\n".join(final)
        s.summaries["default"] = summary_of(root / "default")
        first = s.summaries["default"]["endpoint"]
        client = ServingClient(first["rest_url"], first["grpc_target"], "tfpipe-model")
        images = np.zeros((2, 8, 8, 1), np.float32)
        s.seen["rest"], s.seen["grpc"] = client.predict(images), client.predict(images, protocol="grpc")

        os.kill(first["pid"], signal.SIGKILL)  # the live server dies without a word
        time.sleep(0.5)
        restarted = run("restarted", *retrain)["endpoint"]
        client = ServingClient(restarted["rest_url"], restarted["grpc_target"], "tfpipe-model")
        s.seen["restarted status"] = client.status()[0]

        run("impossible", "--accuracy-threshold", "1.0", "--epochs", "2", "--no-tune")
        s.seen["status after impossible"] = client.status()[0]

        shapes = write_shapes(root / "shapes-images", per_class=30, size=24)
        run("shapes", *retrain, "--data-source", str(shapes), "--model-name", "shapes")
        s.seen["status after shapes"] = client.status()[0]
        shapes_client = ServingClient(restarted["rest_url"], restarted["grpc_target"], "shapes")
        s.seen["shapes status"] = shapes_client.status()[0]
        s.seen["shapes grpc"] = shapes_client.predict(np.zeros((1, 24, 24, 3), np.float32), protocol="grpc")

        instances = root / "instances.jsonl"
        instances.write_text(
            "".join(json.dumps(np.full((8, 8, 1), i, np.float32).tolist()) + "\n" for i in range(5))
            + "not json\n"
            + json.dumps([[1.0]])
            + "\n"
        )
        run("batch", "--pipeline", "batch_prediction", "--instances", str(instances), "--max-error-fraction", "0.5")

        for model in ("tfpipe-model", "shapes"):  # the server stops with its last model
            stop = run_cli("stop-serving", "--model-base-path", str(repo), "--model-name", model, env=env)
            assert stop.returncode == 0, stop.stderr
            s.stdout[f"stop-serving {model}"] = stop.stdout
            if model == "tfpipe-model":
                s.seen["shapes after stopping the first"] = shapes_client.status()[0]
        try:
            client.status()
        except PredictionError as e:
            s.seen["after stop-serving"] = str(e)
        yield s
    finally:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TFPIPE_SERVING_STATE", env["TFPIPE_SERVING_STATE"])
            from serving.lifecycle import stop_server

            stop_server(str(repo))  # the whole server, every model the series published


def test_the_default_run_tunes_trains_gates_publishes_quantizes_and_serves(series):
    repo, summary, stdout = series.repo, series.summaries["default"], series.stdout["default"]
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
    assert endpoint["stop"] in stdout.replace("\n", "")
    rest, grpc_out = series.seen["rest"], series.seen["grpc"]
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
    out = series.root / "default"
    for name in ("report.html", "training_curves.png", "confusion_matrix.png"):
        assert (out / name).stat().st_size > 1000
    assert "gate: BLESSED" in stdout
    tuning = summary["tuning"]
    assert tuning["enabled"] and len(tuning["trials"]) == 4 and tuning["best"]["status"] == "SUCCEEDED"
    assert summary["training"]["hyperparameters"]["learning_rate"] == tuning["best"]["parameters"]["learning_rate"]
    assert summary["training"]["hyperparameters"]["hidden_units"] == tuning["best"]["parameters"]["hidden_units"]
    tflite = summary["tflite"]
    assert tflite["published"] and tflite["publish_mode"] == "dynamic"
    assert [m["mode"] for m in tflite["modes"]] == ["float32", "dynamic", "float16", "int8"]
    assert "TFLite" in (out / "report.html").read_text()
    run_root = summary["artifacts"]
    assert (Path(run_root) / "quantize-model" / "tflite_model" / "model.tflite").stat().st_size > 1000
    assert "| dynamic |" in (Path(run_root) / "quantize-model" / "table").read_text()


def test_on_a_terminal_the_line_under_a_step_shows_the_trial_and_the_epoch_live(series):
    """While the study runs, the line under it names the trial and its epoch; while the training runs, the epoch and
    its accuracy; each ends in its step's final line. The step logs carry the progress lines."""

    def seen(step: str, pattern: str) -> list[str]:
        """The progress lines shown under `step` while it ran."""
        return [
            lines[-1]
            for lines in series.screens
            if len(lines) > 1 and lines[-2] == f"▶ {step} ..." and re.fullmatch(pattern, lines[-1])
        ]

    final = series.stdout["default"].splitlines()
    assert seen("tune-hyperparameters", r"  ↳ .*trial \d/4.*"), "\n".join(final)
    assert seen("tune-hyperparameters", r"  ↳ .*running: trial \d epoch \d/2.*"), "\n".join(final)
    assert seen("train-model", r"  ↳ epoch \d+/15: loss \d\.\d{4}, accuracy \d\.\d{4}, val_accuracy \d\.\d{4}, .*")
    train = final.index("▶ train-model ...")
    assert re.fullmatch(r"✔ train-model succeeded in \d+\.\ds, peak memory \d+\.\d [MG]B", final[train + 1])
    assert not [line for line in final if "↳" in line]  # every progress line was replaced by its step's final line
    logs = series.root / "default" / "logs"
    events = [e for e in map(progress.parse, (logs / "train-model.log").read_text().splitlines()) if e]
    assert [e["done"] for e in events if e["event"] == "epoch"] == list(range(1, 16))
    assert "trial_finished" in (logs / "tune-hyperparameters.log").read_text()
    tune = next(s for s in series.summaries["default"]["steps"] if s["name"] == "tune-hyperparameters")
    assert sorted(e["trial"] for e in tune["progress"] if e["event"] == "trial_finished") == ["1", "2", "3", "4"]


def test_after_its_server_was_killed_the_next_run_starts_a_new_one(series):
    first, restarted = series.summaries["default"]["endpoint"], series.summaries["restarted"]["endpoint"]
    assert restarted["served_version"] == 2 and restarted["started_by_this_run"]
    assert restarted["pid"] != first["pid"]
    assert series.seen["restarted status"]["version"] == "2"
    output = series.stdout["restarted"]
    assert "serving version 2: REST" in output and "published tfpipe-model version 2:" in output
    deploy_log = (series.root / "restarted" / "logs" / "deploy-model.log").read_text()
    assert "serving tfpipe-model version 2: REST" in deploy_log and "version 2.0" not in deploy_log


def test_a_model_below_an_impossible_threshold_skips_publish_quantize_and_deploy(series):
    repo, summary = series.repo, series.summaries["impossible"]
    assert summary["status"] == "SUCCEEDED"
    assert not summary["gate"]["blessed"] and "below the threshold 1.0000" in summary["gate"]["reason"]
    assert summary["gate"]["champion"]["name"] == "champion v2"
    assert summary["gate"]["champion"]["path"] == str(repo / "tfpipe-model" / "2")
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["publish-model"] == statuses["quantize-model"] == "SKIPPED"
    assert summary["tflite"] is None
    assert summary["tuning"] == {**summary["tuning"], "enabled": False, "trials": []}
    assert summary["training"]["hyperparameters"]["learning_rate"] == 0.003  # the pipeline's value
    assert statuses["deploy-model"] == "SKIPPED" and summary["endpoint"] is None
    assert sorted(p.name for p in (repo / "tfpipe-model").iterdir() if p.name.isdigit()) == ["1", "2"]
    assert "NOT BLESSED" in series.stdout["impossible"]
    assert series.seen["status after impossible"] == {
        "version": "2",
        "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }


def test_another_model_on_its_own_data_is_served_beside_the_first_by_the_same_server(series):
    restarted, shapes = series.summaries["restarted"]["endpoint"], series.summaries["shapes"]["endpoint"]
    assert not shapes["started_by_this_run"] and shapes["pid"] == restarted["pid"]
    assert (shapes["rest_url"], shapes["served_version"]) == (restarted["rest_url"], 1)
    assert series.seen["status after shapes"]["version"] == "2"  # the first model still answers, unchanged
    assert series.seen["shapes status"]["state"] == "AVAILABLE"
    assert series.seen["shapes grpc"]["probabilities"].shape == (1, 3)


def test_batch_predictions_count_every_instance_and_show_plain_progress_lines_on_a_pipe(series):
    batch = series.summaries["batch"]["batch_prediction"]
    assert (batch["instances"], batch["succeeded"], batch["failed"]) == (7, 5, 2)
    assert batch["model"] == str(series.repo / "tfpipe-model" / "2")
    output = Path(batch["output_directory"])
    results = (output / "prediction.results-00000-of-00001").read_text().splitlines()
    errors = (output / "prediction.errors_stats-00000-of-00001").read_text().splitlines()
    assert len(results) == 5 and len(errors) == 2
    stdout = series.stdout["batch"]
    assert "5 ok, 2 failed of 7 instances" in stdout
    lines = stdout.splitlines()
    step = lines.index("▶ run-batch-prediction ...")
    assert re.fullmatch(
        r"  ↳ 7 instances, 2 errors, 1/1 files, 100% of the input read, \d+ instances/s", lines[step + 1]
    )
    assert re.fullmatch(r"✔ run-batch-prediction succeeded in \d+\.\ds, peak memory \d+\.\d [MG]B", lines[step + 2])
    assert "\r" not in stdout and "\x1b[K" not in stdout


def test_stop_serving_unloads_one_model_and_stops_the_server_with_its_last(series):
    server = series.summaries["restarted"]["endpoint"]
    where = f"pid {server['pid']}, REST {server['rest_url']}"
    assert series.stdout["stop-serving tfpipe-model"] == (
        f"stopped serving tfpipe-model; the server ({where}) keeps serving shapes\n"
    )
    assert series.seen["shapes after stopping the first"]["state"] == "AVAILABLE"
    assert series.stdout["stop-serving shapes"] == (
        f"stopped the server for {series.repo} ({where}): shapes was its last model\n"
    )
    assert "cannot reach" in series.seen["after stop-serving"]
