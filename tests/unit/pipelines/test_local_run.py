import io
import json
from html.parser import HTMLParser

import pytest

from core import units
from pipelines import report
from pipelines.cli.local import _print_summary
from pipelines.local_run import Step, StepLog, step_names
from pipelines.training import build_pipeline


def test_step_log_times_steps_splits_logs_and_keeps_the_error(tmp_path):
    console = io.StringIO()
    log = StepLog(tmp_path, console)
    log.write("11:00:00.000 - INFO - Executing task \x1b[96m'prepare-data'\x1b[0m\n    reading...\n")
    log.write("    components.lib.prep.sources.DataError: need at least two classes, found 1: ['a']\n")
    log.write("11:00:01.000 - INFO - Task \x1b[96m'prepare-data'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m\n")
    step = log.steps["prepare-data"]
    assert step.status == "FAILED" and step.error == "need at least two classes, found 1: ['a']"
    assert "reading..." in (tmp_path / "prepare-data.log").read_text()
    assert console.getvalue().splitlines() == ["▶ prepare-data ...", f"✘ prepare-data failed in {step.seconds:.1f}s"]


def test_step_names_in_dependency_order_with_condition_flattened():
    assert step_names(build_pipeline("local")) == [
        "find-repository-champion",
        "fingerprint-data",
        "prepare-data",
        "check-champion",
        "tune-hyperparameters",
        "train-model",
        "evaluate-model",
        "publish-model",
        "quantize-model",
        "deploy-model",
    ]


def test_summary_of_a_run_that_produced_nothing(tmp_path):
    steps = [Step("prepare-data", "FAILED", 1.0, error="boom"), Step("train-model")]
    summary = report.collect(None, steps, "tfpipe-training", {"epochs": 1}, 2.0)
    assert summary["status"] == "FAILED" and summary["error"] == "prepare-data: boom"
    assert summary["dataset"] is None and summary["gate"] is None and summary["model"]["published_version"] is None
    report.write(summary, tmp_path)
    written = json.loads((tmp_path / "run_summary.json").read_text())
    assert written["steps"][1] == {
        "name": "train-model",
        "status": "SKIPPED",
        "seconds": 0.0,
        "peak_memory_bytes": None,
        "log": None,
        "progress": [],
    }
    assert written["plots"] == {} and "FAILED" in (tmp_path / "report.html").read_text()


def test_summary_of_a_deploy_that_reused_a_server(tmp_path):
    """A later run reuses the server an earlier run left up: its record may lack what the starting run knew
    (an endpoint record from before the reused server's log was recorded), and KFP hands the version on as a
    float; the summary is whole either way and the version an integer."""
    root = tmp_path / "root"
    (root / "deploy-model").mkdir(parents=True)
    (root / "deploy-model" / "endpoint").write_text(
        json.dumps(
            {
                "rest_url": "http://127.0.0.1:8501",
                "grpc_target": "127.0.0.1:8500",
                "pid": 4242,
                "started": False,
                "model_name": "tfpipe-model",
                "version": 3.0,
                "stop": "python -m pipelines stop-serving ...",
            }
        )
    )
    steps = [Step("deploy-model", "SUCCEEDED", 1.0)]
    summary = report.collect(root, steps, "tfpipe-training", {}, 2.0)
    assert summary["endpoint"] == {
        "rest_url": "http://127.0.0.1:8501",
        "grpc_target": "127.0.0.1:8500",
        "served_version": 3,
        "model_name": "tfpipe-model",
        "started_by_this_run": False,
        "pid": 4242,
        "log": None,
        "stop": "python -m pipelines stop-serving ...",
    }
    report.write(summary, tmp_path)
    assert "version 3:" in (tmp_path / "report.html").read_text()


