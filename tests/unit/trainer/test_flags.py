"""The trainer's command line: the one builder every launcher uses, read back by the trainer's own parser."""

import pytest

from components.lib.study.spec import DEFAULT_STUDY, StudySpec, pipeline_hyperparameters, trial_flags
from trainer.flags import TRAINER_COMMAND, TrainerSetup, command_line, global_batch, parse_args


def test_hyperparameters_from_kfp_dicts_are_flags_with_integral_floats_as_integers():
    assert command_line({"batch_size": 32.0, "learning_rate": 0.003, "dropout": 0.0, "epochs": 5}) == [
        "--batch-size",
        "32",
        "--learning-rate",
        "0.003",
        "--dropout",
        "0",
        "--epochs",
        "5",
    ]


def test_locations_and_model_come_first_and_only_when_given():
    assert command_line({"epochs": 2}, data_dir="gs://b/data", trainer=TrainerSetup("models.cnn:build")) == [
        "--data-dir",
        "gs://b/data",
        "--model",
        "models.cnn:build",
        "--epochs",
        "2",
    ]
    assert command_line(job_dir="/jobs/7") == ["--job-dir", "/jobs/7"]
    assert TRAINER_COMMAND == ("python", "-m", "trainer.task")


def test_what_the_builder_writes_the_parser_reads_back():
    values = {"batch_size": 16.0, "learning_rate": 0.02, "hidden_units": 64, "dropout": 0.1, "epochs": 3}
    args = parse_args(command_line(values, data_dir="d", job_dir="j", trainer=TrainerSetup()), {})
    assert (args.data_dir, args.job_dir, args.model) == ("d", "j", "trainer.model:build_model")
    assert {k: getattr(args, k) for k in values} == {
        "batch_size": 16,
        "learning_rate": 0.02,
        "hidden_units": 64,
        "dropout": 0.1,
        "epochs": 3,
    }


def test_a_trial_trains_at_the_global_batch_of_the_final_trainings_workers():
    """The study's trials run on one worker and the final training on `workers`, each replica at --batch-size: a
    trial's global batch is the training's, the one its learning rate is tuned for."""
    trial = parse_args(
        command_line(trial_flags(2, {"batch_size": 32}, 3, DEFAULT_STUDY), data_dir="d", job_dir="j"), {}
    )
    assert (trial.epochs, trial.batch_size, trial.batch_workers) == (2, 32, 3)
    training = parse_args(command_line({"batch_size": 32}, data_dir="d", job_dir="j"), {})
    assert global_batch(trial, replicas=1, workers=1) == global_batch(training, replicas=3, workers=3) == 96
    assert global_batch(trial, replicas=2, workers=1) == 192  # a trial on 2 GPUs for 3 workers of 2 GPUs each
    assert global_batch(training, replicas=4, workers=2) == 128
    with pytest.raises(SystemExit):
        parse_args(["--data-dir", "d", "--job-dir", "j", "--batch-workers", "-1"], {})


def test_a_trial_trains_at_the_pipelines_learning_rate_unless_the_study_tunes_it():
    """As the final training without a study: the pipeline's batch size and learning rate, a tuned one left to each
    trial's value (appended by the study service)."""
    pipeline = pipeline_hyperparameters(batch_size=16, learning_rate=0.003)
    dropout_only = StudySpec(parameters=[{"parameter_id": "dropout", "type": "discrete", "values": [0.1, 0.2]}])
    assert trial_flags(2, pipeline, 3, dropout_only) == {
        "epochs": 2,
        "batch_size": 16,
        "learning_rate": 0.003,
        "batch_workers": 3,
    }
    assert trial_flags(2, pipeline, 3, DEFAULT_STUDY) == {"epochs": 2, "batch_size": 16, "batch_workers": 3}
