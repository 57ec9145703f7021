"""Study definition, hypertune metric files and the Vertex best-trial reader."""

import json
import subprocess
import sys

import hypertune
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.types import hyperparameter_tuning_job, study
from google.protobuf import json_format, struct_pb2
from pydantic import ValidationError

from components.lib.study.hypertune_metrics import read_reports, trial_metric
from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from components.read_best_trial import NoFeasibleTrial, best_trial, fetch_best_trial, read_best_trial


def spec(**overrides):
    base = {
        "parameters": [{"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 0.1, "scale": "log"}]
    }
    return StudySpec.model_validate({**base, **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"parameters": [{"type": "double", "parameter_id": "lr", "min": 1, "max": 1}]},
            r"lr: min \(1.0\) must be < max",
        ),
        (
            {"parameters": [{"type": "integer", "parameter_id": "units", "min": 0, "max": 9, "scale": "log"}]},
            "units: log scale needs min > 0",
        ),
        (
            {"parameters": [{"type": "categorical", "parameter_id": "act", "values": []}]},
            "act: categories must be non-empty",
        ),
        (
            {"parameters": [{"type": "discrete", "parameter_id": "drop", "values": [0.1, 0.1]}]},
            "drop: discrete values must be non-empty and distinct",
        ),
        (
            {"parallel_trial_count": 5, "max_trial_count": 4},
            r"parallel_trial_count \(5\) must be <= max_trial_count \(4\)",
        ),
        ({"goal": "maximise"}, "Input should be 'maximize' or 'minimize'"),
        ({"algorithm": "bayes"}, "Input should be 'default', 'grid' or 'random'"),
        ({"parameters": []}, "at least 1 item"),
        # one meaning of max_failed_trial_count on every target: 0 means "Vertex decides" there, nothing locally
        (
            {"max_failed_trial_count": 0},
            r"must be at least 1 \(the study fails once this many trials have failed\), "
            r"got 0; 0 \(Vertex decides\) has no self-hosted equivalent",
        ),
        ({"max_failed_trial_count": -2}, "must be at least 1 .*got -2"),
        # Vertex's GRID_SEARCH takes INTEGER, CATEGORICAL and DISCRETE parameters only
        (
            {
                "algorithm": "grid",
                "parameters": [
                    {"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 0.1},
                    {"type": "integer", "parameter_id": "units", "min": 8, "max": 16},
                    {"type": "double", "parameter_id": "decay", "min": 0.1, "max": 0.9},
                ],
            },
            r"algorithm grid takes integer, categorical and discrete parameters only \(Vertex's GRID_SEARCH refuses "
            r"double ranges\); double: learning_rate, decay \(list their values as type: discrete\)",
        ),
    ],
)
def test_search_space_validation(overrides, message):
    with pytest.raises(ValidationError, match=message):
        spec(**overrides)


def test_vertex_serialization_of_every_parameter_kind():
    s = spec(
        parameters=[
            {"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 0.1, "scale": "log"},
            {"type": "integer", "parameter_id": "hidden_units", "min": 16, "max": 256, "scale": "linear"},
            {"type": "categorical", "parameter_id": "optimizer", "values": ["adam", "sgd"]},
            {"type": "discrete", "parameter_id": "dropout", "values": [0.3, 0.0, 0.1]},
        ],
        goal="minimize",
        metric_id="loss",
    )
    params = {p["parameter_id"]: p for p in s.study_spec_parameters()}
    assert params["learning_rate"]["double_value_spec"] == {"min_value": 1e-4, "max_value": 0.1}
    assert params["learning_rate"]["scale_type"] == "UNIT_LOG_SCALE"
    assert params["hidden_units"]["integer_value_spec"] == {"min_value": "16", "max_value": "256"}
    assert params["optimizer"]["categorical_value_spec"] == {"values": ["adam", "sgd"]}
    assert params["dropout"]["discrete_value_spec"] == {"values": [0.0, 0.1, 0.3]}
    assert s.study_spec_metrics() == [{"metric_id": "loss", "goal": "MINIMIZE"}]
    assert spec().vertex_algorithm() is None and spec(algorithm="random").vertex_algorithm() == "RANDOM_SEARCH"
    assert [p.parameter_id for p in DEFAULT_STUDY.parameters] == ["learning_rate", "hidden_units", "dropout"]


def test_failure_limit_default_and_grid_over_a_finite_space():
    assert spec().max_failed_trial_count == 1 and DEFAULT_STUDY.max_failed_trial_count == 1
    grid = spec(
        algorithm="grid",
        parameters=[
            {"type": "integer", "parameter_id": "units", "min": 8, "max": 16, "scale": "log"},
            {"type": "categorical", "parameter_id": "optimizer", "values": ["adam", "sgd"]},
            {"type": "discrete", "parameter_id": "learning_rate", "values": [0.01, 0.001]},
        ],
    )
    assert grid.vertex_algorithm() == "GRID_SEARCH"


EVERY_KIND = [
    {"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 0.1, "scale": "log"},
    {"type": "integer", "parameter_id": "hidden_units", "min": 16, "max": 256, "scale": "reverse_log"},
    {"type": "categorical", "parameter_id": "optimizer", "values": ["adam", "sgd"]},
    {"type": "discrete", "parameter_id": "dropout", "values": [0.3, 0.0, 0.1]},
    {"type": "double", "parameter_id": "momentum", "min": 0.0, "max": 0.9},
]


def _enum_values(value, descriptor):
    """(field path, value) of every enum field in `value`, a JSON dict of the message `descriptor`."""
    found = []
    for name, item in value.items():
        field = descriptor.fields_by_name[name]
        for element in item if isinstance(item, list) else [item]:
            if field.enum_type is not None:
                found.append((f"{descriptor.name}.{name}", element))
            elif field.message_type is not None:
                found += _enum_values(element, field.message_type)
    return found


def test_study_spec_lists_name_enums_and_parse_into_the_vertex_study_spec():
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob

    s = spec(parameters=EVERY_KIND, goal="minimize", metric_id="loss")
    metrics, parameters = s.study_spec_metrics(), s.study_spec_parameters()
    assert metrics == [{"metric_id": "loss", "goal": "MINIMIZE"}]
    assert parameters == [
        {
            "parameter_id": "learning_rate",
            "double_value_spec": {"min_value": 1e-4, "max_value": 0.1},
            "scale_type": "UNIT_LOG_SCALE",
        },
        {
            "parameter_id": "hidden_units",
            "integer_value_spec": {"min_value": "16", "max_value": "256"},
            "scale_type": "UNIT_REVERSE_LOG_SCALE",
        },
        {"parameter_id": "optimizer", "categorical_value_spec": {"values": ["adam", "sgd"]}},
        {
            "parameter_id": "dropout",
            "discrete_value_spec": {"values": [0.0, 0.1, 0.3]},
            "scale_type": "UNIT_LINEAR_SCALE",
        },
        # proto3 JSON leaves out zeros: min_value 0.0 is the field's default
        {"parameter_id": "momentum", "double_value_spec": {"max_value": 0.9}, "scale_type": "UNIT_LINEAR_SCALE"},
    ]
    # every enum is a name, never a number (GCPC's serialize_* helpers give integers: "goal": 1)
    enums = _enum_values(metrics[0], study.StudySpec.MetricSpec.pb().DESCRIPTOR) + [
        e for p in parameters for e in _enum_values(p, study.StudySpec.ParameterSpec.pb().DESCRIPTOR)
    ]
    assert enums == [
        ("MetricSpec.goal", "MINIMIZE"),
        ("ParameterSpec.scale_type", "UNIT_LOG_SCALE"),
        ("ParameterSpec.scale_type", "UNIT_REVERSE_LOG_SCALE"),
        ("ParameterSpec.scale_type", "UNIT_LINEAR_SCALE"),
        ("ParameterSpec.scale_type", "UNIT_LINEAR_SCALE"),
    ]
    # the lists are the JSON of the Vertex protos: they parse back into the tuning job's study_spec
    job = json_format.ParseDict(
        {"study_spec": {"metrics": metrics, "parameters": parameters}}, HyperparameterTuningJob()._pb
    )
    P = study.StudySpec.ParameterSpec
    assert HyperparameterTuningJob.wrap(job).study_spec == study.StudySpec(
        metrics=[study.StudySpec.MetricSpec(metric_id="loss", goal=study.StudySpec.MetricSpec.GoalType.MINIMIZE)],
        parameters=[
            P(
                parameter_id="learning_rate",
                double_value_spec=P.DoubleValueSpec(min_value=1e-4, max_value=0.1),
                scale_type=P.ScaleType.UNIT_LOG_SCALE,
            ),
            P(
                parameter_id="hidden_units",
                integer_value_spec=P.IntegerValueSpec(min_value=16, max_value=256),
                scale_type=P.ScaleType.UNIT_REVERSE_LOG_SCALE,
            ),
            P(parameter_id="optimizer", categorical_value_spec=P.CategoricalValueSpec(values=["adam", "sgd"])),
            P(
                parameter_id="dropout",
                discrete_value_spec=P.DiscreteValueSpec(values=[0.0, 0.1, 0.3]),
                scale_type=P.ScaleType.UNIT_LINEAR_SCALE,
            ),
            P(
                parameter_id="momentum",
                double_value_spec=P.DoubleValueSpec(min_value=0.0, max_value=0.9),
                scale_type=P.ScaleType.UNIT_LINEAR_SCALE,
            ),
        ],
    )
    # KFP keeps constant inputs as protobuf Values: the lists come back unchanged (no int turned into a float)
    for value in (metrics, parameters):
        assert json_format.MessageToDict(json_format.ParseDict(value, struct_pb2.ListValue())) == value
    assert DEFAULT_STUDY.study_spec_metrics() == [{"metric_id": "val_accuracy", "goal": "MAXIMIZE"}]
    assert DEFAULT_STUDY.study_spec_parameters() == [
        {
            "parameter_id": "learning_rate",
            "double_value_spec": {"min_value": 0.0001, "max_value": 0.03},
            "scale_type": "UNIT_LOG_SCALE",
        },
        {
            "parameter_id": "hidden_units",
            "integer_value_spec": {"min_value": "32", "max_value": "256"},
            "scale_type": "UNIT_LOG_SCALE",
        },
        {
            "parameter_id": "dropout",
            "discrete_value_spec": {"values": [0.0, 0.1, 0.2, 0.3]},
            "scale_type": "UNIT_LINEAR_SCALE",
        },
    ]


def test_study_spec_parameters_are_what_the_aiplatform_sdk_builds():
    """Every parameter type at every scale: the same JSON as `google.cloud.aiplatform.hyperparameter_tuning`'s specs
    give (the SDK's own `_to_parameter_spec`), which the module builds without importing the SDK."""
    from google.cloud.aiplatform import hyperparameter_tuning as hpt

    parameters, sdk = [], []
    for scale in ("linear", "log", "reverse_log"):
        parameters += [
            {"type": "double", "parameter_id": f"double_{scale}", "min": 1e-4, "max": 0.5, "scale": scale},
            {"type": "integer", "parameter_id": f"integer_{scale}", "min": 2, "max": 512, "scale": scale},
            {"type": "discrete", "parameter_id": f"discrete_{scale}", "values": [0.5, 0.1, 2.0], "scale": scale},
        ]
        sdk += [
            hpt.DoubleParameterSpec(min=1e-4, max=0.5, scale=scale)._to_parameter_spec(f"double_{scale}"),
            hpt.IntegerParameterSpec(min=2, max=512, scale=scale)._to_parameter_spec(f"integer_{scale}"),
            hpt.DiscreteParameterSpec(values=[0.1, 0.5, 2.0], scale=scale)._to_parameter_spec(f"discrete_{scale}"),
        ]
    parameters += [
        {"type": "categorical", "parameter_id": "optimizer", "values": ["adam", "sgd"]},
        {"type": "double", "parameter_id": "momentum", "min": 0.0, "max": 0.9},  # default scale, a zero bound
    ]
    sdk += [
        hpt.CategoricalParameterSpec(values=["adam", "sgd"])._to_parameter_spec("optimizer"),
        hpt.DoubleParameterSpec(min=0.0, max=0.9, scale="linear")._to_parameter_spec("momentum"),
    ]
    as_json = [json_format.MessageToDict(type(p).pb(p), preserving_proto_field_name=True) for p in sdk]
    assert json.dumps(spec(parameters=parameters).study_spec_parameters()) == json.dumps(as_json)  # key order too


def test_study_spec_lists_do_not_import_the_aiplatform_sdk():
    """Compiling the vertex pipeline builds the study's lists from the `aiplatform_v1` protos alone: the SDK
    (`google.cloud.aiplatform`, seconds of imports) stays out."""
    code = (
        "import sys; from components.lib.study.spec import DEFAULT_STUDY; "
        "DEFAULT_STUDY.study_spec_parameters(); DEFAULT_STUDY.study_spec_metrics(); "
        "print('google.cloud.aiplatform' in sys.modules, 'google.cloud.aiplatform_v1' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["False", "True"]


def test_gcpc_launcher_turns_the_lists_into_the_create_request(tmp_path, monkeypatch):
    """The payload HyperparameterTuningJobRunOp's container receives (its ConcatPlaceholder, with the lists as JSON),
    through GCPC's own launcher code and the real JobServiceClient up to the RPC."""
    from google.cloud.aiplatform_v1.services.job_service.transports.grpc import JobServiceGrpcTransport
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob, job_state
    from google_cloud_pipeline_components.container.v1.hyperparameter_tuning_job import remote_runner

    s = spec(parameters=EVERY_KIND, algorithm="random")
    payload = (
        '{"display_name": "run-tune", "study_spec": {"metrics": '
        + json.dumps(s.study_spec_metrics())
        + ', "parameters": '
        + json.dumps(s.study_spec_parameters())
        + ', "algorithm": "RANDOM_SEARCH", "measurement_selection_type": "LAST_MEASUREMENT"}'
        + ', "max_trial_count": 4, "parallel_trial_count": 2, "max_failed_trial_count": 1'
        + ', "trial_job_spec": {"worker_pool_specs": [{"machine_spec": {"machine_type": "n1-standard-4"}, '
        + '"replica_count": 1, "container_spec": {"image_uri": "example.com/trainer"}}], '
        + '"service_account": "", "network": "", "base_output_directory": {"output_uri_prefix": "gs://b/t"}}'
        + ', "encryption_spec": {"kms_key_name":""}}'
    )
    name = "projects/p1/locations/us-central1/hyperparameterTuningJobs/7"
    requests = []

    def create(request, **kwargs):
        requests.append(request)
        return HyperparameterTuningJob(name=name)

    def get(request, **kwargs):
        return HyperparameterTuningJob(name=name, state=job_state.JobState.JOB_STATE_SUCCEEDED)

    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "p1"))
    monkeypatch.setattr(JobServiceGrpcTransport, "create_hyperparameter_tuning_job", property(lambda self: create))
    monkeypatch.setattr(JobServiceGrpcTransport, "get_hyperparameter_tuning_job", property(lambda self: get))
    remote_runner.create_hyperparameter_tuning_job(
        "HyperparameterTuningJob", "p1", "us-central1", payload, str(tmp_path / "gcp_resources")
    )
    [request] = requests
    sent = request.hyperparameter_tuning_job.study_spec
    assert request.parent == "projects/p1/locations/us-central1"
    assert list(sent.metrics) == [
        study.StudySpec.MetricSpec(metric_id="val_accuracy", goal=study.StudySpec.MetricSpec.GoalType.MAXIMIZE)
    ]
    assert [
        study.StudySpec.ParameterSpec.to_dict(
            p, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
        for p in sent.parameters
    ] == s.study_spec_parameters()
    assert sent.algorithm == study.StudySpec.Algorithm.RANDOM_SEARCH
    assert request.hyperparameter_tuning_job.max_failed_trial_count == 1


def test_metric_file_written_by_the_real_hypertune_library(tmp_path, monkeypatch):
    path = tmp_path / "trial-3" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "3")
    reporter = hypertune.HyperTune()
    for step, value in enumerate([0.5, 0.9, 0.7], start=1):
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="accuracy", metric_value=value, global_step=step
        )
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
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="accuracy", metric_value=step / 1000, global_step=step
        )
    reports = read_reports(str(path), "accuracy")
    assert len(reports) == 100 and reports[0] == (31, 0.031) and trial_metric(str(path), "accuracy") == 0.13