class Tables(HTMLParser):
    """The tables of an HTML page: each a list of rows, each a list of cell texts."""

    def __init__(self, html: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def trial(trial_id, metric, seconds, status="SUCCEEDED", error="", **parameters):
    return {
        "trial_id": trial_id,
        "parameters": parameters,
        "metric": metric,
        "status": status,
        "seconds": seconds,
        "error": error,
    }


def finished_trial(seconds, trial_id, metric, best_trial, best, status="SUCCEEDED") -> dict:
    """The study's progress event of a finished trial, as the run records it."""
    return {
        "seconds": seconds,
        "stage": "study",
        "event": "trial_finished",
        "message": f"trial {trial_id}/3: ...",
        "trial": trial_id,
        "status": status,
        "metric": metric,
        "best": best,
        "best_trial": best_trial,
    }


def a_run_summary(tmp_path) -> dict:
    best = trial("2", 0.9397590160369873, 9.123, learning_rate=0.010093959208585444, hidden_units=64, dropout=0.0)
    return {
        "pipeline": "tfpipe-training",
        "status": "SUCCEEDED",
        "error": None,
        "seconds": 68.39,
        "artifacts": None,
        "parameters": {
            "epochs": 15,
            "learning_rate": 0.003,
            "tflite_max_accuracy_drop": 1.0,
            "tune": True,
            "split_salt": "",
        },
        "steps": [
            {
                "name": "prepare-data",
                "status": "SUCCEEDED",
                "seconds": 1.43,
                "peak_memory_bytes": 123_456_789,
                "log": None,
                "progress": [],
            },
            {
                "name": "tune-hyperparameters",
                "status": "SUCCEEDED",
                "seconds": 24.9,
                "log": None,
                "progress": [
                    finished_trial(11.2, "1", 0.9156626462936401, "1", 0.9156626462936401),
                    finished_trial(12.1, "3", None, "1", 0.9156626462936401, "FAILED"),
                    finished_trial(21.5, "2", 0.9397590160369873, "2", 0.9397590160369873),
                ],
            },
            {
                "name": "train-model",
                "status": "SUCCEEDED",
                "seconds": 17.17,
                "log": None,
                "progress": [
                    {"seconds": 9.5, "stage": "train", "event": "epoch", "message": "epoch 15/15: loss 0.0512"}
                ],
            },
        ],
        "dataset": {
            "source": "builtin:digits",
            "kind": "image",
            "input_shape": [8, 8, 1],
            "labels": ["0", "1"],
            "records": 100,
            "examples": 100,
            "quarantined": 0,
            "image_size": None,
            "quarantine_file": str(tmp_path / "quarantine.jsonl"),
            "splits": {
                "train": {"examples": 80, "bytes": 199198, "per_class": {"0": 40, "1": 40}},
                "test": {"examples": 20, "bytes": 999, "per_class": {"0": 9, "1": 11}},
            },
        },
        "training": {
            "epochs": 15,
            "num_workers": 2,
            "strategy": "MultiWorkerMirroredStrategy",
            "global_batch_size": 64,
            "attempts": 1,
            "seconds": 13.0234,
            "hyperparameters": {"learning_rate": 0.010093959208585444, "batch_size": 32, "dropout": 0.0},
        },
        "metrics": {"val_accuracy": 0.9939758777618408, "test_accuracy": 1.0, "test_loss": 0.003991579942110568},
        "gate": None,
        "tflite": {
            "published": True,
            "reason": "dynamic: within budget",
            "saved_model_accuracy": 1.0,
            "modes": [
                {
                    "mode": "float32",
                    "size_bytes": 58336,
                    "size_ratio": 1.0,
                    "accuracy": 0.994356,
                    "accuracy_drop_points": 0.0,
                    "latency_ms_mean": 0.003622796627450182,
                    "latency_ms_p95": 0.003839999590127263,
                    "weight_types": {"float32": 8, "int32": 2},
                },
                {
                    "mode": "int8",
                    "size_bytes": 1523400,
                    "size_ratio": 0.3655,
                    "accuracy": 0.9830508,
                    "accuracy_drop_points": 1.1299435,
                    "latency_ms_mean": 1.5,
                    "latency_ms_p95": 2.25,
                    "weight_types": {"int8": 4},
                },
            ],
        },
        "tuning": {
            "enabled": True,
            "failed_trials": 1,
            "best": best,
            "seconds": 24.8249,
            "metric_id": "accuracy",
            "plot": str(tmp_path / "trials.png"),
            "trials": [
                trial(
                    "1", 0.9156626462936401, 10.46, learning_rate=0.0017320509068667889, hidden_units=91, dropout=0.2
                ),
                best,
                trial(
                    "3",
                    None,
                    0.52,
                    "FAILED",
                    "no 'accuracy' reported",
                    learning_rate=0.03,
                    hidden_units=40,
                    dropout=0.1,
                ),
            ],
        },
        "model": {"artifact": None, "published_version": None, "published_path": None},
        "registry": None,
        "endpoint": None,
        "batch_prediction": None,
    }


def test_the_report_rounds_numbers_and_tabulates_parameters_and_trials(tmp_path):
    report.write(a_run_summary(tmp_path), tmp_path)
    html = (tmp_path / "report.html").read_text()
    steps, parameters, metrics, dataset, hyperparameters, trials, as_finished, tflite = Tables(html).tables
    assert steps == [
        ["step", "status", "time", "peak memory", "log", "last progress"],
        ["prepare-data", "SUCCEEDED", "1.4 s", "123.5 MB", "", ""],
        ["tune-hyperparameters", "SUCCEEDED", "24.9 s", "", "", "trial 2/3: ..."],
        ["train-model", "SUCCEEDED", "17.2 s", "", "", "epoch 15/15: loss 0.0512"],
    ]
    assert parameters == [
        ["parameter", "value"],
        ["epochs", "15"],
        ["learning_rate", "0.003"],
        ["tflite_max_accuracy_drop", "1.0"],
        ["tune", "True"],
        ["split_salt", ""],
    ]
    assert metrics == [
        ["metric", "value"],
        ["validation accuracy", "0.9940"],
        ["test accuracy", "1.0000"],
        ["test loss (cross-entropy)", "0.0040"],
    ]
    assert dataset == [
        ["class", "train", "test"],
        ["0", "40", "9"],
        ["1", "40", "11"],
        ["examples", "80", "20"],
        ["size", "199.2 KB", "999 B"],
    ]
    assert hyperparameters == [
        ["hyperparameter", "value"],
        ["learning_rate", "0.0101"],
        ["batch_size", "32"],
        ["dropout", "0.0"],
    ]
    assert trials == [
        ["trial", "learning_rate", "hidden_units", "dropout", "accuracy", "status", "time"],
        ["1", "0.00173", "91", "0.2", "0.9157", "SUCCEEDED", "10.5 s"],
        ["2", "0.0101", "64", "0.0", "0.9398", "SUCCEEDED", "9.1 s"],
        ["3", "0.03", "40", "0.1", "–", "FAILED", "0.5 s"],
    ]
    assert as_finished == [  # the study's step progress: the trials in the order they finished
        ["time", "trial", "accuracy", "best so far"],
        ["11.2 s", "1", "0.9157", "0.9157 (trial 1)"],
        ["12.1 s", "3", "FAILED", "0.9157 (trial 1)"],
        ["21.5 s", "2", "0.9398", "0.9398 (trial 2)"],
    ]
    assert tflite == [
        [
            "mode",
            "size",
            "size vs float32",
            "test accuracy",
            "drop (points)",
            "latency mean / p95",
            "weight tensors by type",
        ],
        ["float32", "58.3 KB", "100%", "0.9944", "0.00", "3.6 µs / 3.8 µs", "float32: 8, int32: 2"],
        ["int8", "1.5 MB", "37%", "0.9831", "1.13", "1.50 ms / 2.25 ms", "int8: 4"],
    ]
    assert '<tr class="best">\n<td>2</td>' in html and "title=\"no 'accuracy' reported\"" in html
    assert "3 trials (1 failed) in\n24.8 s; best: trial 2,\naccuracy 0.9398" in html
    assert "global batch 64, 1 attempt(s),\n13.0 s" in html and "input\n8 × 8 × 1)" in html
    assert "{'" not in html and "0.0100939" not in html


def test_the_terminal_summary_prints_hyperparameters_rounded(tmp_path, capsys):
    summary = a_run_summary(tmp_path)
    summary["report"] = str(tmp_path / "report.html")
    _print_summary(summary)
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("  val accuracy 0.9940, test accuracy 1.0000") + 1 :][:2] == [
        "  tuning: 3 trials, best accuracy 0.9398 with learning_rate=0.0101, hidden_units=64, dropout=0.0",
        "  trained with learning_rate=0.0101, batch_size=32, dropout=0.0",
    ]


