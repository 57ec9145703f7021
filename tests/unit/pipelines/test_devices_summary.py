"""The devices each training process had, from the training's metrics.json to the run summary, the report and the
terminal summary."""

import json

from pipelines import report
from pipelines.cli.local import _print_summary
from pipelines.local_run import Step
from tests.unit.pipelines.test_local_run import a_run_summary

DEVICES = {"chief": "GPU 0,1", "worker-0": "GPU 2,3"}


def test_the_summary_report_and_terminal_say_which_devices_each_worker_had(tmp_path, capsys):
    training = tmp_path / "root" / "train-model" / "training"
    training.mkdir(parents=True)
    (training / "metrics.json").write_text(
        json.dumps({"epochs": 2, "num_workers": 2, "devices": ["GPU:0", "GPU:1"], "worker_devices": DEVICES})
    )
    collected = report.collect(tmp_path / "root", [Step("train-model", "SUCCEEDED", 0.1)], "tfpipe-training", {}, 1.0)
    assert (collected["training"]["devices"], collected["training"]["worker_devices"]) == (["GPU:0", "GPU:1"], DEVICES)

    summary = a_run_summary(tmp_path)
    summary["training"]["worker_devices"] = DEVICES
    summary["report"] = str(tmp_path / "report.html")
    report.write(summary, tmp_path)
    assert "13.0 s; devices:\nchief GPU 0,1, worker-0 GPU 2,3</p>" in (tmp_path / "report.html").read_text()
    _print_summary(summary)
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("  trained with learning_rate=0.0101, batch_size=32, dropout=0.0") + 1] == (
        "  devices: chief GPU 0,1, worker-0 GPU 2,3"
    )
