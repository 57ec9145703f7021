"""The Trainer v2 double (tests/doubles/k8s/trainer_controller.py): a TrainJob on the shipped runtime runs as a JobSet's
Indexed pods named as JobSet names them, each with the environment the trainer derives TF_CONFIG from; the JobSet's
failure policy and the TrainJob's conditions are Trainer v2.3.0's and JobSet v0.12's."""

import json
import time

import pytest
from kubernetes.client.exceptions import ApiException

from components.lib.kube import api as kube, trainjob as tj
from tests.doubles.k8s import KubeAPI
from tests.doubles.k8s.kubelet import Claim, Kubelet
from tests.doubles.k8s.trainer_controller import TrainerController

IMAGE = "example.com/trainer:1"
INSTALLED = {
    "trainer.kubeflow.org/v1alpha1": {
        "trainjobs": "TrainJob",
        "trainingruntimes": "TrainingRuntime",
        "clustertrainingruntimes": "ClusterTrainingRuntime",
    }
}
# every worker prints what it was given; worker 1's first attempt exits with FIRST, later ones with 0
SCRIPT = (
    "import json, os, sys\n"
    "config = json.loads(os.environ['TF_CONFIG'])\n"
    "print(os.environ['JOB_COMPLETION_INDEX'], os.environ['TFPIPE_JOBSET_NAME'], os.environ['TFPIPE_REPLICATED_JOB'],"
    " os.environ['TFPIPE_JOB_INDEX'], config['task']['index'], len(config['cluster']['worker']))\n"
    "if os.environ['JOB_COMPLETION_INDEX'] == '1' and not os.path.exists('/mnt/tfpipe/first'):\n"
    "    open('/mnt/tfpipe/first', 'w').close(); sys.exit(FIRST)\n"
)


@pytest.fixture
def cluster(tmp_path):
    controller = TrainerController(Kubelet({"tfpipe": Claim(str(tmp_path))}, {IMAGE: "trainer.Dockerfile"}))
    api = KubeAPI(installed=dict(INSTALLED), controllers=[controller])
    yield api, tmp_path
    api.close()


def objects(api):
    return kube.custom(kube.api_client(api.url))


def submit(api, first_exit: int = 0, max_restarts: int = 2, with_runtime: bool = True) -> None:
    if with_runtime:
        runtime = tj.training_runtime(max_restarts)
        objects(api).create_namespaced_custom_object(tj.GROUP, tj.VERSION, "ml", tj.RUNTIME_PLURAL, runtime)
    job = tj.trainjob("tj", "ml", IMAGE, 2, [], {}, {}, "tfpipe", "/mnt/tfpipe")
    job["spec"]["trainer"]["command"] = ["python", "-c", SCRIPT.replace("FIRST", str(first_exit))]
    objects(api).create_namespaced_custom_object(tj.GROUP, tj.VERSION, "ml", tj.PLURAL, job)


def finished(api) -> dict:
    for _ in range(600):
        job = api.get("trainjobs", "tj", "ml")
        if any(c["type"] in ("Complete", "Failed") for c in (job.get("status") or {}).get("conditions", [])):
            return job
        time.sleep(0.05)
    raise AssertionError("the TrainJob did not finish")


def conditions(job: dict) -> list[tuple]:
    return [(c["type"], c["status"], c["reason"], c["message"]) for c in job["status"]["conditions"]]


