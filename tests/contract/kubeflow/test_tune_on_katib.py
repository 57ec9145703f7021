"""The kubeflow tuning step against a Kubernetes API double: the exact Katib Experiment from the study spec, the
metric format Katib's File collector parses, and the step on each transition (succeeded with a best trial, failed
trials, cancelled, Katib missing)."""

import json
import os
import re
import signal
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from components.lib.kube import api as kube
from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from components.tune_on_katib import (
    METRICS_FILE,
    StudyFailed,
    best_trial,
    experiment,
    log_scale_warnings,
    run_experiment,
    search_space,
    tune_with_katib,
)
from tests.doubles.k8s import KubeAPI
from tests.helpers.kubeflow_components import (
    EXPERIMENTS,
    SMALL_STUDY,
    katib_api,
    run_train_model_on_operator,
    run_tune_on_katib,
)
from trainer.flags import TRAINER_COMMAND, TrainerSetup

CREATED = {"type": "Created", "status": "True", "reason": "ExperimentCreated", "message": "Experiment is created"}
RUNNING = {"type": "Running", "status": "True", "reason": "ExperimentRunning", "message": "Experiment is running"}
SUCCEEDED = {
    "type": "Succeeded",
    "status": "True",
    "reason": "ExperimentMaxTrialsReached",
    "message": "Experiment has succeeded because max trial count has reached",
}
FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "ExperimentFailed",
    "message": "Experiment has failed because max failed count has reached",
}
OPTIMAL = {
    "bestTrialName": "tfpipe-tune-abc-x7k2",
    "parameterAssignments": [
        {"name": "learning_rate", "value": "0.0042"},
        {"name": "hidden_units", "value": "96"},
        {"name": "dropout", "value": "0.1"},
    ],
    "observation": {"metrics": [{"name": "val_accuracy", "latest": "0.93", "max": "0.95", "min": "0.61"}]},
}


@pytest.fixture
def api_server():
    server = KubeAPI(installed=dict(EXPERIMENTS))
    yield server
    server.close()


def build(spec=DEFAULT_STUDY, **overrides):
    values = dict(
        name="tfpipe-tune-abc",
        namespace="ml",
        spec=spec,
        image="example.com/trainer:1",
        fixed_args=["--data-dir", "/mnt/tfpipe/runs/r/dataset", "--epochs", "2", "--batch-size", "32"],
        trials_dir="/mnt/tfpipe/runs/r/tune-hyperparameters/trials",
        resources={"requests": {"cpu": "2"}},
        claim_name="tfpipe",
        mount_path="/mnt/tfpipe",
        service_account="trainer",
        labels={"tfpipe/run-id": "r"},
    )
    return experiment(**{**values, **overrides})


def test_experiment_from_the_study_spec():
    trial = "/mnt/tfpipe/runs/r/tune-hyperparameters/trials/${trialParameters.trialName}"
    assert build() == {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "Experiment",
        "metadata": {"name": "tfpipe-tune-abc", "namespace": "ml", "labels": {"tfpipe/run-id": "r"}},
        "spec": {
            "objective": {
                "type": "maximize",
                "objectiveMetricName": "val_accuracy",
                "metricStrategies": [{"name": "val_accuracy", "value": "latest"}],
            },
            "algorithm": {"algorithmName": "bayesianoptimization"},
            "parallelTrialCount": 2,
            "maxTrialCount": 4,
            "maxFailedTrialCount": 1,
            "metricsCollectorSpec": {
                "collector": {"kind": "File"},
                "source": {
                    "fileSystemPath": {"path": "/var/log/katib/tfpipe/output.metrics", "kind": "File", "format": "JSON"}
                },
            },
            "parameters": [
                {
                    "name": "learning_rate",
                    "parameterType": "double",
                    "feasibleSpace": {"min": "0.0001", "max": "0.03", "distribution": "logUniform"},
                },
                {
                    "name": "hidden_units",
                    "parameterType": "int",
                    "feasibleSpace": {"min": "32", "max": "256", "distribution": "logUniform"},
                },
                {
                    "name": "dropout",
                    "parameterType": "discrete",
                    "feasibleSpace": {"list": ["0.0", "0.1", "0.2", "0.3"]},
                },
            ],
            "trialTemplate": {
                "retain": True,
                "primaryContainerName": "training-container",
                "trialParameters": [
                    {"name": "learningRate", "description": "--learning_rate", "reference": "learning_rate"},
                    {"name": "hiddenUnits", "description": "--hidden_units", "reference": "hidden_units"},
                    {"name": "dropout", "description": "--dropout", "reference": "dropout"},
                    {
                        "name": "trialName",
                        "description": "the trial's name (its output folder)",
                        "reference": "${trialSpec.Name}",
                    },
                ],
                "trialSpec": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "spec": {
                        "backoffLimit": 0,
                        "template": {
                            "metadata": {
                                "labels": {"tfpipe/run-id": "r"},
                                "annotations": {"sidecar.istio.io/inject": "false"},
                            },
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "training-container",
                                        "image": "example.com/trainer:1",
                                        "command": ["python", "-m", "trainer.task"],
                                        "args": [
                                            "--data-dir",
                                            "/mnt/tfpipe/runs/r/dataset",
                                            "--epochs",
                                            "2",
                                            "--batch-size",
                                            "32",
                                            "--job-dir",
                                            trial,
                                            "--learning-rate=${trialParameters.learningRate}",
                                            "--hidden-units=${trialParameters.hiddenUnits}",
                                            "--dropout=${trialParameters.dropout}",
                                        ],
                                        "env": [
                                            {
                                                "name": "CLOUD_ML_HP_METRIC_FILE",
                                                "value": "/var/log/katib/tfpipe/output.metrics",
                                            },
                                            {"name": "CLOUD_ML_HP_METRIC_TAG", "value": "val_accuracy"},
                                            {"name": "CLOUD_ML_TRIAL_ID", "value": "${trialParameters.trialName}"},
                                            {"name": "AIP_MODEL_DIR", "value": f"{trial}/model"},
                                            {"name": "AIP_CHECKPOINT_DIR", "value": f"{trial}/checkpoints"},
                                            {"name": "AIP_TENSORBOARD_LOG_DIR", "value": f"{trial}/logs"},
                                            {"name": "TF_USE_LEGACY_KERAS", "value": "1"},
                                            {"name": "PYTHONUNBUFFERED", "value": "1"},
                                        ],
                                        "securityContext": {
                                            "allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]},
                                        },
                                        "resources": {"requests": {"cpu": "2"}},
                                        "volumeMounts": [{"name": "tfpipe-data", "mountPath": "/mnt/tfpipe"}],
                                    }
                                ],
                                "securityContext": {
                                    "runAsNonRoot": True,
                                    "runAsUser": 1000,
                                    "runAsGroup": 1000,
                                    "fsGroup": 1000,
                                    "fsGroupChangePolicy": "OnRootMismatch",
                                    "seccompProfile": {"type": "RuntimeDefault"},
                                },
                                "volumes": [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": "tfpipe"}}],
                                "serviceAccountName": "trainer",
                            },
                        },
                    },
                },
            },
        },
    }


