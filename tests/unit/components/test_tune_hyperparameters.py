"""The self-hosted study over a cheap stand-in trainer (real subprocesses, real hypertune files, real Vizier)."""

import csv
import json
import math

import pytest

from components.lib.study.spec import StudySpec
from components.tune_hyperparameters import StudyFailed, run_study


def spec(**overrides):
    return StudySpec.model_validate(
        {
            "parameters": [
                {"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 1.0, "scale": "log"},
                {"type": "integer", "parameter_id": "hidden_units", "min": 10, "max": 300},
            ],
            **overrides,
        }
    )


def test_a_study_runs_its_trials_at_most_parallel_trial_count_at_once_and_records_each(tmp_path):
    """The loop and its records, with random search (how well the default GP bandit searches: bench/tuning.py, on the
    real trainer)."""
    s = spec(max_trial_count=16, parallel_trial_count=3, algorithm="random")
    result = run_study(
        s, str(tmp_path), ["--sleep", "0.5"], module="tests.helpers.stand_in_trainer", log=lambda m: None
    )
    trials = result["trials"]
    assert len(trials) == 16 and all(t["status"] == "SUCCEEDED" for t in trials)
    assert result["trial_processes"] == 3  # one warm runner per parallel trial
    best = result["best"]
    assert best["metric"] == max(t["metric"] for t in trials)
    expected = 1 - (math.log10(best["parameters"]["learning_rate"]) + 2) ** 2 / 4
    assert best["metric"] == pytest.approx(expected - ((best["parameters"]["hidden_units"] - 100) / 200) ** 2)
    # never more than 3 trials at once
    events = sorted([(t["started"], 1) for t in trials] + [(t["ended"], -1) for t in trials])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 3
    # each trial has its own id, metric file and Vertex-style directories; the last report counts
    t1 = trials[0]
    assert t1["output_dir"] == str(tmp_path / "1") and (tmp_path / "1" / "model").is_dir()
    lines = [json.loads(x) for x in (tmp_path / "1" / "hypertune" / "output.metrics").read_text().splitlines()]
    assert lines[-1]["trial"] == "1" and float(lines[-1]["val_accuracy"]) == pytest.approx(t1["metric"])
    assert isinstance(t1["parameters"]["hidden_units"], int)
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert [r["trial_id"] for r in rows] == [str(i) for i in range(1, 17)]
    assert set(rows[0]) == {"trial_id", "learning_rate", "hidden_units", "val_accuracy", "status", "seconds"}
    assert (tmp_path / "trials.png").stat().st_size > 1000
    assert json.loads((tmp_path / "trials.json").read_text())["best"]["trial_id"] == best["trial_id"]


def failing_spec(mode, **overrides):
    return spec(
        parameters=[
            {"type": "categorical", "parameter_id": "mode", "values": [mode]},
            {"type": "double", "parameter_id": "learning_rate", "min": 0.001, "max": 0.1},
        ],
        algorithm="random",
        **overrides,
    )


def test_failed_trials_are_recorded_and_the_limit_enforced(tmp_path):
    s = failing_spec("crash", max_trial_count=6, parallel_trial_count=2, max_failed_trial_count=2)
    with pytest.raises(
        StudyFailed,
        match=r"[23] trial\(s\) failed: the study fails once max_failed_trial_count=2 "
        r"trials have failed; see .*trials.json",
    ):
        run_study(s, str(tmp_path), ["--sleep", "0"], module="tests.helpers.stand_in_trainer", log=lambda m: None)
    recorded = json.loads((tmp_path / "trials.json").read_text())
    # trials already running finish, but none starts once the limit is reached (at most limit + parallel - 1)
    assert 2 <= len(recorded["trials"]) == recorded["failed_trials"] <= 3
    assert recorded["trial_processes"] >= len(recorded["trials"])  # a failing trial retires its runner
    for trial in recorded["trials"]:
        assert trial["status"] == "FAILED" and trial["error"] == "exit code 3" and trial["metric"] is None
        assert "stand-in: crashing as asked" in trial["log_tail"]
    assert {r["status"] for r in csv.DictReader((tmp_path / "trials.csv").open())} == {"FAILED"}


def crash_then_ok(**overrides):
    """Grid order: trial 1 crashes, trial 2 succeeds."""
    return spec(
        parameters=[
            {"type": "categorical", "parameter_id": "mode", "values": ["crash", "ok"]},
            {"type": "discrete", "parameter_id": "learning_rate", "values": [0.01]},
        ],
        algorithm="grid",
        max_trial_count=2,
        parallel_trial_count=1,
        **overrides,
    )


def test_max_failed_trial_count_is_the_number_of_failures_that_fails_the_study(tmp_path):
    """Vertex's definition: "the number of failed Trials that need to be seen before failing" the job."""
    # 1 (the default): the first failed trial fails the study, and no trial starts after it
    with pytest.raises(StudyFailed, match=r"1 trial\(s\) failed: the study fails once max_failed_trial_count=1 "):
        run_study(
            crash_then_ok(max_failed_trial_count=1),
            str(tmp_path / "one"),
            ["--sleep", "0"],
            module="tests.helpers.stand_in_trainer",
            log=lambda m: None,
        )
    recorded = json.loads((tmp_path / "one" / "trials.json").read_text())
    assert [(t["parameters"]["mode"], t["status"]) for t in recorded["trials"]] == [("crash", "FAILED")]
    # 2: one failure is tolerated
    result = run_study(
        crash_then_ok(max_failed_trial_count=2),
        str(tmp_path / "two"),
        ["--sleep", "0"],
        module="tests.helpers.stand_in_trainer",
        log=lambda m: None,
    )
    assert [t["status"] for t in result["trials"]] == ["FAILED", "SUCCEEDED"] and result["failed_trials"] == 1
    assert result["best"]["trial_id"] == "2"


def test_local_grid_enumerates_every_integer_of_a_range():
    """Vertex's GRID_SEARCH takes integer ranges (not doubles); the local grid designer (OSS Vizier) makes every
    integer of the range a grid point, whatever the scale, crossed with the categorical and discrete values."""
    from components.lib.study.suggestions import make_designer, python_values

    s = spec(
        algorithm="grid",
        parameters=[
            {"type": "integer", "parameter_id": "hidden_units", "min": 30, "max": 33, "scale": "log"},
            {"type": "categorical", "parameter_id": "mode", "values": ["ok", "silent"]},
        ],
    )
    points = [python_values(t.parameters.as_dict(), s) for t in make_designer(s).suggest(8)]
    assert sorted((p["hidden_units"], p["mode"]) for p in points) == [
        (u, m) for u in (30, 31, 32, 33) for m in ("ok", "silent")
    ]


def test_a_trial_that_reports_nothing_fails(tmp_path):
    s = failing_spec("silent", max_trial_count=2, parallel_trial_count=1, max_failed_trial_count=5)
    with pytest.raises(StudyFailed, match="no trial succeeded"):
        run_study(s, str(tmp_path), ["--sleep", "0"], module="tests.helpers.stand_in_trainer", log=lambda m: None)
    recorded = json.loads((tmp_path / "trials.json").read_text())
    assert [t["error"] for t in recorded["trials"]] == ["no 'val_accuracy' reported"] * 2


def test_random_search_respects_the_budget(tmp_path):
    result = run_study(
        spec(algorithm="random", max_trial_count=3, parallel_trial_count=1),
        str(tmp_path),
        ["--sleep", "0"],
        module="tests.helpers.stand_in_trainer",
        seed=3,
        log=lambda m: None,
    )
    assert [t["trial_id"] for t in result["trials"]] == ["1", "2", "3"]
    assert all(1e-4 <= t["parameters"]["learning_rate"] <= 1.0 for t in result["trials"])


def test_the_trials_plot_is_titled_with_labelled_axes(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from components.lib.study.results import plot_trials

    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **options: saved.append(fig))
    trials = [{"trial_id": "1", "metric": 0.91}, {"trial_id": "2", "metric": None}, {"trial_id": "3", "metric": 0.94}]
    plot_trials({"spec": {"metric_id": "accuracy", "goal": "maximize"}, "trials": trials}, str(tmp_path / "t.png"))
    (ax,) = saved[0].axes
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == (
        "Hyperparameter study: accuracy per trial (maximize)",
        "trial",
        "accuracy",
    )
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["accuracy", "best so far"]


def test_the_gp_designer_loads_without_tensorflow_and_leaves_it_importable():
    """The study process does not import TensorFlow for Vizier's GP (TensorFlow Probability would, for docstrings
    only); the GP still suggests, and nothing is left in `sys.modules` that would stop a later import."""
    import subprocess
    import sys

    code = """
import sys
from components.lib.study.spec import StudySpec
from components.lib.study.suggestions import make_designer, to_vizier
from components.lib.study.trials import Trial
from vizier import algorithms as vza
s = StudySpec.model_validate({"parameters": [
    {"type": "double", "parameter_id": "learning_rate", "min": 1e-4, "max": 1.0, "scale": "log"}]})
designer = make_designer(s)
(seed,) = designer.suggest(1)
done = Trial("1", seed.parameters.as_dict(), status="SUCCEEDED", metric=0.5)
designer.update(vza.CompletedTrials([to_vizier(done, s, 1)]), vza.ActiveTrials())
(gp,) = designer.suggest(1)
print("tensorflow" in sys.modules, 1e-4 <= gp.parameters["learning_rate"].value <= 1.0)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]  # neither imported nor blocked (a None entry) any more


def test_a_study_minimizing_val_loss_picks_the_trial_with_the_lowest(tmp_path):
    """Each trial reports the study's metric (val_loss, through CLOUD_ML_HP_METRIC_TAG and the trainer's EpochLog):
    the best is the lowest val_loss, not the most or the least accurate trial."""
    s = StudySpec.model_validate(
        {
            "parameters": [{"type": "integer", "parameter_id": "hidden_units", "min": 1, "max": 3}],
            "algorithm": "grid",
            "metric_id": "val_loss",
            "goal": "minimize",
            "max_trial_count": 3,
            "parallel_trial_count": 1,
        }
    )
    result = run_study(s, str(tmp_path), [], module="tests.helpers.objective_trainer", log=lambda m: None)
    assert {t["parameters"]["hidden_units"]: t["metric"] for t in result["trials"]} == {1: 0.5, 2: 0.2, 3: 0.9}
    assert (result["best"]["parameters"], result["best"]["metric"]) == ({"hidden_units": 2}, 0.2)
    reports = [json.loads(x) for x in (tmp_path / "2" / "hypertune" / "output.metrics").read_text().splitlines()]
    assert [(r["val_loss"], r["global_step"]) for r in reports] == [("0.2", "1")]


def test_a_warm_started_study_starts_the_final_training_from_its_best_trials_best_checkpoint(digits_data, tmp_path):
    """`study.warm_start`: the study step (real trainer trials) returns the best trial's values and its
    `checkpoints/best` folder; the training step's trainer loads that checkpoint (the record of the trial's best
    epoch by val_loss) before its first epoch."""
    from kfp.dsl import Artifact, Dataset, Metrics, Model

    from components.train_model import train_model
    from components.tune_hyperparameters import tune_hyperparameters
    from trainer import checkpoints
    from trainer.flags import TrainerSetup

    study = {
        "parameters": [{"type": "discrete", "parameter_id": "hidden_units", "values": [16, 32]}],
        "algorithm": "grid",
        "metric_id": "val_loss",
        "goal": "minimize",
        "max_trial_count": 2,
        "parallel_trial_count": 1,
        "warm_start": True,
    }
    tuning = Artifact(uri=str(tmp_path / "tuning"))
    dataset = Dataset(uri=str(digits_data))
    trainer = TrainerSetup().as_dict()  # the built-in model
    hyperparameters = tune_hyperparameters(dataset, study, True, 3, 32, 0.01, 1, trainer, tuning)
    trials = json.loads((tmp_path / "tuning" / "trials.json").read_text())
    best = min(trials["trials"], key=lambda t: t["metric"])
    folder = f"{tmp_path}/tuning/{best['trial_id']}/checkpoints/best"
    assert hyperparameters == {
        "batch_size": 32,
        "learning_rate": 0.01,
        "hidden_units": best["parameters"]["hidden_units"],
        "warm_start_from": folder,
    }
    kept = checkpoints.read(folder)
    assert kept is not None and kept.metric == "val_loss"
    training = Artifact(uri=str(tmp_path / "training"))
    train_model(dataset, 1, 1, hyperparameters, trainer, 0, Model(uri=str(tmp_path / "model")), Metrics(), training)
    log = (tmp_path / "training" / "worker-logs" / "chief.attempt-1.log").read_text()
    assert f"[trainer] warm start from {kept.path} (epoch {kept.epoch}: val_loss={kept.value})\n" in log


def test_a_warm_start_is_refused_where_the_training_cannot_read_the_trials_checkpoints():
    """kubeflow's `tuning: pod` keeps the trials' folders in the study step's pod; Katib's are on the claim."""
    from pipelines.config import ConfigError, KubeflowSettings, Platform
    from pipelines.training import build_pipeline

    study = StudySpec.model_validate({**spec().model_dump(), "warm_start": True})
    with pytest.raises(ConfigError) as refused:
        build_pipeline("kubeflow", Platform(kubeflow=KubeflowSettings(tuning="pod")), study=study)
    assert str(refused.value) == (
        "study.warm_start: platform.kubeflow.tuning pod keeps the trials' checkpoints in the study step's pod, where "
        "the training cannot read them; use tuning: katib (it keeps the best trial's on the volume) or set "
        "study.warm_start: false"
    )
    build_pipeline("local", study=study)
