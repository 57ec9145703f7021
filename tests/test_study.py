"""Study definition, hypertune metric files and the Vertex best-trial reader."""
import json

import hypertune
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.types import hyperparameter_tuning_job, study
from google.protobuf import struct_pb2
from pydantic import ValidationError

from components.best_trial import NoFeasibleTrial, best_trial, fetch_best_trial, read_best_trial
from components.hypertune_metrics import read_reports, trial_metric
from components.study_spec import DEFAULT_STUDY, StudySpec


def spec(**overrides):
    base = {"parameters": [{"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 0.1,
                            "scale": "log"}]}
    return StudySpec.model_validate({**base, **overrides})


@pytest.mark.parametrize("overrides, message", [
    ({"parameters": [{"type": "double", "parameter_id": "lr", "min": 1, "max": 1}]}, r"lr: min \(1.0\) must be < max"),
    ({"parameters": [{"type": "integer", "parameter_id": "units", "min": 0, "max": 9, "scale": "log"}]},
     "units: log scale needs min > 0"),
    ({"parameters": [{"type": "categorical", "parameter_id": "act", "values": []}]},
     "act: categories must be non-empty"),
    ({"parameters": [{"type": "discrete", "parameter_id": "drop", "values": [0.1, 0.1]}]},
     "drop: discrete values must be non-empty and distinct"),
    ({"parallel_trial_count": 5, "max_trial_count": 4}, r"parallel_trial_count \(5\) must be <= max_trial_count \(4\)"),
    ({"goal": "maximise"}, "Input should be 'maximize' or 'minimize'"),
    ({"algorithm": "bayes"}, "Input should be 'default', 'grid' or 'random'"),
    ({"parameters": []}, "at least 1 item"),
])
def test_search_space_validation(overrides, message):
    with pytest.raises(ValidationError, match=message):
        spec(**overrides)


def test_vertex_serialization_of_every_parameter_kind():
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import serialize_metrics, serialize_parameters

    s = spec(parameters=[
        {"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 0.1, "scale": "log"},
        {"type": "integer", "parameter_id": "hidden_units", "min": 16, "max": 256, "scale": "linear"},
        {"type": "categorical", "parameter_id": "optimizer", "values": ["adam", "sgd"]},
        {"type": "discrete", "parameter_id": "dropout", "values": [0.3, 0.0, 0.1]},
    ], goal="minimize", metric_id="loss")
    params = {p["parameter_id"]: p for p in serialize_parameters(s.vertex_parameters())}
    assert params["learning_rate"]["double_value_spec"] == {"min_value": 1e-4, "max_value": 0.1}
    assert params["learning_rate"]["scale_type"] == study.StudySpec.ParameterSpec.ScaleType.UNIT_LOG_SCALE
    assert params["hidden_units"]["integer_value_spec"] == {"min_value": "16", "max_value": "256"}
    assert params["optimizer"]["categorical_value_spec"] == {"values": ["adam", "sgd"]}
    assert params["dropout"]["discrete_value_spec"] == {"values": [0.0, 0.1, 0.3]}
    assert serialize_metrics(s.vertex_metrics()) == [{"metric_id": "loss", "goal": study.StudySpec.MetricSpec.GoalType.MINIMIZE}]
    assert spec().vertex_algorithm() is None and spec(algorithm="grid").vertex_algorithm() == "GRID_SEARCH"
    assert [p.parameter_id for p in DEFAULT_STUDY.parameters] == ["learning_rate", "hidden_units", "dropout"]


def test_metric_file_written_by_the_real_hypertune_library(tmp_path, monkeypatch):
    path = tmp_path / "trial-3" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "3")
    reporter = hypertune.HyperTune()
    for step, value in enumerate([0.5, 0.9, 0.7], start=1):
        reporter.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=value,
                                                     global_step=step)
    first = json.loads(path.read_text().splitlines()[0])
    assert first["accuracy"] == "0.5" and first["trial"] == "3" and first["global_step"] == "1"  # strings
    assert read_reports(str(path), "accuracy") == [(1, 0.5), (2, 0.9), (3, 0.7)]
    assert trial_metric(str(path), "accuracy") == 0.7
    assert trial_metric(str(path), "accuracy", "best") == 0.9
    assert trial_metric(str(path), "accuracy", "best", goal="minimize") == 0.5
    assert trial_metric(str(path), "loss") is None and trial_metric(str(tmp_path / "none"), "accuracy") is None