def trial(trial_id, state, value=None, infeasible="", lr=0.01, units=64):
    t = study.Trial(
        id=trial_id,
        state=state,
        infeasible_reason=infeasible,
        parameters=[
            study.Trial.Parameter(parameter_id="learning_rate", value=struct_pb2.Value(number_value=lr)),
            study.Trial.Parameter(parameter_id="hidden_units", value=struct_pb2.Value(number_value=units)),
        ],
    )
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
        "trial_id": "4",
        "metric": pytest.approx(0.95),
        "parameters": {"learning_rate": 0.003, "hidden_units": 128.0},
    }
    assert best_trial(TRIALS, "accuracy", "minimize")["trial_id"] == "5"
    with pytest.raises(NoFeasibleTrial, match="no succeeded, feasible trial reported 'loss' \\(of 6 trials\\)"):
        best_trial(TRIALS, "loss", "maximize")


def test_read_best_trial_fetches_the_job_named_in_gcp_resources(monkeypatch, tmp_path):
    from google.cloud import aiplatform_v1

    name = "projects/p1/locations/europe-west4/hyperparameterTuningJobs/987"
    gcp_resources = json.dumps(
        {
            "resources": [
                {
                    "resourceType": "HyperparameterTuningJob",
                    "resourceUri": f"https://europe-west4-aiplatform.googleapis.com/v1/{name}",
                }
            ]
        }
    )
    calls = []

    def get_job(self, request=None, *, name=None, **kwargs):
        calls.append({"name": name, "request": request, "endpoint": self._client_options.api_endpoint})
        return hyperparameter_tuning_job.HyperparameterTuningJob(name=name, trials=TRIALS)

    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "p1"))
    monkeypatch.setattr(aiplatform_v1.JobServiceClient, "get_hyperparameter_tuning_job", get_job)
    outputs = read_best_trial(gcp_resources, "accuracy", "maximize", str(tmp_path), f"{tmp_path}/run-1")
    # the tuning job completed: its folder recorded under the plan's root for the runs that reuse the job
    assert json.loads((tmp_path / "completed.json").read_text()) == {"directory": f"{tmp_path}/run-1", "job": name}
    assert calls == [{"name": name, "request": None, "endpoint": "europe-west4-aiplatform.googleapis.com"}]
    assert outputs.best_trial_id == "4" and outputs.best_metric == pytest.approx(0.95)
    assert outputs.best_parameters == {"learning_rate": 0.003, "hidden_units": 128.0}
    assert fetch_best_trial(gcp_resources, "accuracy", "minimize")["trials"] == 6
    with pytest.raises(ValueError, match="not a hyperparameter tuning job resource"):
        fetch_best_trial(
            json.dumps({"resources": [{"resourceUri": "https://x/v1/projects/p/customJobs/1"}]}), "accuracy", "maximize"
        )
