import io
import json

from pipelines import report
from pipelines.local_run import Step, StepLog, step_names
from pipelines.training import build_pipeline


def test_step_log_times_steps_splits_logs_and_keeps_the_error(tmp_path):
    console = io.StringIO()
    log = StepLog(tmp_path, console)
    log.write("11:00:00.000 - INFO - Executing task \x1b[96m'prepare-data'\x1b[0m\n    reading...\n")
    log.write("    components.sources.DataError: need at least two classes, found 1: ['a']\n")
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
