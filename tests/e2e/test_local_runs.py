"""Whole pipeline runs through kfp.local on a user's own data, and a run that fails: each its own runs."""

import json
from pathlib import Path

from tests.helpers.data import write_images
from tests.helpers.processes import run_cli, summary_of


def test_a_users_small_csv_with_three_workers_then_batch_predictions_on_the_same_csv(tmp_path):
    """The wine data as a user's CSV (178 rows, a `label` column, one bad value): trained with 3 workers, each
    holding less than one global batch (96) of the training split, then the same file, label column included,
    predicted with the published model."""
    from tests.helpers.data import wine_csv

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
    summary = summary_of(tmp_path / "run1")
    assert summary["training"]["num_workers"] == 3 and summary["training"]["attempts"] == 1
    metrics = json.loads((Path(summary["artifacts"]) / "train-model" / "training" / "metrics.json").read_text())
    assert metrics["global_batch_size"] == 96 and metrics["steps_per_epoch"] == 2
    assert summary["dataset"]["quarantined"] == 1 and summary["metrics"]["test_accuracy"] > 0.8
    stats = json.loads((Path(summary["artifacts"]) / "prepare-data" / "dataset" / "stats.json").read_text())
    assert stats["splits"]["train"]["shards"] == 3 and stats["splits"]["train"]["examples"] / 3 < 96
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
    statuses = {s["name"]: s["status"] for s in summary_of(tmp_path / "run3")["steps"]}
    assert statuses["prepare-data"] == "SUCCEEDED" and statuses["check-champion"] == "FAILED"
    assert statuses.get("tune-hyperparameters") != "SUCCEEDED" and statuses.get("train-model") != "SUCCEEDED"


def test_batch_prediction_on_a_users_csv_and_an_all_failing_run(tmp_path, iris_model):
    """`run --pipeline batch_prediction` on a CSV shaped like the training CSV (label column, another column order)
    predicts every row; a run whose instances all fail fails, with the counts."""
    from tests.helpers.data import IRIS_FEATURES, iris_csv

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
    assert summary_of(tmp_path / "run2")["status"] == "FAILED"


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
    summary = summary_of(tmp_path / "run")
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