@pytest.mark.parametrize(
    "changes, algorithm, strategy",
    [
        ({"algorithm": "random"}, "random", "latest"),
        (
            {
                "algorithm": "grid",
                "parameters": [
                    {"type": "integer", "parameter_id": "hidden_units", "min": 32, "max": 64},
                    {"type": "categorical", "parameter_id": "activation", "values": ["relu", "gelu"]},
                ],
            },
            "grid",
            "latest",
        ),
        ({"measurement": "best"}, "bayesianoptimization", "max"),
        ({"measurement": "best", "goal": "minimize", "metric_id": "loss"}, "bayesianoptimization", "min"),
    ],
)
def test_algorithm_and_metric_strategy_mapping(changes, algorithm, strategy):
    spec = StudySpec.model_validate({**DEFAULT_STUDY.model_dump(), **changes})
    body = build(spec)["spec"]
    assert body["algorithm"] == {"algorithmName": algorithm}
    assert body["objective"]["metricStrategies"] == [{"name": spec.metric_id, "value": strategy}]
    assert body["objective"]["type"] == spec.goal
    if changes.get("algorithm") == "grid":
        assert body["parameters"] == [
            {
                "name": "hidden_units",
                "parameterType": "int",
                "feasibleSpace": {"min": "32", "max": "64", "distribution": "uniform"},
            },
            {"name": "activation", "parameterType": "categorical", "feasibleSpace": {"list": ["relu", "gelu"]}},
        ]


def test_the_trial_command_is_the_trainer_images_entrypoint():
    from dockerfile_parse import DockerfileParser

    dockerfile = DockerfileParser(str(Path(__file__).resolve().parents[3] / "containers" / "trainer.Dockerfile"))
    (entrypoint,) = [i["value"] for i in dockerfile.structure if i["instruction"] == "ENTRYPOINT"]
    trial = build()["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    assert trial["command"] == json.loads(entrypoint) == list(TRAINER_COMMAND)


@pytest.mark.parametrize("low", [0.0, -0.5])
def test_a_double_reaching_zero_is_refused_for_katibs_bayesian_optimization(low):
    spec = StudySpec(parameters=[{"type": "double", "parameter_id": "dropout", "min": low, "max": 0.5}])
    with pytest.raises(
        ValueError,
        match=r"dropout: Katib's bayesianoptimization \(scikit-optimize\) samples every double log-uniformly",
    ):
        search_space(spec)
    assert search_space(spec.model_copy(update={"algorithm": "random"}))[0]["feasibleSpace"]["min"] == str(low)


def test_reverse_log_has_no_katib_distribution():
    spec = StudySpec(
        parameters=[{"type": "double", "parameter_id": "momentum", "min": 0.5, "max": 0.99, "scale": "reverse_log"}]
    )
    with pytest.raises(ValueError, match="momentum: Katib has no reverse_log distribution"):
        search_space(spec)


def katib_json_collector(text: str, metrics: list[str]) -> list[tuple[str, str, str]]:
    """Katib's File metrics collector, JSON format (pkg/metricscollector/v1beta1/file-metricscollector,
    parseLogsInJsonFormat): every non-empty line must be a JSON object (else the whole file fails); a metric is
    taken only when its value is a string; `timestamp` is RFC 3339 or a float of epoch seconds."""
    found = []
    for line in text.split("\n"):
        if not line:
            continue
        record = json.loads(line)
        stamp = record.get("timestamp")
        assert isinstance(stamp, (str, float)), f"Katib cannot read the timestamp {stamp!r}"
        if isinstance(stamp, str):
            datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        for m in metrics:
            if isinstance(record.get(m), str):
                found.append((m, record[m], str(stamp)))
    return found


def test_hypertune_reports_are_what_katibs_json_file_collector_parses(tmp_path, monkeypatch):
    import hypertune

    path = tmp_path / "katib" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "tfpipe-tune-abc-x7k2")
    reporter = hypertune.HyperTune()
    for step, value in enumerate([0.61, 0.88, 0.93], start=1):
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="accuracy", metric_value=value, global_step=step
        )
        time.sleep(0.001)
    reports = katib_json_collector(path.read_text(), ["accuracy"])
    assert [(m, v) for m, v, _ in reports] == [("accuracy", "0.61"), ("accuracy", "0.88"), ("accuracy", "0.93")]
    assert os.path.dirname(METRICS_FILE) == "/var/log/katib/tfpipe"  # the collector's mounted folder


def test_succeeds_with_the_best_trials_values(api_server):
    api_server.scripts["experiments"] = [
        {"conditions": [CREATED]},
        {"conditions": [CREATED, RUNNING], "trials": 2, "trialsRunning": 2},
        {
            "conditions": [CREATED, RUNNING],
            "trials": 4,
            "trialsSucceeded": 3,
            "trialsRunning": 1,
            "currentOptimalTrial": OPTIMAL,
        },
        {
            "conditions": [CREATED, RUNNING, SUCCEEDED],
            "trials": 4,
            "trialsSucceeded": 4,
            "currentOptimalTrial": OPTIMAL,
        },
    ]
    lines = []
    best = run_experiment(
        kube.api_client(api_server.url), build(), DEFAULT_STUDY, poll_seconds=0, log=lines.append, sleep=lambda s: None
    )
    assert {k: best[k] for k in ("trial", "parameters", "metric")} == {
        "trial": "tfpipe-tune-abc-x7k2",
        "parameters": {"learning_rate": 0.0042, "hidden_units": 96, "dropout": 0.1},
        "metric": 0.93,
    }
    assert api_server.created("experiments") == [build()]
    assert lines[0] == "created Experiment ml/tfpipe-tune-abc: bayesianoptimization, up to 4 trials, 2 at a time"
    assert (
        "Experiment ml/tfpipe-tune-abc: 4 trial(s): 3 succeeded, 0 failed, 1 running; best tfpipe-tune-abc-x7k2: "
        "val_accuracy=0.93 {'learning_rate': 0.0042, 'hidden_units': 96, 'dropout': 0.1}" in lines
    )
    assert lines[-3:] == [
        "Experiment ml/tfpipe-tune-abc: Succeeded=True (ExperimentMaxTrialsReached): Experiment has "
        "succeeded because max trial count has reached",
        "Experiment ml/tfpipe-tune-abc: 4 trial(s): 4 succeeded, 0 failed, 0 running; best "
        "tfpipe-tune-abc-x7k2: val_accuracy=0.93 {'learning_rate': 0.0042, 'hidden_units': 96, "
        "'dropout': 0.1}",
        "deleted Experiment ml/tfpipe-tune-abc (and its trials)",
    ]
    assert [(r.path, r.body["propagationPolicy"]) for r in api_server.calls("DELETE")] == [
        (EXPERIMENT_PATH, "Foreground")
    ]


