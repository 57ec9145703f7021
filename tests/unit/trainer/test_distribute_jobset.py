"""TF_CONFIG of a pod of Kubeflow Trainer v2's JobSet (the project's TrainingRuntime), from its environment."""

import json

import pytest

from trainer import distribute


def jobset_env(index: int, workers: int = 3) -> dict:
    return {
        "TFPIPE_JOBSET_NAME": "tfpipe-train-0123456789",
        "TFPIPE_REPLICATED_JOB": "node",
        "TFPIPE_JOB_INDEX": "0",
        "JOB_COMPLETION_INDEX": str(index),
        "TFPIPE_NUM_WORKERS": str(workers),
    }


HOSTS = [f"tfpipe-train-0123456789-node-0-{i}.tfpipe-train-0123456789:2222" for i in range(3)]


def test_each_pod_is_the_worker_of_its_completion_index_on_the_jobsets_hostnames():
    assert distribute.tf_config_from_jobset(jobset_env(2)) == {
        "cluster": {"worker": HOSTS},
        "task": {"type": "worker", "index": 2},
    }


def test_the_cluster_sets_tf_config_and_worker_zero_is_the_chief():
    env = jobset_env(0)
    cluster = distribute.cluster_from_env(env)
    assert json.loads(env["TF_CONFIG"]) == {"cluster": {"worker": HOSTS}, "task": {"type": "worker", "index": 0}}
    assert (cluster.is_chief, cluster.num_workers, cluster.rank) == (True, 3, 0)
    other = distribute.cluster_from_env(jobset_env(1))
    assert (other.is_chief, other.name) == (False, "worker-1")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"TFPIPE_NUM_WORKERS": ""},
            "cannot build TF_CONFIG for a JobSet pod: TFPIPE_NUM_WORKERS not set",
        ),
        (
            {"TFPIPE_JOB_INDEX": "", "JOB_COMPLETION_INDEX": ""},
            "cannot build TF_CONFIG for a JobSet pod: TFPIPE_JOB_INDEX, JOB_COMPLETION_INDEX not set",
        ),
        (
            {"TFPIPE_NUM_WORKERS": "three"},
            "cannot build TF_CONFIG for a JobSet pod: TFPIPE_NUM_WORKERS='three' is not a whole number",
        ),
        (
            {"JOB_COMPLETION_INDEX": "3"},
            "cannot build TF_CONFIG for a JobSet pod: JOB_COMPLETION_INDEX=3 is not below TFPIPE_NUM_WORKERS=3",
        ),
    ],
)
def test_a_missing_or_bad_variable_is_named(change, message):
    env = {**jobset_env(0), **change}
    with pytest.raises(ValueError) as raised:
        distribute.cluster_from_env(env)
    assert str(raised.value) == message
    assert "TF_CONFIG" not in env


def test_the_trainer_exits_with_one_line_naming_the_missing_variable(monkeypatch, tmp_path):
    from trainer import task

    for name, value in {**jobset_env(0), "TFPIPE_NUM_WORKERS": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("CLUSTER_SPEC", raising=False)
    with pytest.raises(SystemExit) as raised:
        task.main(["--data-dir", str(tmp_path), "--job-dir", str(tmp_path)])
    assert raised.value.code == "error: cannot build TF_CONFIG for a JobSet pod: TFPIPE_NUM_WORKERS not set"