def test_metric_file_keeps_the_last_100_reports(tmp_path, monkeypatch):
    path = tmp_path / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    reporter = hypertune.HyperTune()
    for step in range(1, 131):
        reporter.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=step / 1000,
                                                     global_step=step)
    reports = read_reports(str(path), "accuracy")
    assert len(reports) == 100 and reports[0] == (31, 0.031) and trial_metric(str(path), "accuracy") == 0.13


def trial(trial_id, state, value=None, infeasible="", lr=0.01, units=64):
    t = study.Trial(id=trial_id, state=state, infeasible_reason=infeasible, parameters=[
        study.Trial.Parameter(parameter_id="learning_rate", value=struct_pb2.Value(number_value=lr)),
        study.Trial.Parameter(parameter_id="hidden_units", value=struct_pb2.Value(number_value=units))])
    if value is not None:
        t.final_measurement = study.Measurement(metrics=[study.Measurement.Metric(metric_id="accuracy", value=value)])
    return t


TRIALS = [
    trial("1", study.Trial.State.SUCCEEDED, 0.91, lr=0.001),
    trial("2", study.Trial.State.INFEASIBLE, 0.99, infeasible="worker exited 1"),
    trial("3", study.Trial.State.SUCCEEDED, 0.97, infeasible="diverged"),
    trial("4", study.Trial.State.SUCCEEDED, 0.95, lr=0.003, units=128),
    trial("5", study.Trial.State.SUCCEEDED, 0.80, lr=0.02),
    trial("6", study.Trial.State.STOPPING),
]


def test_best_trial_by_goal_ignoring_failed_and_infeasible():
    assert best_trial(TRIALS, "accuracy", "maximize") == {
        "trial_id": "4", "metric": pytest.approx(0.95), "parameters": {"learning_rate": 0.003, "hidden_units": 128.0}}
    assert best_trial(TRIALS, "accuracy", "minimize")["trial_id"] == "5"
    with pytest.raises(NoFeasibleTrial, match="no succeeded, feasible trial reported 'loss' \\(of 6 trials\\)"):
        best_trial(TRIALS, "loss", "maximize")


def test_read_best_trial_fetches_the_job_named_in_gcp_resources(monkeypatch):
    from google.cloud import aiplatform_v1

    name = "projects/p1/locations/europe-west4/hyperparameterTuningJobs/987"
    gcp_resources = json.dumps({"resources": [{"resourceType": "HyperparameterTuningJob",
                                               "resourceUri": f"https://europe-west4-aiplatform.googleapis.com/v1/{name}"}]})
    calls = []

    def get_job(self, request=None, *, name=None, **kwargs):
        calls.append({"name": name, "request": request, "endpoint": self._client_options.api_endpoint})
        return hyperparameter_tuning_job.HyperparameterTuningJob(name=name, trials=TRIALS)

    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "p1"))
    monkeypatch.setattr(aiplatform_v1.JobServiceClient, "get_hyperparameter_tuning_job", get_job)
    outputs = read_best_trial(gcp_resources, "accuracy", "maximize")
    assert calls == [{"name": name, "request": None, "endpoint": "europe-west4-aiplatform.googleapis.com"}]
    assert outputs.best_trial_id == "4" and outputs.best_metric == pytest.approx(0.95)
    assert outputs.best_parameters == {"learning_rate": 0.003, "hidden_units": 128.0}
    assert fetch_best_trial(gcp_resources, "accuracy", "minimize")["trials"] == 6
    with pytest.raises(ValueError, match="not a hyperparameter tuning job resource"):
        fetch_best_trial(json.dumps({"resources": [{"resourceUri": "https://x/v1/projects/p/customJobs/1"}]}),
                         "accuracy", "maximize")