def test_a_study_minimizing_val_loss_asks_katib_for_the_trial_with_the_lowest(api_server):
    """`metric_id: val_loss, goal: minimize`: the Experiment minimizes val_loss, each trial reports val_loss
    (`CLOUD_ML_HP_METRIC_TAG`), and the best trial is Katib's lowest (`min` under `measurement: best`)."""
    spec = StudySpec.model_validate(
        {**DEFAULT_STUDY.model_dump(), "metric_id": "val_loss", "goal": "minimize", "measurement": "best"}
    )
    lowest = {
        **OPTIMAL,
        "observation": {"metrics": [{"name": "val_loss", "latest": "0.31", "max": "0.92", "min": "0.27"}]},
    }
    api_server.scripts["experiments"] = [
        {"conditions": [CREATED, RUNNING, SUCCEEDED], "trials": 4, "trialsSucceeded": 4, "currentOptimalTrial": lowest}
    ]
    lines: list[str] = []
    best = run_experiment(
        kube.api_client(api_server.url), build(spec), spec, poll_seconds=0, log=lines.append, sleep=lambda s: None
    )
    [created] = api_server.created("experiments")
    assert created["spec"]["objective"] == {
        "type": "minimize",
        "objectiveMetricName": "val_loss",
        "metricStrategies": [{"name": "val_loss", "value": "min"}],
    }
    [container] = created["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "CLOUD_ML_HP_METRIC_TAG", "value": "val_loss"} in container["env"]
    assert (best["trial"], best["metric"]) == ("tfpipe-tune-abc-x7k2", 0.27)
    assert lines[-2] == (
        "Experiment ml/tfpipe-tune-abc: 4 trial(s): 4 succeeded, 0 failed, 0 running; best tfpipe-tune-abc-x7k2: "
        "val_loss=0.27 {'learning_rate': 0.0042, 'hidden_units': 96, 'dropout': 0.1}"
    )


EXPERIMENT_PATH = "/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/tfpipe-tune-abc"
FAILED_TRIAL = {"conditions": [CREATED, RUNNING, FAILED], "trials": 1, "trialsFailed": 1, "failedTrialList": ["t-1"]}
KATIB_FAILED = (
    "Experiment ml/tfpipe-tune-abc failed: Experiment has failed because max failed count has reached (1 failed "
    "trial(s); max_failed_trial_count=1)"
)


def trial_pod(name: str, trial: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"batch.kubernetes.io/job-name": trial}},
        "spec": {"containers": [{"name": "training-container", "image": "example.com/trainer:1"}]},
    }


def test_a_failed_study_quotes_the_failed_trials_last_log_lines_then_deletes_the_experiment(api_server):
    api_server.scripts["experiments"] = [FAILED_TRIAL]
    api_server.pods += [trial_pod("t-0-aaaaa", "t-0"), trial_pod("t-1-bbbbb", "t-1")]
    api_server.logs.update({"t-0-aaaaa": "not this one\n", "t-1-bbbbb": "".join(f"line {i}\n" for i in range(1, 26))})
    api_server.faults = [("GET", 500, "/log")]
    lines, sleeps = [], []
    with pytest.raises(StudyFailed) as failed:
        run_experiment(
            kube.api_client(api_server.url),
            build(),
            DEFAULT_STUDY,
            poll_seconds=0,
            log=lines.append,
            sleep=sleeps.append,
        )
    assert str(failed.value) == KATIB_FAILED + "\ntrial t-1's last log lines (pod t-1-bbbbb):\n" + "".join(
        f"line {i}\n" for i in range(6, 26)
    )
    assert failed.value.trial_log["log"].startswith("line 1\nline 2\n")
    log_reads = [r for r in api_server.calls("GET", "pods") if r.path.endswith("/log")]
    assert [(r.path, r.query["container"], r.fault) for r in log_reads] == [
        ("/api/v1/namespaces/ml/pods/t-1-bbbbb/log", ["training-container"], 500),
        ("/api/v1/namespaces/ml/pods/t-1-bbbbb/log", ["training-container"], None),
    ]
    assert len(sleeps) == 1 and lines[-2:] == [
        f"Kubernetes API: HTTP 500 Internal Server Error; retrying in {sleeps[0]:.1f} s (1/7)",
        "deleted Experiment ml/tfpipe-tune-abc (and its trials)",
    ]
    assert [(r.path, r.body["propagationPolicy"]) for r in api_server.calls("DELETE")] == [
        (EXPERIMENT_PATH, "Foreground")
    ]


def test_a_failed_trial_whose_pod_is_gone_is_named_with_the_reason(api_server):
    api_server.scripts["experiments"] = [FAILED_TRIAL]
    with pytest.raises(StudyFailed) as failed:
        run_experiment(
            kube.api_client(api_server.url),
            build(),
            DEFAULT_STUDY,
            poll_seconds=0,
            log=lambda m: None,
            sleep=lambda s: None,
        )
    assert str(failed.value) == KATIB_FAILED + "\ntrial t-1 failed; its log could not be read: its pod is gone"


def test_keep_leaves_the_ended_experiment_and_says_how_to_delete_it(api_server):
    api_server.scripts["experiments"] = [{"conditions": [CREATED, SUCCEEDED], "currentOptimalTrial": OPTIMAL}]
    lines = []
    run_experiment(
        kube.api_client(api_server.url),
        build(),
        DEFAULT_STUDY,
        poll_seconds=0,
        log=lines.append,
        sleep=lambda s: None,
        keep=True,
    )
    assert lines[-1] == (
        "kept Experiment ml/tfpipe-tune-abc (platform.kubeflow.keep_experiment); delete it with kubectl delete "
        "experiment -n ml tfpipe-tune-abc"
    )
    assert api_server.calls("DELETE") == []


def test_a_refused_delete_warns_and_the_study_stands():
    rules = yaml.safe_load((Path(kube.__file__).parents[3] / "manifests/kubeflow/role.yaml").read_text())["rules"]
    rules[0] = {**rules[0], "verbs": [v for v in rules[0]["verbs"] if v != "delete"]}
    server = KubeAPI(installed=dict(EXPERIMENTS), rbac=rules)
    server.scripts["experiments"] = [{"conditions": [CREATED, SUCCEEDED], "currentOptimalTrial": OPTIMAL}]
    lines = []
    try:
        best = run_experiment(
            kube.api_client(server.url), build(), DEFAULT_STUDY, poll_seconds=0, log=lines.append, sleep=lambda s: None
        )
    finally:
        server.close()
    assert best["trial"] == "tfpipe-tune-abc-x7k2"
    assert lines[-1].startswith("warning: deleting Experiment ml/tfpipe-tune-abc failed: HTTP 403 Forbidden")
    assert lines[-1].endswith("; delete it with kubectl delete experiment -n ml tfpipe-tune-abc")


def test_best_trial_by_measurement():
    spec = StudySpec.model_validate({**DEFAULT_STUDY.model_dump(), "measurement": "best"})
    assert best_trial({"status": {"currentOptimalTrial": OPTIMAL}}, spec)["metric"] == 0.95
    assert best_trial({"status": {"currentOptimalTrial": {"bestTrialName": ""}}}, spec) is None


def test_failed_trials_fail_the_step_with_katibs_message(api_server):
    api_server.scripts["experiments"] = [{"conditions": [CREATED, RUNNING, FAILED], "trials": 1, "trialsFailed": 1}]
    with pytest.raises(
        StudyFailed,
        match=r"^Experiment ml/tfpipe-tune-abc failed: Experiment has failed because max "
        r"failed count has reached \(1 failed trial\(s\); max_failed_trial_count=1\)",
    ):
        run_experiment(
            kube.api_client(api_server.url),
            build(),
            DEFAULT_STUDY,
            poll_seconds=0,
            log=lambda m: None,
            sleep=lambda s: None,
        )


