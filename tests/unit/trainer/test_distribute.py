import json

import pytest

from trainer import distribute
from trainer.flags import parse_args


def test_plain_tf_config_worker_zero_is_chief():
    env = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})}
    cluster = distribute.cluster_from_env(env)
    assert cluster.is_chief and cluster.num_workers == 2 and cluster.name == "worker-0"
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})
    assert not distribute.cluster_from_env(env).is_chief


def test_vertex_cluster_spec_becomes_tf_config_with_chief():
    spec = {
        "cluster": {"workerpool0": ["c:1"], "workerpool1": ["w0:1", "w1:1"]},
        "task": {"type": "workerpool1", "index": 0, "trial": "3"},
        "environment": "cloud",
    }
    env = {"CLUSTER_SPEC": json.dumps(spec)}
    cluster = distribute.cluster_from_env(env)
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]},
        "task": {"type": "worker", "index": 0},
    }
    assert cluster.num_workers == 3 and not cluster.is_chief  # worker 0 is not chief when a chief exists
    assert cluster.rank == 1
    spec["task"] = {"type": "workerpool0", "index": 0}
    assert distribute.cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)}).is_chief


def test_no_cluster_is_a_single_chief():
    cluster = distribute.cluster_from_env({})
    assert cluster.is_chief and cluster.num_workers == 1


def test_write_location_is_final_for_chief_and_temporary_for_workers(tmp_path):
    chief = distribute.Cluster("chief", 0, 2, has_chief=True)
    worker = distribute.Cluster("worker", 0, 2, has_chief=True)
    assert distribute.write_location(str(tmp_path / "m"), chief) == str(tmp_path / "m")
    temp = distribute.write_location(str(tmp_path / "m"), worker)
    assert temp != str(tmp_path / "m") and "worker-0" in temp
    distribute.discard(temp, str(tmp_path / "m"))
    import os

    assert not os.path.exists(temp)


def test_aip_environment_sets_output_locations():
    env = {
        "AIP_MODEL_DIR": "gs://b/job/model/",
        "AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": "gs://b/job/logs/",
    }
    args = parse_args(["--data-dir", "gs://b/data"], env)
    assert (args.job_dir, args.model_dir, args.checkpoint_dir, args.log_dir) == (
        "gs://b/job",
        "gs://b/job/model",
        "gs://b/job/checkpoints",
        "gs://b/job/logs",
    )
    args = parse_args(["--data-dir", "d", "--job-dir", "/tmp/j/"], {})
    assert (args.model_dir, args.checkpoint_dir) == ("/tmp/j/model", "/tmp/j/checkpoints")


def test_vertex_tuning_style_flags():
    args = parse_args(["--data-dir", "d", "--job-dir", "j", "--learning_rate=0.02", "--hidden_units=64"], {})
    assert args.learning_rate == 0.02 and args.hidden_units == 64
    # the tuning service passes integer parameters as doubles
    args = parse_args(["--data-dir", "d", "--job-dir", "j", "--hidden_units=64.0", "--batch_size=32.0"], {})
    assert (args.hidden_units, args.batch_size) == (64, 32) and type(args.hidden_units) is int


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data-dir", "d"], "give --job-dir or --model-dir"),
        (["--data-dir", "d", "--job-dir", "j", "--epochs", "0"], "--epochs must be >= 1"),
        (
            ["--data-dir", "d", "--job-dir", "j", "--optimizer", "lion"],
            "argument --optimizer: optimizer takes one of adam, adamw, nadam, sgd, rmsprop, adagrad, got 'lion'",
        ),
        (
            ["--data-dir", "d", "--job-dir", "j", "--n_hidden=3"],
            "python -m trainer.task: error: --n-hidden: no hyperparameter 'n_hidden': the model "
            "trainer.model:build_model declares dropout (float), hidden_units (int), filters (int), image_size (int); "
            "the trainer's own are learning_rate (float), batch_size (int), seed (int), optimizer (one of adam, adamw, "
            "nadam, sgd, rmsprop, adagrad)\n",
        ),
        (
            ["--data-dir", "d", "--job-dir", "j", "--batch-size", "x"],
            "argument --batch-size: batch_size takes an int, got 'x'",
        ),
        (
            ["--data-dir", "d", "--job-dir", "j", "--hidden_units=64.5"],
            "argument --hidden-units: hidden_units takes an int, got '64.5'",
        ),
    ],
)
def test_bad_trainer_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv, {})
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_lost_peer_exits_with_the_status_schedulers_retry_and_other_errors_propagate(monkeypatch, capsys):
    import tensorflow as tf

    from trainer import task

    aborted = tf.errors.UnavailableError(
        None, None, "Collective ops is aborted by: The following tasks are unhealthy (stopped sending heartbeats)"
    )
    assert distribute.peer_lost_status(aborted) == distribute.PEER_LOST == 138
    assert distribute.peer_lost_status(tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded")) == 138
    assert distribute.peer_lost_status(ValueError("bad data")) is None
    monkeypatch.setattr(task, "main", lambda argv=None: (_ for _ in ()).throw(aborted))
    assert task.run([]) == 138
    assert capsys.readouterr().out == (
        "[trainer] lost a peer, exiting with 138 to be restarted: UnavailableError: Collective ops is aborted by: "
        "The following tasks are unhealthy (stopped sending heartbeats)\n"
    )
    monkeypatch.setattr(task, "main", lambda argv=None: (_ for _ in ()).throw(ValueError("bad data")))
    with pytest.raises(ValueError, match="bad data"):
        task.run([])