def test_plots_are_titled_with_labelled_axes():
    history = [
        {"epoch": 1, "loss": 1.8, "accuracy": 0.4, "val_loss": 0.7, "val_accuracy": 0.8},
        {"epoch": 2, "loss": 0.5, "accuracy": 0.9, "val_loss": 0.3, "val_accuracy": 0.9},
    ]
    curves = report.training_curves(history)
    assert [
        (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), [t.get_text() for t in ax.get_legend().get_texts()])
        for ax in curves.axes
    ] == [
        ("Loss per epoch", "epoch", "loss (cross-entropy)", ["training", "validation"]),
        ("Accuracy per epoch", "epoch", "accuracy (fraction correct)", ["training", "validation"]),
    ]
    matrix = report.confusion_matrix(
        {"confusion_matrix": [[9, 1], [0, 10]], "labels": ["cat", "dog"], "accuracy": 0.95}
    )
    assert [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in matrix.axes] == [
        ("Confusion matrix, test split (accuracy 0.9500)", "predicted class", "true class"),
        ("", "", "test examples"),
    ]  # the colour bar
    assert report.training_curves([]) is None and report.confusion_matrix(None) is None


@pytest.mark.parametrize(
    "v, text",
    [
        (0.010093959208585444, "0.0101"),
        (0.0, "0.0"),
        (1.0, "1.0"),
        (1e-5, "1e-05"),
        (64, "64"),
        (True, "True"),
        ("relu", "relu"),
        (["label", "id"], "label, id"),
        ({"a": 0.5, "b": 2}, "a=0.5, b=2"),
    ],
)
def test_values_read_as_people_write_them(v, text):
    assert units.value(v) == text