def test_the_jobsets_indexed_pods_get_jobset_names_and_the_environment_of_tf_config(cluster):
    api, _ = cluster
    submit(api)
    job = finished(api)
    assert conditions(job) == [("Complete", "True", "AllJobsCompleted", "jobset completed successfully")]
    assert job["status"]["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    pods = sorted(api.pods, key=lambda p: p["spec"]["hostname"])
    assert [(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in pods] == [
        ("tj-node-0-0", "tj"),
        ("tj-node-0-1", "tj"),
    ]
    assert [p["metadata"]["name"][: -len("-abcde")] for p in pods] == ["tj-node-0-0", "tj-node-0-1"]
    assert pods[1]["metadata"]["annotations"] == {
        "sidecar.istio.io/inject": "false",
        "jobset.sigs.k8s.io/jobset-name": "tj",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/job-global-index": "0",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "batch.kubernetes.io/job-completion-index": "1",
    }
    assert [api.logs[p["metadata"]["name"]] for p in pods] == ["0 tj node 0 0 2\n", "1 tj node 0 1 2\n"]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]


def test_a_trainer_error_fails_the_jobset_at_once_by_the_runtimes_rule(cluster):
    api, volume = cluster
    submit(api, first_exit=1)
    job = finished(api)
    assert conditions(job) == [
        (
            "Failed",
            "True",
            "FailJobSetFailurePolicyAction",
            "applying FailJobSet failure policy action (first failed job: tj-node-0)",
        )
    ]
    failed = next(p for p in api.pods if p["spec"]["hostname"] == "tj-node-0-1")
    assert failed["status"]["containerStatuses"][0]["state"] == {"terminated": {"exitCode": 1, "reason": "Error"}}


def test_a_worker_killed_by_a_signal_restarts_every_worker(cluster):
    api, _ = cluster
    submit(api, first_exit=137)
    job = finished(api)
    assert conditions(job) == [("Complete", "True", "AllJobsCompleted", "jobset completed successfully")]
    assert {p["metadata"]["annotations"]["jobset.sigs.k8s.io/restart-attempt"] for p in api.pods} == {"1"}
    assert len(api.pods) == 2  # the first attempt's pods were deleted


def test_restarts_beyond_max_restarts_fail_the_jobset(cluster):
    api, _ = cluster
    submit(api, first_exit=143, max_restarts=0)
    assert conditions(finished(api)) == [
        (
            "Failed",
            "True",
            "ReachedMaxRestarts",
            "jobset failed due to reaching max number of restarts (first failed job: tj-node-0)",
        )
    ]


def test_a_trainjob_on_a_runtime_that_does_not_exist_is_refused_as_the_webhook_refuses_it(cluster):
    api, _ = cluster
    with pytest.raises(ApiException) as e:
        submit(api, with_runtime=False)
    assert e.value.status == 403
    assert json.loads(e.value.body)["message"] == (
        'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: spec.runtimeRef: Invalid '
        'value: {"apiGroup":"trainer.kubeflow.org","kind":"TrainingRuntime","name":"tfpipe-tensorflow-distributed"}: '
        'trainingruntimes.trainer.kubeflow.org "tfpipe-tensorflow-distributed" not found: specified trainingRuntime '
        "must be created before the TrainJob is created"
    )
    assert not api.pods


def test_pod_security_restricted_refuses_the_pods_of_a_runtime_that_does_not_meet_it(tmp_path):
    controller = TrainerController(Kubelet({"tfpipe": Claim(str(tmp_path))}, {IMAGE: "trainer.Dockerfile"}))
    api = KubeAPI(
        installed=dict(INSTALLED),
        controllers=[controller],
        namespaces={"ml": {"pod-security.kubernetes.io/enforce": "restricted"}},
    )
    try:
        runtime = tj.training_runtime()
        pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        del pod["securityContext"], pod["containers"][0]["securityContext"]
        api.put(tj.API_VERSION, "ml", tj.RUNTIME_PLURAL, runtime)
        submit(api, with_runtime=False)
        for _ in range(100):
            if api.events:
                break
            time.sleep(0.02)
        assert not api.pods
        assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in api.events] == [
            ("Job", "tj-node-0", "FailedCreate"),
            ("Job", "tj-node-0", "FailedCreate"),
        ]
        assert api.events[0]["message"].startswith('Error creating: pods "tj-node-0-0-')
        assert (
            'is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false'
            in api.events[0]["message"]
        )
        assert api.get("trainjobs", "tj", "ml")["status"] == {
            "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}]
        }
    finally:
        api.close()
