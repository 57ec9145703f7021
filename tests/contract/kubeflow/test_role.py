"""manifests/kubeflow/role.yaml grants the engine steps exactly what they call: `USED` declares, from the steps' code,
the (API group, resource, verb) each step's calls need; the steps driven through the Kubernetes double under the
shipped Role (every path that makes a call: success, a job's or a trial's failure with its pods' logs, a timeout, a
rollout, a pruned revision, a rolled-back first deploy) are allowed exactly those, and the Role grants nothing
else. test_manifests.py and the engine tests check the converse: every request the steps make is allowed."""

import pytest

from components.deploy_model_on_kserve import ServingFailed
from components.lib.kube import api as kube, trainjob as tj
from components.lib.study.spec import DEFAULT_STUDY
from components.train_model_on_operator import TrainingJobFailed, run_tfjob, run_trainjob
from components.tune_on_katib import StudyFailed, TrialPodsRefused, run_experiment
from tests.contract.kubeflow import (
    test_deploy_on_kserve_modes as modes,
    test_train_model_on_operator as tfjobs,
    test_train_on_trainjob as trainjobs,
    test_tune_on_katib as katib,
)
from tests.contract.kubeflow.test_deploy_model_on_kserve import cluster, deploy  # noqa: F401 (the fixture)
from tests.contract.kubeflow.test_deploy_on_kserve_modes import make  # noqa: F401 (the fixture)
from tests.doubles.k8s import KubeAPI, shipped_rules
from tests.helpers.kubeflow_components import EXPERIMENTS

KUBEFLOW, TRAINER, KSERVE, KNATIVE, APPS, CORE = (
    "kubeflow.org",
    "trainer.kubeflow.org",
    "serving.kserve.io",
    "serving.knative.dev",
    "apps",
    "",
)
LOGS = {(CORE, "pods", "list"), (CORE, "pods/log", "get")}  # a failed job's or trial's pods and their logs
# create, read, patch the predictor and traffic, delete a first deploy that failed; refuse a control-plane namespace
REFUSALS = {(CORE, "events", "list")}  # the pod-creation failures of a training job's or trial's Job (Pod Security)
REFUSED = (  # a trial Job's FailedCreate event
    'Error creating: pods "t-2-ccccc" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true '
    '(pod or container "training-container" must set securityContext.runAsNonRoot=true)'
)
SERVING = {(KSERVE, "inferenceservices", v) for v in ("create", "get", "patch", "delete")} | {
    (CORE, "namespaces", "get")
}
USED = {  # by step and engine
    # create (or adopt: get), read the status, delete on a timeout or cancellation; the failed replica's log
    "train-model-on-operator (tfjob)": {(KUBEFLOW, "tfjobs", v) for v in ("create", "get", "delete")} | LOGS | REFUSALS,
    # the same for the TrainJob, after reading the runtime it names
    "train-model-on-operator (trainjob)": {(TRAINER, "trainjobs", v) for v in ("create", "get", "delete")}
    | {(TRAINER, "trainingruntimes", "get")}
    | LOGS
    | REFUSALS,
    # the same for the Experiment, deleted once the study ended; the first failed trial's log; refused trial pods
    "tune-on-katib": {(KUBEFLOW, "experiments", v) for v in ("create", "get", "delete")} | LOGS | REFUSALS,
    # Knative mode: older revisions pruned
    "deploy-model-on-kserve (knative)": SERVING | {(KNATIVE, "revisions", "list"), (KNATIVE, "revisions", "delete")},
    # Standard mode: the predictor's Deployment followed through its rollout (0.20: the canary's, then the promoted
    # one, until the previous stable Deployment is gone)
    "deploy-model-on-kserve (standard)": SERVING | {(APPS, "deployments", "get")},
}


def granted() -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in shipped_rules()
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_role_grants_exactly_what_the_steps_use():
    used = set().union(*USED.values())
    assert sorted(granted() - used) == []  # granted, used by no step
    assert sorted(used - granted()) == []


@pytest.fixture
def tfjob_api():
    api = KubeAPI(installed=dict(tfjobs.TFJOBS), rbac=shipped_rules())
    yield api
    api.close()