def test_units():
    assert [units.size(n) for n in (999, 1000, 21160, 999_999, 1_500_000, 2_000_000_000)] == [
        "999 B",
        "1.0 KB",
        "21.2 KB",
        "1.0 MB",
        "1.5 MB",
        "2.0 GB",
    ]
    assert [report.milliseconds(v) for v in (0.0036, 0.9999, 1.0, 12.345)] == [
        "3.6 µs",
        "999.9 µs",
        "1.00 ms",
        "12.35 ms",
    ]
    assert [report.seconds(v) for v in (0.07, 68.39, None)] == ["0.1 s", "68.4 s", "–"]
    assert [report.fraction(v) for v in (0.9939758777618408, 1.0, None)] == ["0.9940", "1.0000", "–"]


def test_a_vertex_run_reads_training_from_the_imported_model(tmp_path):
    """A rehearsed Vertex run has no train-model step: its metrics and its history (the curves) come from
    import-trained-model's `training` output, as they come from train-model's on the self-hosted targets."""
    root = tmp_path / "root"
    training = root / "import-trained-model" / "training"
    training.mkdir(parents=True)
    (training / "metrics.json").write_text(json.dumps({"epochs": 2, "num_workers": 2, "final": {"val_accuracy": 0.5}}))
    (training / "history.jsonl").write_text(
        "\n".join(
            json.dumps({"epoch": e, "loss": 1.0 / e, "accuracy": 0.5, "val_loss": 1.1 / e, "val_accuracy": 0.4})
            for e in (1, 2)
        )
        + "\n"
    )
    summary = report.collect(root, [Step("import-trained-model", "SUCCEEDED", 0.1)], "tfpipe-training", {}, 1.0)
    assert (summary["training"]["epochs"], summary["training"]["num_workers"]) == (2, 2)
    (tmp_path / "out").mkdir()
    report.write(summary, tmp_path / "out")
    assert summary["plots"] == {"training curves": "training_curves.png"}
    assert (tmp_path / "out" / "training_curves.png").stat().st_size > 0
