import io
import json

from pipelines import report
from pipelines.local_run import Step, StepLog, step_names
from pipelines.training import build_pipeline


def test_step_log_times_steps_splits_logs_and_keeps_the_error(tmp_path):
    console = io.StringIO()
    log = StepLog(tmp_path, console)
    log.write("11:00:00.000 - INFO - Executing task \x1b[96m'prepare-data'\x1b[0m\n    reading...\n")
    log.write("    components.lib.sources.DataError: need at least two classes, found 1: ['a']\n")
    log.write("11:00:01.000 - INFO - Task \x1b[96m'prepare-data'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m\n")
    step = log.steps["prepare-data"]
    assert step.status == "FAILED" and step.error == "need at least two classes, found 1: ['a']"
    assert "reading..." in (tmp_path / "prepare-data.log").read_text()
    assert console.getvalue().splitlines() == ["▶ prepare-data ...", f"✘ prepare-data failed in {step.seconds:.1f}s"]


def test_step_names_in_dependency_order_with_condition_flattened():
    assert step_names(build_pipeline("local")) == ["find-repository-champion", "fingerprint-data", "prepare-data",
                                                  "tune-hyperparameters", "train-model", "evaluate-model",
                                                  "publish-model", "quantize-model", "deploy-model"]


def test_summary_of_a_run_that_produced_nothing(tmp_path):
    steps = [Step("prepare-data", "FAILED", 1.0, error="boom"), Step("train-model")]
    summary = report.collect(None, steps, "tfpipe-training", {"epochs": 1}, 2.0)
    assert summary["status"] == "FAILED" and summary["error"] == "prepare-data: boom"
    assert summary["dataset"] is None and summary["gate"] is None and summary["model"]["published_version"] is None
    report.write(summary, tmp_path)
    written = json.loads((tmp_path / "run_summary.json").read_text())
    assert written["steps"][1] == {"name": "train-model", "status": "SKIPPED", "seconds": 0.0, "log": None}
    assert written["plots"] == {} and "FAILED" in (tmp_path / "report.html").read_text()


def test_summary_of_a_deploy_that_reused_a_server(tmp_path):
    """A later run reuses the server an earlier run left up: its record may lack what the starting run knew
    (an endpoint record from before the reused server's log was recorded), and KFP hands the version on as a
    float; the summary is whole either way and the version an integer."""
    root = tmp_path / "root"
    (root / "deploy-model").mkdir(parents=True)
    (root / "deploy-model" / "endpoint").write_text(json.dumps(
        {"rest_url": "http://127.0.0.1:8501", "grpc_target": "127.0.0.1:8500", "pid": 4242, "started": False,
         "model_name": "tfpipe-model", "version": 3.0, "stop": "python -m pipelines stop-serving ..."}))
    steps = [Step("deploy-model", "SUCCEEDED", 1.0)]
    summary = report.collect(root, steps, "tfpipe-training", {}, 2.0)
    assert summary["endpoint"] == {"rest_url": "http://127.0.0.1:8501", "grpc_target": "127.0.0.1:8500",
                                   "served_version": 3, "model_name": "tfpipe-model", "started_by_this_run": False,
                                   "pid": 4242, "log": None, "stop": "python -m pipelines stop-serving ..."}
    report.write(summary, tmp_path)
    assert "version 3:" in (tmp_path / "report.html").read_text()