def test_the_training_step_uses_what_the_table_says(tfjob_api):
    tfjob_api.scripts["tfjobs"] = [{"conditions": [tfjobs.CREATED, tfjobs.RUNNING]}, {"conditions": [tfjobs.FAILED]}]
    tfjob_api.pods = [
        {
            "metadata": {
                "name": "tfpipe-train-abc-chief-0",
                "labels": {
                    "training.kubeflow.org/job-name": "tfpipe-train-abc",
                    "training.kubeflow.org/replica-type": "chief",
                },
            }
        }
    ]
    tfjob_api.logs["tfpipe-train-abc-chief-0"] = "ValueError: bad shape\n"
    client = kube.api_client(tfjob_api.url)
    with pytest.raises(TrainingJobFailed, match="chief's last log lines:\nValueError: bad shape"):
        run_tfjob(client, tfjobs.job(), poll_seconds=0, log=lambda m: None, sleep=lambda s: None)
    tfjob_api.scripts["tfjobs"] = [{"conditions": [tfjobs.CREATED, tfjobs.RUNNING]}]
    with pytest.raises(TimeoutError, match="did not finish"):
        run_tfjob(
            client, tfjobs.job(name="t2"), poll_seconds=0, timeout_seconds=0, log=lambda m: None, sleep=lambda s: None
        )
    assert tfjob_api.authorized == USED["train-model-on-operator (tfjob)"]


def test_the_training_step_on_trainer_v2_uses_what_the_table_says():
    api = KubeAPI(installed=dict(trainjobs.TRAINER), rbac=shipped_rules())
    try:
        api.put(tj.API_VERSION, "ml", tj.RUNTIME_PLURAL, tj.training_runtime(2))
        api.scripts["trainjobs"] = [trainjobs.RUNNING, {**trainjobs.RUNNING, "conditions": [trainjobs.FAILED]}]
        api.pods = [trainjobs.pod(0, {"terminated": {"exitCode": 1, "reason": "Error"}})]
        api.logs["tfpipe-train-abc-node-0-0-x1y2z"] = "ValueError: bad shape\n"
        with pytest.raises(TrainingJobFailed, match="ValueError: bad shape"):
            trainjobs.run(api, [])
        api.scripts["trainjobs"] = [trainjobs.RUNNING]
        with pytest.raises(TimeoutError):
            run_trainjob(
                kube.api_client(api.url),
                trainjobs.job(name="t2"),
                2,
                poll_seconds=0,
                timeout_seconds=0,
                log=lambda m: None,
                sleep=lambda s: None,
            )
        assert api.authorized == USED["train-model-on-operator (trainjob)"]
    finally:
        api.close()


def test_the_tuning_step_uses_what_the_table_says():
    api = KubeAPI(installed=dict(EXPERIMENTS), rbac=shipped_rules())
    try:
        api.scripts["experiments"] = [katib.FAILED_TRIAL]
        api.pods += [katib.trial_pod("t-1-bbbbb", "t-1")]
        api.logs["t-1-bbbbb"] = "ValueError: bad trial\n"
        with pytest.raises(StudyFailed, match="ValueError: bad trial"):
            run_experiment(
                kube.api_client(api.url),
                katib.build(),
                DEFAULT_STUDY,
                poll_seconds=0,
                log=lambda m: None,
                sleep=lambda s: None,
            )
        # a running trial whose Job's pod Pod Security refuses
        api.scripts["experiments"] = [{"conditions": [katib.CREATED, katib.RUNNING], "runningTrialList": ["t-2"]}]
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t-2", "namespace": "ml"}}
        api.record_event(job, "FailedCreate", REFUSED, "job-controller")
        with pytest.raises(TrialPodsRefused, match="Job ml/t-2 \\(FailedCreate\\)"):
            run_experiment(
                kube.api_client(api.url),
                katib.build(name="t2"),
                DEFAULT_STUDY,
                poll_seconds=0,
                timeout_seconds=2,
                log=lambda m: None,
                sleep=lambda s: None,
            )
        assert api.authorized == USED["tune-on-katib"]
    finally:
        api.close()


def test_the_serving_step_uses_what_the_table_says(cluster):  # noqa: F811 (the fixture)
    deploy(cluster, version=1)
    deploy(cluster, version=2, keep_previous=0)  # patched, the older revision pruned
    cluster.modes["pvc://tfpipe/model-repository/digits/3"] = "wrong"
    with pytest.raises(ServingFailed):
        deploy(cluster, version=3, name="other")  # a first deploy that fails is deleted
    assert cluster.api.authorized == USED["deploy-model-on-kserve (knative)"]


@pytest.mark.parametrize("version", ["0.16", "0.20"])
def test_the_serving_step_in_standard_mode_uses_what_the_table_says(make, version):  # noqa: F811 (the fixture)
    api = make(version, "standard", {"pvc://tfpipe/model-repository/digits/3": "fail"})
    with pytest.raises(ServingFailed):
        modes.deploy(api, 3)  # a first deploy that fails is deleted
    modes.deploy(api, 1)
    modes.deploy(api, 2)  # 0.20: a canary, promoted
    with pytest.raises(ServingFailed):
        modes.deploy(api, 3)  # rolled back (0.20: the canary removed)
    assert api.authorized == USED["deploy-model-on-kserve (standard)"]
