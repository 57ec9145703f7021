"""The TFJob's restart policy against the training-operator double (v1.9's ExitCode): a replica killed by a signal
gets a new pod and the job goes on; a replica's error fails the job at once with the operator's message."""

import copy

import pytest

from components.lib.kube import api as kube
from components.train_model_on_operator import TrainingJobFailed, as_dict, run_tfjob, tfjob
from tests.doubles.k8s import KubeAPI
from tests.doubles.k8s.kubelet import Claim, Kubelet
from tests.doubles.k8s.training_operator import TrainingOperator

IMAGE = "example.com/trainer:1"
WHAT = "TFJob ml/tfpipe-train-abc"
# the chief waits for the worker's second pod; the worker's first pod exits with `FIRST`, its second with 0
CHIEF = "import os, time\nwhile not os.path.exists('/mnt/tfpipe/second'): time.sleep(0.05)\nprint('chief done')"
WORKER = (
    "import os, sys\n"
    "if os.path.exists('/mnt/tfpipe/first'):\n"
    "    open('/mnt/tfpipe/second', 'w').close(); print('worker: second pod')\n"
    "else:\n"
    "    open('/mnt/tfpipe/first', 'w').close(); print('worker: first pod', flush=True); sys.exit(FIRST)\n"
)


@pytest.fixture
def cluster(tmp_path):
    operator = TrainingOperator(Kubelet({"tfpipe": Claim(str(tmp_path))}, {IMAGE: "trainer.Dockerfile"}))
    api = KubeAPI(installed={"kubeflow.org/v1": {"tfjobs": "TFJob"}}, controllers=[operator])
    yield api, tmp_path
    api.close()


def job(worker_exit: int, max_restarts: int = 2):
    """One chief and one worker running the scripts above (the trainer image, its command replaced)."""
    job = tfjob("tfpipe-train-abc", "ml", IMAGE, 2, [], {}, {}, "tfpipe", "/mnt/tfpipe", max_restarts=max_restarts)
    specs = job.spec.tf_replica_specs
    specs["Worker"].template = copy.deepcopy(specs["Chief"].template)
    for kind, script in (("Chief", CHIEF), ("Worker", WORKER.replace("FIRST", str(worker_exit)))):
        specs[kind].template.spec.containers[0].command = ["python", "-c", script]
    return job


def follow(api, body, lines: list):
    """Run the step's wait on `body`, its log lines into `lines`."""
    return run_tfjob(
        kube.api_client(api.url), body, poll_seconds=0, timeout_seconds=60, log=lines.append, sleep=lambda s: None
    )


def test_the_replicas_run_with_exit_code_and_no_backoff_limit_and_never_without_restarts():
    for max_restarts, policy in ((2, "ExitCode"), (0, "Never")):
        body = as_dict(job(143, max_restarts))
        assert {k: v["restartPolicy"] for k, v in body["spec"]["tfReplicaSpecs"].items()} == {
            "Chief": policy,
            "Worker": policy,
        }
        assert "backoffLimit" not in body["spec"]["runPolicy"]


@pytest.mark.parametrize("code", [137, 143])
def test_a_replica_killed_by_a_signal_gets_a_new_pod_and_the_job_succeeds(cluster, code):
    api, volume = cluster
    lines: list[str] = []
    follow(api, job(code), lines)
    # Running comes back once the new pod has started (printed again: a new transition time) and goes False at the
    # end if it was back by then: both timing, not policy
    assert [line for line in dict.fromkeys(lines) if "Running=False" not in line] == [
        f"created {WHAT}: 1 chief + 1 worker(s) of {IMAGE}",
        f"{WHAT}: Created=True (TFJobCreated): TFJob tfpipe-train-abc is created.",
        f"{WHAT}: Running=True (TFJobRunning): TFJob ml/tfpipe-train-abc is running.",
        f"{WHAT}: Restarting=True (TFJobRestarting): job tfpipe-train-abc is restarting because Worker replica(s) "
        "failed.",
        f"{WHAT}: Succeeded=True (TFJobSucceeded): TFJob ml/tfpipe-train-abc successfully completed.",
    ]
    worker = next(p for p in api.pods if p["metadata"]["name"] == "tfpipe-train-abc-worker-0")
    assert worker["metadata"]["uid"] == "tfpipe-train-abc-worker-0-2"  # a new pod, not a restarted container
    assert worker["status"]["containerStatuses"][0]["restartCount"] == 0
    assert api.logs["tfpipe-train-abc-worker-0"] == "worker: second pod\n"  # the first pod's log went with it
    assert (volume / "second").exists()


def test_a_replicas_error_fails_the_job_at_once_with_the_operators_message_and_its_log(cluster):
    api, volume = cluster
    lines: list[str] = []
    with pytest.raises(TrainingJobFailed) as e:
        follow(api, job(1), lines)
    assert str(e.value) == (
        f'{WHAT} failed: job "tfpipe-train-abc" is failing because "Worker" replica(s) failed.\n'
        "worker 0's last log lines:\nworker: first pod\n"
    )
    assert lines[-1] == (
        f'{WHAT}: Failed=True (TFJobFailed): job "tfpipe-train-abc" is failing because "Worker" replica(s) failed.'
    )
    assert not (volume / "second").exists()  # not retried
    worker = next(p for p in api.pods if p["metadata"]["name"] == "tfpipe-train-abc-worker-0")
    assert worker["metadata"]["uid"] == "tfpipe-train-abc-worker-0-1"