def test_a_study_over_a_user_models_own_hyperparameter(tmp_path):
    """A study over `conv_blocks`, which only the user's builder declares, with a fixed value of another of its
    hyperparameters and a mixed-precision policy: each trial trains with its value and the fixed settings, and the
    final training takes the best trial's value."""
    custom = "tests.helpers.custom_model:build_small_cnn"
    result = run_cli(
        "run",
        "--workers",
        "1",
        "--epochs",
        "1",
        "--no-deploy",
        "--accuracy-threshold",
        "0",
        "--model-repository",
        str(tmp_path / "repo"),
        "--set",
        f"trainer.model={custom}",
        "--set",
        "trainer.hyperparameters.filters=4",
        "--set",
        "trainer.mixed_precision=mixed_bfloat16",
        "--set",
        "study.parameters=[{parameter_id: conv_blocks, type: integer, min: 1, max: 2}]",
        "--set",
        "study.algorithm=grid",
        "--set",
        "study.max_trial_count=2",
        "--set",
        "study.parallel_trial_count=1",
        "--set",
        "parameters.tuning_trial_epochs=1",
        "--out",
        str(tmp_path / "run"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    artifacts = Path(summary_of(tmp_path / "run")["artifacts"])
    tuning = artifacts / "tune-hyperparameters" / "tuning"
    study = json.loads((tuning / "trials.json").read_text())
    assert sorted(t["parameters"]["conv_blocks"] for t in study["trials"]) == [1, 2]
    for trial in study["trials"]:
        metrics = json.loads((tuning / trial["trial_id"] / "metrics.json").read_text())
        assert (metrics["model"], metrics["mixed_precision"]) == (custom, "mixed_bfloat16")
        assert metrics["hyperparameters"] == {
            "learning_rate": 0.003,  # the pipeline's: the study does not tune it
            "batch_size": 32,
            "seed": 42,
            "optimizer": "adam",
            "filters": 4,
            "dropout": 0.2,
            "conv_blocks": trial["parameters"]["conv_blocks"],
        }
    best = study["best"]["parameters"]["conv_blocks"]
    final = json.loads((artifacts / "train-model" / "training" / "metrics.json").read_text())
    assert (final["model"], final["mixed_precision"]) == (custom, "mixed_bfloat16")
    assert (final["hyperparameters"]["conv_blocks"], final["hyperparameters"]["filters"]) == (best, 4)
    assert final["hyperparameters"]["learning_rate"] == 0.003


def test_a_retraining_on_drifted_data_stops_before_the_study_or_with_warn_trains_and_reports_the_drift(tmp_path):
    """iris as a user's CSV trained and published; the next export's petal length shifted by 3 cm: the run stops
    at the champion check with the drift line, before the study; with drift_action warn it trains, and the report
    shows the comparison."""
    from sklearn.datasets import load_iris

    from tests.helpers.data import IRIS_FEATURES, iris_csv

    first, _ = iris_csv(tmp_path / "iris.csv", [*IRIS_FEATURES, "label"])
    bunch = load_iris()
    shifted = tmp_path / "shifted.csv"
    shifted.write_text(
        ",".join([*IRIS_FEATURES, "label"])
        + "\n"
        + "".join(
            f"{a},{b},{c + 3.0},{d},{bunch.target_names[t]}\n" for (a, b, c, d), t in zip(bunch.data, bunch.target)
        )
    )
    common = ["--no-tune", "--no-deploy", "--epochs", "3", "--accuracy-threshold", "0"]
    common += ["--model-repository", str(tmp_path / "repo"), "--model-name", "iris"]
    trained = run_cli("run", "--data-source", first, *common, "--out", str(tmp_path / "run1"))
    assert trained.returncode == 0, trained.stdout + trained.stderr
    first_drift = summary_of(tmp_path / "run1")["drift"]
    assert first_drift["reason"] == "no champion: no data drift check" and not first_drift["compared"]
    assert (
        "<h2>Data drift</h2><p>no champion: no data drift check</p>" in (tmp_path / "run1" / "report.html").read_text()
    )

    stopped = run_cli("run", "--data-source", str(shifted), *common, "--out", str(tmp_path / "run2"))
    assert stopped.returncode == 1
    summary = summary_of(tmp_path / "run2")
    (past,) = summary["drift"]["past"]
    assert past.startswith("feature 'petal length (cm)': Jensen-Shannon divergence ")
    assert past.endswith(" above drift_max_js_divergence 0.2")
    assert (
        f"Error: check-champion: these data drifted from champion v1's training data: {past}. Check the data; to "
        "train on them anyway set drift_action to warn (stop | warn) or raise the limit"
    ) in stopped.stdout + stopped.stderr
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["check-champion"] == "FAILED" and statuses.get("tune-hyperparameters") != "SUCCEEDED"
    assert statuses.get("train-model") != "SUCCEEDED"
    assert f"<b>Past the limits:</b> {past}</p>" in (tmp_path / "run2" / "report.html").read_text()

    warned = run_cli(
        "run",
        "--data-source",
        str(shifted),
        *common,
        "--set",
        "parameters.drift_action=warn",
        "--out",
        str(tmp_path / "run3"),
    )
    assert warned.returncode == 0, warned.stdout + warned.stderr
    summary = summary_of(tmp_path / "run3")
    assert summary["drift"]["past"] == [past] and summary["drift"]["limits"]["drift_action"] == "warn"
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["check-champion"] == "SUCCEEDED" and statuses["train-model"] == "SUCCEEDED"
    assert f"  data drift past the limits (warn): {past}\n" in warned.stdout
    log = (tmp_path / "run3" / "logs" / "check-champion.log").read_text()
    assert f"warning: these data drifted from champion v1's training data: {past} (drift_action warn)" in log
    length = next(f for f in summary["drift"]["features"] if f["name"] == "petal length (cm)")
    report = (tmp_path / "run3" / "report.html").read_text()
    assert "<h2>Data drift</h2>" in report
    assert f'<tr><td>petal length (cm)</td><td class="n">{length["js_divergence"]:.3f}</td>' in report