def test_success_without_a_reported_metric_fails(api_server):
    api_server.scripts["experiments"] = [{"conditions": [CREATED, SUCCEEDED], "trials": 4, "trialsSucceeded": 4}]
    with pytest.raises(StudyFailed, match="without a best trial: no trial reported 'val_accuracy'"):
        run_experiment(
            kube.api_client(api_server.url),
            build(),
            DEFAULT_STUDY,
            poll_seconds=0,
            log=lambda m: None,
            sleep=lambda s: None,
        )


def test_katib_missing_fails_at_once_naming_the_kind():
    server = KubeAPI(installed={"kubeflow.org/v1": {"tfjobs": "TFJob"}})
    try:
        with pytest.raises(
            kube.EngineMissing,
            match=r"^the cluster has no Experiment "
            r"\(experiments.kubeflow.org/v1beta1\): install Katib",
        ):
            run_experiment(kube.api_client(server.url), build(), DEFAULT_STUDY, poll_seconds=0, log=lambda m: None)
        assert not server.calls("POST")
    finally:
        server.close()


def test_a_cancelled_run_deletes_the_experiment(api_server):
    api_server.scripts["experiments"] = [{"conditions": [CREATED, RUNNING]}]
    api_server.on_get["experiments"] = lambda obj: (
        sent or (sent.append(1), threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start())
    )
    sent = []
    with pytest.raises(kube.Cancelled):
        run_experiment(kube.api_client(api_server.url), build(), DEFAULT_STUDY, poll_seconds=0.02, log=lambda m: None)
    assert [r.path for r in api_server.calls("DELETE")] == [
        "/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/tfpipe-tune-abc"
    ]


def test_tune_with_katib_stages_the_data_once_and_records_the_study(api_server, tmp_path):
    mount, data = tmp_path / "volume", tmp_path / "artifacts" / "dataset"
    data.mkdir(parents=True)
    (data / "stats.json").write_text("{}")
    api_server.scripts["experiments"] = [{"conditions": [SUCCEEDED], "currentOptimalTrial": OPTIMAL}]
    best = tune_with_katib(
        kube.api_client(api_server.url),
        str(data),
        str(tmp_path / "tuning"),
        spec=DEFAULT_STUDY,
        trial_epochs=2,
        hyperparameters={"batch_size": 16, "learning_rate": 0.003},
        workers=3,
        trainer=TrainerSetup("tests.helpers.custom_model:build_small_cnn", "mixed_bfloat16", {"conv_blocks": 2}),
        image="example.com/trainer:1",
        namespace="ml",
        service_account="",
        claim_name="tfpipe",
        mount_path=str(mount),
        resources={},
        run_id="tfpipe-training-x1",
        poll_seconds=0,
        log=lambda m: None,
        sleep=lambda s: None,
    )
    assert best["parameters"]["hidden_units"] == 96
    (created,) = api_server.created("experiments")
    assert created["metadata"]["name"] == kube.object_name("tfpipe-tune", "tfpipe-training-x1", "tune-hyperparameters")
    args = created["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["args"]
    run_dir = mount / "runs" / "tfpipe-training-x1"
    assert args[:14] == [
        "--data-dir",
        str(run_dir / "dataset"),
        "--model",
        "tests.helpers.custom_model:build_small_cnn",
        "--mixed-precision",
        "mixed_bfloat16",
        "--conv-blocks",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--batch-workers",  # a trial trains at the global batch of the final training's 3 workers
        "3",
    ]
    assert (run_dir / "dataset" / "stats.json").exists()
    record = json.loads((tmp_path / "tuning" / "trials.json").read_text())
    assert record["engine"] == "katib" and record["best"]["trial"] == "tfpipe-tune-abc-x7k2"
    # the training step of the same run finds the staged copy and does not copy again
    from components.lib.kube.volume import stage_dataset

    (run_dir / "dataset" / "marker").write_text("kept")
    assert stage_dataset(str(data), str(run_dir), str(mount)) == str(run_dir / "dataset")
    assert (run_dir / "dataset" / "marker").exists()


WARM_STUDY = SMALL_STUDY.model_copy(update={"warm_start": True})
TFJOBS = {"kubeflow.org/v1": {"tfjobs": "TFJob"}}
TFJOB_SUCCEEDED = {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "done"}


def finished_trial(folder: Path, best: bool = True) -> dict[str, bytes]:
    """What a finished trial leaves in its folder on the claim: its kept checkpoints (trainer.checkpoints) `last`
    and, unless `best` is False, `best` (the epoch-2 checkpoint of a trial at val_accuracy 0.95); `best`'s files."""
    files = {}
    for kept in ("last", "best") if best else ("last",):
        record = {"epoch": 2, "prefix": "epoch-0002", "metric": "val_accuracy", "goal": "maximize"}
        kept_files = {
            "epoch-0002.index": f"{folder.name} {kept} index".encode(),
            "epoch-0002.data-00000-of-00001": f"{folder.name} {kept} weights".encode(),
            "checkpoint.json": json.dumps({**record, "metrics": {"val_accuracy": 0.95}}).encode(),
        }
        (folder / "checkpoints" / kept).mkdir(parents=True)
        for name, content in kept_files.items():
            (folder / "checkpoints" / kept / name).write_bytes(content)
        files = kept_files
    return files


def files_in(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def katib_and_tfjobs(monkeypatch, tmp_path):
    """The double serving Experiments and TFJobs, the steps' clients pointed at it; Katib's and the training
    operator's parts played by the test (scripts and hooks)."""
    from tests.doubles.k8s import point_clients_at

    api = KubeAPI(installed={**EXPERIMENTS, **TFJOBS})
    point_clients_at(api, monkeypatch, tmp_path / "home")
    yield api
    api.close()


def test_a_warm_started_study_keeps_the_best_trials_checkpoint_which_the_training_starts_from(
    katib_and_tfjobs, tmp_path, capsys
):
    """`study.warm_start` on Katib: the study step moves the best trial's `checkpoints/best` to the run's folder on
    the claim before deleting the trials' folders, returns it with the best values, and the TFJob's replicas get
    `--warm-start-from` it; the training step releases it with the run's folder."""
    api, volume, data = katib_and_tfjobs, tmp_path / "volume", tmp_path / "artifacts" / "dataset"
    data.mkdir(parents=True)
    (data / "stats.json").write_text("{}")
    run_dir = volume / "runs" / "run-1"
    trials = run_dir / "tune-hyperparameters" / "trials"
    best_files = finished_trial(trials / OPTIMAL["bestTrialName"])
    finished_trial(trials / "tfpipe-tune-abc-q9z1")
    api.scripts["experiments"] = [{"conditions": [SUCCEEDED], "currentOptimalTrial": OPTIMAL}]

    hyperparameters, tuning = run_tune_on_katib(volume, data, tmp_path, study=WARM_STUDY)

    kept = run_dir / "tune-hyperparameters" / "best-checkpoint"
    assert hyperparameters == {
        "batch_size": 32,
        "learning_rate": 0.0042,
        "hidden_units": 96,
        "dropout": 0.1,
        "warm_start_from": str(kept),
    }
    assert files_in(kept) == best_files
    assert [p.name for p in (run_dir / "tune-hyperparameters").iterdir()] == ["best-checkpoint"]  # trials deleted
    assert (
        f"kept trial {OPTIMAL['bestTrialName']}'s best checkpoint for the training: {kept} (on the claim tfpipe)\n"
        in capsys.readouterr().out
    )
    assert json.loads((Path(tuning.path) / "trials.json").read_text())["warm_start_from"] == str(kept)

    seen = []

    def chief_starts_then_writes_its_outputs(obj):  # what the TFJob's chief finds and leaves on the claim
        seen.append(files_in(kept) == best_files)
        job_dir = run_dir / "train-model"
        (job_dir / "model").mkdir(parents=True, exist_ok=True)
        (job_dir / "model" / "saved_model.pb").write_text("pb")
        (job_dir / "metrics.json").write_text(
            json.dumps({"val_accuracy": 0.96, "val_loss": 0.2, "train_accuracy": 0.97, "train_loss": 0.1})
        )
        obj["status"] = {"conditions": [TFJOB_SUCCEEDED]}

    api.on_get["tfjobs"] = chief_starts_then_writes_its_outputs
    run_train_model_on_operator(volume, data, tmp_path, engine="tfjob", hyperparameters=hyperparameters)
    (job,) = api.created("tfjobs")
    chief = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    assert chief["args"] == [
        "--data-dir",
        str(run_dir / "dataset"),
        "--job-dir",
        str(run_dir / "train-model"),
        "--model",
        "trainer.model:build_model",
        "--batch-size",
        "32",
        "--learning-rate",
        "0.0042",
        "--hidden-units",
        "96",
        "--dropout",
        "0.1",
        "--warm-start-from",
        str(kept),
        "--epochs",
        "1",
    ]
    assert seen and all(seen)
    assert not run_dir.exists()  # the kept checkpoint left the claim with the run's folder


def test_a_best_trial_without_a_best_checkpoint_fails_a_warm_started_study_naming_both(katib_and_tfjobs, tmp_path):
    api, volume, data = katib_and_tfjobs, tmp_path / "volume", tmp_path / "artifacts" / "dataset"
    data.mkdir(parents=True)
    (data / "stats.json").write_text("{}")
    trial = volume / "runs" / "run-1" / "tune-hyperparameters" / "trials" / OPTIMAL["bestTrialName"]
    finished_trial(trial, best=False)
    api.scripts["experiments"] = [{"conditions": [SUCCEEDED], "currentOptimalTrial": OPTIMAL}]
    with pytest.raises(StudyFailed) as failed:
        run_tune_on_katib(volume, data, tmp_path, study=WARM_STUDY)
    assert str(failed.value) == (
        f"study.warm_start: the best trial {OPTIMAL['bestTrialName']} kept no best checkpoint: no checkpoint.json in "
        f"{trial}/checkpoints/best"
    )
    assert (trial / "checkpoints" / "last").is_dir()  # the trials' folders stay for a look


@pytest.fixture
def katib_cluster(monkeypatch, tmp_path):
    """Katib's double with the trainer as a process, the claim a folder."""
    from tests.doubles.k8s.kubelet import Claim, Kubelet

    volume = tmp_path / "volume"
    volume.mkdir()
    kubelet = Kubelet({"tfpipe": Claim(str(volume))}, {"tfpipe/trainer:dev": "trainer.Dockerfile"})
    api, operator = katib_api(kubelet, monkeypatch, tmp_path / "home")
    yield api, operator, volume
    api.close()


@pytest.mark.e2e
def test_the_component_runs_real_trials_that_katibs_webhooks_admit(katib_cluster, digits_data, tmp_path):
    api, operator, volume = katib_cluster
    seen: dict = {}  # the trial pods, as the step's polls could see them before the Experiment's deletion
    api.on_get["experiments"] = lambda obj: seen.update({p["metadata"]["name"]: p for p in api.pods})
    hyperparameters, tuning = run_tune_on_katib(volume, digits_data, tmp_path)
    status = json.loads((Path(tuning.path) / "trials.json").read_text())["status"]  # what the step read
    assert status["trialsSucceeded"] == 2 and operator.events == []
    best = status["currentOptimalTrial"]
    assert tuning.metadata["best_trial"] == best["bestTrialName"]
    assert hyperparameters["learning_rate"] == float(
        next(a["value"] for a in best["parameterAssignments"] if a["name"] == "learning_rate")
    )
    # each trial wrote to its own folder on the claim, named by ${trialSpec.Name}; the study removed them
    pods = list(seen.values())
    folders = {e["value"] for p in pods for e in p["spec"]["containers"][0]["env"] if e["name"] == "AIP_MODEL_DIR"}
    trials_dir = volume / "runs" / "run-1" / "tune-hyperparameters" / "trials"
    assert folders == {f"{trials_dir}/{t}/model" for t in status["succeededTrialList"]}
    assert not trials_dir.exists() and (volume / "runs" / "run-1" / "dataset").is_dir()  # the training reads it next
    # the Experiment deleted once read: its trials, their retained Jobs and pods went with it
    (deleted,) = api.calls("DELETE", "experiments")
    assert deleted.body["propagationPolicy"] == "Foreground"
    kube.poll(  # TimeoutError while any is left
        lambda: (api.pods, api.items("trials"), api.items("experiments")),
        lambda objects: None if any(objects) else "gone",
        0.05,
        30,
        "the Experiment's deletion",
    )
    pod = pods[0]["spec"]["containers"][0]
    assert pod["command"] == ["sh", "-c"] and pod["args"][0].startswith("python -m trainer.task --data-dir ")
    assert pod["args"][0].endswith(" && echo completed > /var/log/katib/tfpipe/$$$$.pid")


@pytest.mark.e2e
def test_the_training_after_a_warm_started_study_starts_from_its_best_real_trials_best_epoch(
    monkeypatch, digits_data, tmp_path
):
    """Real trainer trials on Katib's double, then a real TFJob on the training operator's, on one claim: the folder
    the study step returns holds the checkpoint the best trial kept, at the metric Katib read from that trial, and
    the TFJob's chief starts from it."""
    from tests.doubles.k8s import point_clients_at, shipped_rules
    from tests.doubles.k8s.katib import INJECTION
    from tests.doubles.k8s.katib_operator import KatibOperator
    from tests.doubles.k8s.kubelet import Claim, Kubelet
    from tests.doubles.k8s.training_operator import TrainingOperator
    from trainer import checkpoints

    volume = tmp_path / "volume"
    volume.mkdir()
    kubelet = Kubelet({"tfpipe": Claim(str(volume))}, {"tfpipe/trainer:dev": "trainer.Dockerfile"})
    api = KubeAPI(
        installed={**EXPERIMENTS, **TFJOBS},
        controllers=[KatibOperator(kubelet), TrainingOperator(kubelet)],
        namespaces={"ml": {INJECTION: "enabled"}},
        rbac=shipped_rules(),
    )
    point_clients_at(api, monkeypatch, tmp_path / "home")
    try:
        hyperparameters, tuning = run_tune_on_katib(volume, digits_data, tmp_path, study=WARM_STUDY)
        study_dir = volume / "runs" / "run-1" / "tune-hyperparameters"
        assert hyperparameters["warm_start_from"] == str(study_dir / "best-checkpoint")
        assert [p.name for p in study_dir.iterdir()] == ["best-checkpoint"]
        kept = checkpoints.read(hyperparameters["warm_start_from"])
        status = json.loads((Path(tuning.path) / "trials.json").read_text())["status"]
        (measured,) = status["currentOptimalTrial"]["observation"]["metrics"]
        assert kept is not None and (kept.epoch, kept.metric, kept.value) == (
            1,
            "val_accuracy",
            float(measured["latest"]),
        )
        run_train_model_on_operator(volume, digits_data, tmp_path, engine="tfjob", hyperparameters=hyperparameters)
    finally:
        api.close()
    (job,) = api.items("tfjobs")
    chief = api.logs[f"{job['metadata']['name']}-chief-0"]
    assert f"[trainer] warm start from {kept.path} (epoch 1: val_accuracy={kept.value})\n" in chief
    assert not (volume / "runs" / "run-1").exists()


@pytest.mark.e2e
def test_failing_trials_fail_the_component_with_katibs_message(katib_cluster, digits_data, tmp_path):
    api, operator, volume = katib_cluster
    with pytest.raises(
        StudyFailed, match=r"Experiment has failed because max failed count has reached \([12] failed trial"
    ) as failed:
        run_tune_on_katib(volume, digits_data, tmp_path, model="models.missing:build")
    assert f"\ntrial {failed.value.trial_log['trial']}'s last log lines (pod " in str(failed.value)
    assert "models.missing" in failed.value.trial_log["log"]


def test_trial_pods_without_a_command_are_refused_when_the_registry_cannot_be_read(katib_cluster, digits_data):
    """What the trials met before they named their command: every pod refused, the study waiting out its timeout."""
    api, operator, volume = katib_cluster
    body = experiment(
        "tfpipe-tune-nocommand",
        "ml",
        SMALL_STUDY,
        "tfpipe/trainer:dev",
        ["--data-dir", str(digits_data)],
        f"{volume}/trials",
        {},
        "tfpipe",
        str(volume),
    )
    del body["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"]
    with pytest.raises(TimeoutError):
        run_experiment(
            kube.api_client(api.url), body, SMALL_STUDY, poll_seconds=0.05, timeout_seconds=1, log=lambda m: None
        )
    assert len(operator.events) == 2 and all(
        "denied the request: Failed to get container image" in e for e in operator.events
    )
    assert api.pods == []


def test_bayesian_optimization_on_a_double_reaching_zero_never_starts_a_trial(katib_cluster):
    """What a study with such a double met on Katib before the compile-time refusal: the suggestion service fails
    every request and the experiment stays Created until the step's timeout."""
    api, operator, volume = katib_cluster
    spec = StudySpec(
        parameters=[{"type": "double", "parameter_id": "dropout", "min": 0.1, "max": 0.5}],
        max_trial_count=2,
        parallel_trial_count=2,
    )
    body = experiment(
        "tfpipe-tune-zero", "ml", spec, "tfpipe/trainer:dev", [], f"{volume}/trials", {}, "tfpipe", str(volume)
    )
    body["spec"]["parameters"][0]["feasibleSpace"]["min"] = "0"  # what search_space() now refuses
    with pytest.raises(TimeoutError):
        run_experiment(kube.api_client(api.url), body, spec, poll_seconds=0.05, timeout_seconds=1, log=lambda m: None)
    assert operator.events == [
        "Suggestion ml/tfpipe-tune-zero: ReconcileError: rpc error: code = Unknown desc = Exception calling "
        "application: search space should not contain 0 when using log-uniform prior"
    ]
    assert api.items("trials") == []


GRID = StudySpec(
    algorithm="grid",
    max_trial_count=8,
    parallel_trial_count=2,
    parameters=[
        {"type": "integer", "parameter_id": "hidden_units", "min": 32, "max": 35, "scale": "log"},
        {"type": "categorical", "parameter_id": "activation", "values": ["relu", "gelu"]},
    ],
)


def test_grid_with_more_trials_than_combinations_is_refused_naming_both():
    assert [p["name"] for p in search_space(GRID)] == ["hidden_units", "activation"]  # 4 x 2: the budget fits
    with pytest.raises(ValueError) as refused:
        search_space(GRID.model_copy(update={"max_trial_count": 9}))
    assert str(refused.value) == (
        "study: algorithm grid has 8 combinations (hidden_units 4 (integers 32 to 35 by Katib's step 1) x "
        "activation 2), fewer than max_trial_count=9, and Katib's grid refuses more trials than combinations; set "
        "max_trial_count <= 8, or platform.kubeflow.tuning: pod"
    )


def test_the_cli_refuses_a_grid_katib_would_refuse_in_one_line(tmp_path):
    from click.testing import CliRunner

    from pipelines.cli import cli

    config = tmp_path / "study.yaml"
    images = "".join(
        f"  {name}_image: registry.acme.test/tfpipe/{name}:1\n" for name in ("components", "trainer", "serving")
    )
    config.write_text(
        f"platform:\n{images}study:\n  algorithm: grid\n  max_trial_count: 12\n  parameters:\n"
        "    - {type: integer, parameter_id: hidden_units, min: 32, max: 41}\n"
    )
    result = CliRunner().invoke(
        cli, ["compile", "--target", "kubeflow", "--config", str(config), "--output", str(tmp_path / "k.yaml")]
    )
    assert (result.exit_code, result.output) == (
        1,
        "Error: platform.kubeflow.tuning is katib, but study: algorithm grid has 10 combinations (hidden_units 10 "
        "(integers 32 to 41 by Katib's step 1)), fewer than max_trial_count=12, and Katib's grid refuses more "
        "trials than combinations; set max_trial_count <= 10, or platform.kubeflow.tuning: pod\n",
    )


def test_katibs_grid_fails_the_experiment_when_trials_outnumber_combinations(katib_cluster):
    """What such a study met on Katib before the compile-time refusal: the grid's settings check fails the
    Suggestion, the experiment fails with Katib's message, no trial runs."""
    api, operator, volume = katib_cluster
    body = experiment(
        "tfpipe-tune-grid", "ml", GRID, "tfpipe/trainer:dev", [], f"{volume}/trials", {}, "tfpipe", str(volume)
    )
    body["spec"]["maxTrialCount"] = 9  # what search_space() now refuses
    with pytest.raises(StudyFailed) as failed:
        run_experiment(kube.api_client(api.url), body, GRID, poll_seconds=0, log=lambda m: None, sleep=lambda s: None)
    assert str(failed.value) == (
        "Experiment ml/tfpipe-tune-grid failed: Suggestion has failed (0 failed trial(s); max_failed_trial_count=1)"
    )
    assert operator.events == [
        "Suggestion ml/tfpipe-tune-grid: SuggestionFailed: Validation failed: ValidateAlgorithmSettings Error: Max "
        "Trial Count: 9 > all possible search combinations: 8"
    ]
    assert api.items("trials") == []


def test_katibs_bayesian_optimization_draws_log_scaled_integers_uniformly(katib_cluster):
    """Katib's scikit-optimize service builds every int as Integer(min, max): uniform, whatever the distribution.
    200 seeded trials of 1..1000: about half above 500 (log-uniform would put a tenth there)."""
    api, operator, volume = katib_cluster
    spec = StudySpec(
        parameters=[{"type": "integer", "parameter_id": "hidden_units", "min": 1, "max": 1000, "scale": "log"}],
        max_trial_count=200,
        parallel_trial_count=200,
    )
    body = experiment(
        "tfpipe-tune-bo", "ml", spec, "tfpipe/trainer:dev", [], f"{volume}/trials", {}, "tfpipe", str(volume)
    )
    assert body["spec"]["parameters"][0]["feasibleSpace"]["distribution"] == "logUniform"
    # no command: the webhook refuses every trial pod, so the trials exist without running the trainer
    del body["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"]
    kube.custom(kube.api_client(api.url)).create_namespaced_custom_object(
        "kubeflow.org", "v1beta1", "ml", "experiments", body
    )
    values = [int(t["spec"]["parameterAssignments"][0]["value"]) for t in api.items("trials")]
    assert len(values) == 200 and all(1 <= v <= 1000 for v in values)
    assert 80 <= sum(v > 500 for v in values) <= 120


def test_the_step_warns_of_log_scaled_integers_under_bayesian_optimization(api_server):
    api_server.scripts["experiments"] = [
        {"conditions": [CREATED, SUCCEEDED], "trials": 4, "trialsSucceeded": 4, "currentOptimalTrial": OPTIMAL}
    ]
    lines = []
    run_experiment(
        kube.api_client(api_server.url), build(), DEFAULT_STUDY, poll_seconds=0, log=lines.append, sleep=lambda s: None
    )
    assert lines[:2] == [
        "created Experiment ml/tfpipe-tune-abc: bayesianoptimization, up to 4 trials, 2 at a time",
        "warning: study parameter hidden_units: Katib's bayesianoptimization (scikit-optimize) searches integers "
        "uniformly from 32 to 256, not on the log scale the study asks (Vertex does); for a log search use "
        "algorithm random, or a discrete parameter of log-spaced values",
    ]
    random = StudySpec.model_validate({**DEFAULT_STUDY.model_dump(), "algorithm": "random"})
    assert log_scale_warnings(random) == []


FAILING_TRIAL = ["python", "-m", "tests.helpers.failing_trial"]
TRIAL_LINES = "".join(f"trial line {i}\n" for i in range(1, 31))


def ended(api, name: str) -> dict:
    """The Experiment once Katib's double has ended it (polled without waiting longer than needed)."""
    return kube.poll(
        lambda: api.get("experiments", name, "ml"),
        lambda obj: obj if kube.condition(obj, "Failed") or kube.condition(obj, "Succeeded") else None,
        0.05,
        60,
        name,
    )


@pytest.mark.parametrize("retain", [False, True])
def test_katib_deletes_each_finished_trials_job_and_log_unless_the_template_retains_it(katib_cluster, retain):
    api, operator, volume = katib_cluster
    body = experiment("tfpipe-tune-jobs", "ml", SMALL_STUDY, "tfpipe/trainer:dev", [], f"{volume}/t", {}, "", "")
    body["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["command"] = FAILING_TRIAL
    body["spec"]["trialTemplate"]["retain"] = retain
    kube.custom(kube.api_client(api.url)).create_namespaced_custom_object(
        "kubeflow.org", "v1beta1", "ml", "experiments", body
    )
    status = ended(api, "tfpipe-tune-jobs")["status"]
    failed = status["failedTrialList"]  # one or both: the study fails at the first
    assert failed and failed == sorted(failed)
    pods = {p["metadata"]["labels"]["batch.kubernetes.io/job-name"]: p["metadata"]["name"] for p in api.pods}
    if retain:
        assert all(api.logs[pods[trial]] == TRIAL_LINES for trial in failed)
    else:
        assert not set(failed) & set(pods) and set(api.logs) <= set(pods.values())


def test_a_failed_study_on_katib_saves_the_trials_log_and_deletes_the_experiment(katib_cluster, tmp_path, monkeypatch):
    from components import tune_on_katib

    api, operator, volume = katib_cluster
    monkeypatch.setattr(tune_on_katib, "TRAINER_COMMAND", FAILING_TRIAL)
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "stats.json").write_text("{}")
    lines = []
    with pytest.raises(StudyFailed) as failed:
        tune_with_katib(
            kube.api_client(api.url),
            str(data),
            str(tmp_path / "tuning"),
            spec=SMALL_STUDY,
            trial_epochs=1,
            hyperparameters={"batch_size": 16, "learning_rate": 0.003},
            workers=1,
            trainer=TrainerSetup(),
            image="tfpipe/trainer:dev",
            namespace="ml",
            service_account="",
            claim_name="tfpipe",
            mount_path=str(volume),
            resources={},
            run_id="run-9",
            poll_seconds=0.05,
            log=lines.append,
            sleep=lambda s: None,
        )
    name = kube.object_name("tfpipe-tune", "run-9", "tune-hyperparameters")
    trial, pod = failed.value.trial_log["trial"], failed.value.trial_log["pod"]
    assert pod.startswith(f"{trial}-") and trial.startswith(f"{name}-")
    katib_message, quoted = str(failed.value).split("\n", 1)
    assert re.fullmatch(
        rf"Experiment ml/{name} failed: Experiment has failed because max failed count has reached \([12] failed "
        r"trial\(s\); max_failed_trial_count=1\)",
        katib_message,
    )
    assert quoted == f"trial {trial}'s last log lines (pod {pod}):\n" + "".join(
        f"trial line {i}\n" for i in range(11, 31)
    )
    saved = volume / "runs" / "run-9" / "tune-hyperparameters" / f"{trial}.log"
    assert saved.read_text() == TRIAL_LINES
    assert lines[-2:] == [
        f"deleted Experiment ml/{name} (and its trials)",
        f"trial {trial}'s whole log: {saved} (on the claim tfpipe)",
    ]
    assert [(r.path, r.body["propagationPolicy"]) for r in api.calls("DELETE")] == [
        (f"/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/{name}", "Foreground")
    ]


# Katib's double behind an API server that fails two requests in five (429 with Retry-After, 500, 503, a connection
# reset before or lost after the request is handled), in a namespace that enforces Pod Security's restricted profile.
# First, in every run: the discovery request reset four times (urllib3's own three retries spent: MaxRetryError),
# then the Experiment's create handled but its answer lost (the step's retry meets 409 and adopts the Experiment).
FIRST_FAULTS = [*[("GET", "reset", "/apis/kubeflow.org/v1beta1")] * 4, ("POST", "lost", "/experiments")]
FAULT_SEEDS = range(4)
STAND_IN_TRIAL = ["python", "-m", "tests.helpers.stand_in_trainer", "--sleep", "0"]
RETRY = r"; retrying in \d+\.\d s \([1-7]/7\)"
RETRY_LINE = re.compile(rf"Kubernetes API: (HTTP (429|500|503) [A-Za-z ]+|connection lost \([A-Za-z]+\)){RETRY}")
FIRST_RETRIES = [
    rf"Kubernetes API: connection lost \(RemoteDisconnected\){RETRY}",  # the discovery's MaxRetryError
    rf"Kubernetes API: connection lost \(RemoteDisconnected\){RETRY}",  # the create's lost answer
]


@pytest.fixture(params=FAULT_SEEDS, ids=lambda seed: f"seed{seed}")
def failing_katib_cluster(request, monkeypatch, tmp_path):
    """`katib_cluster` with FIRST_FAULTS and then faults drawn from the seed, in a restricted namespace; a function
    that cuts the step's waits to at most 50 ms."""
    from tests.doubles.k8s.admission import ENFORCE
    from tests.doubles.k8s.kubelet import Claim, Kubelet

    volume = tmp_path / "volume"
    volume.mkdir()
    kubelet = Kubelet({"tfpipe": Claim(str(volume))}, {"tfpipe/trainer:dev": "trainer.Dockerfile"})
    api, operator = katib_api(
        kubelet,
        monkeypatch,
        tmp_path / "home",
        {ENFORCE: "restricted"},
        faults=list(FIRST_FAULTS),
        fault_rate=0.4,
        fault_seed=request.param,
        retry_after=0,
    )
    yield api, operator, volume, lambda s: time.sleep(min(s, 0.05))
    api.close()


def retries(lines: list[str]) -> list[str]:
    """The step's retry lines, checked: the first ones FIRST_FAULTS cause, each saying what failed and the wait."""
    found = [line for line in lines if line.startswith("Kubernetes API: ")]
    assert [line for line in found if not RETRY_LINE.fullmatch(line)] == []
    assert all(re.fullmatch(pattern, line) for pattern, line in zip(FIRST_RETRIES, found, strict=False))
    assert len(found) >= len(FIRST_RETRIES)
    return found


def tune(api, volume, data, tuning, run_id: str, lines: list, sleep) -> dict:
    return tune_with_katib(
        kube.api_client(api.url),
        str(data),
        str(tuning),
        spec=SMALL_STUDY,
        trial_epochs=1,
        hyperparameters={"batch_size": 16, "learning_rate": 0.003},
        workers=1,
        trainer=TrainerSetup(),
        image="tfpipe/trainer:dev",
        namespace="ml",
        service_account="",
        claim_name="tfpipe",
        mount_path=str(volume),
        resources={},
        run_id=run_id,
        poll_seconds=0.05,
        timeout_seconds=60,
        log=lines.append,
        sleep=sleep,
    )


def a_dataset(tmp_path) -> Path:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "stats.json").write_text("{}")
    return data


def step_lines(lines: list[str], name: str) -> list[str]:
    """The step's own lines: not its retries, nor the Experiment's progress (which depends on when it polled)."""
    return [line for line in lines if not line.startswith(("Kubernetes API: ", f"Experiment ml/{name}: "))]


def test_a_study_succeeds_on_katib_through_failing_requests_in_a_restricted_namespace(
    failing_katib_cluster, tmp_path, monkeypatch
):
    from components import tune_on_katib

    api, operator, volume, sleep = failing_katib_cluster
    monkeypatch.setattr(tune_on_katib, "TRAINER_COMMAND", STAND_IN_TRIAL)
    lines: list[str] = []
    best = tune(api, volume, a_dataset(tmp_path), tmp_path / "tuning", "run-7", lines, sleep)
    name = kube.object_name("tfpipe-tune", "run-7", "tune-hyperparameters")
    assert best["trial"].startswith(f"{name}-") and best["status"]["trialsSucceeded"] == 2
    assert operator.events == []  # every trial pod admitted
    assert json.loads((tmp_path / "tuning" / "trials.json").read_text())["best"]["trial"] == best["trial"]
    retries(lines)
    assert step_lines(lines, name) == [
        f"Experiment ml/{name} exists already (a retry of this step): following it",
        f"created Experiment ml/{name}: bayesianoptimization, up to 2 trials, 2 at a time",
        "warning: study parameter hidden_units: Katib's bayesianoptimization (scikit-optimize) searches integers "
        "uniformly from 32 to 256, not on the log scale the study asks (Vertex does); for a log search use "
        "algorithm random, or a discrete parameter of log-spaced values",
        f"deleted Experiment ml/{name} (and its trials)",
    ]
    # one Experiment, created once, deleted (a retried delete meets 404: gone already)
    assert [key[3] for key in api.objects if key[2] == "experiments"] in ([], [name])
    assert {(r.method, r.path) for r in api.requests if r.method in ("POST", "DELETE")} == {
        ("POST", "/apis/kubeflow.org/v1beta1/namespaces/ml/experiments"),
        ("DELETE", f"/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/{name}"),
    }


def test_a_failed_study_on_katib_quotes_its_trials_log_through_failing_requests_in_a_restricted_namespace(
    failing_katib_cluster, tmp_path, monkeypatch
):
    from components import tune_on_katib

    api, operator, volume, sleep = failing_katib_cluster
    monkeypatch.setattr(tune_on_katib, "TRAINER_COMMAND", FAILING_TRIAL)
    lines: list[str] = []
    with pytest.raises(StudyFailed) as failed:
        tune(api, volume, a_dataset(tmp_path), tmp_path / "tuning", "run-9", lines, sleep)
    name = kube.object_name("tfpipe-tune", "run-9", "tune-hyperparameters")
    trial, pod = failed.value.trial_log["trial"], failed.value.trial_log["pod"]
    assert (failed.value.trial_log["error"], pod.startswith(f"{trial}-")) == ("", True)
    assert str(failed.value).split("\n", 1)[1] == f"trial {trial}'s last log lines (pod {pod}):\n" + "".join(
        f"trial line {i}\n" for i in range(11, 31)
    )
    saved = volume / "runs" / "run-9" / "tune-hyperparameters" / f"{trial}.log"
    assert saved.read_text() == TRIAL_LINES
    retries(lines)
    assert step_lines(lines, name)[-2:] == [
        f"deleted Experiment ml/{name} (and its trials)",
        f"trial {trial}'s whole log: {saved} (on the claim tfpipe)",
    ]
    assert {r.path for r in api.calls("DELETE")} == {f"/apis/kubeflow.org/v1beta1/namespaces/ml/experiments/{name}"}


def test_a_grid_katib_refuses_fails_the_study_with_katibs_message_through_failing_requests(failing_katib_cluster):
    api, operator, volume, sleep = failing_katib_cluster
    body = experiment(
        "tfpipe-tune-grid", "ml", GRID, "tfpipe/trainer:dev", [], f"{volume}/trials", {}, "tfpipe", str(volume)
    )
    body["spec"]["maxTrialCount"] = 9  # what search_space() refuses
    lines: list[str] = []
    with pytest.raises(StudyFailed) as failed:
        run_experiment(kube.api_client(api.url), body, GRID, poll_seconds=0.05, log=lines.append, sleep=sleep)
    assert str(failed.value) == (
        "Experiment ml/tfpipe-tune-grid failed: Suggestion has failed (0 failed trial(s); max_failed_trial_count=1)"
    )
    assert operator.events == [
        "Suggestion ml/tfpipe-tune-grid: SuggestionFailed: Validation failed: ValidateAlgorithmSettings Error: Max "
        "Trial Count: 9 > all possible search combinations: 8"
    ]
    assert api.items("trials") == []
    retries(lines)
    assert step_lines(lines, "tfpipe-tune-grid") == [
        "Experiment ml/tfpipe-tune-grid exists already (a retry of this step): following it",
        "created Experiment ml/tfpipe-tune-grid: grid, up to 8 trials, 2 at a time",  # the spec's count, not the body's
        "deleted Experiment ml/tfpipe-tune-grid (and its trials)",
    ]
