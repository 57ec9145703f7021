"""Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1`): the project's TrainingRuntime for multi-worker TensorFlow
and the TrainJob of a run on it, as the API server receives them (dicts with the API's field names).

Trainer v2 runs a TrainJob as a JobSet made from its runtime's template: the replicated job labelled as the
`trainer` step (one Job: Trainer v2 sets its replicas to 1) gets `numNodes` Indexed pods whose `node` container runs
the TrainJob's image, args and env. Trainer v2 ships no TensorFlow runtime and sets no `TF_CONFIG`: each pod builds
it from its JobSet hostname, its completion index and the number of workers (`trainer.distribute`), which the
runtime passes through the downward API and the TrainJob through `TFPIPE_NUM_WORKERS`.
"""

from __future__ import annotations

from components.lib.kube import pod_security
from components.lib.kube.api import volume_parts
from trainer.distribute import JOBSET_PORT, JOBSET_WORKERS

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL, KIND = "trainjobs", "TrainJob"
RUNTIME_PLURAL, RUNTIME_KIND = "trainingruntimes", "TrainingRuntime"
RUNTIME = "tfpipe-tensorflow-distributed"
NODE = "node"  # the replicated job and the container name Trainer v2 applies the TrainJob's trainer to
RUNTIME_IMAGE = "kind.local/tfpipe/trainer:dev"  # each TrainJob sets its own image
MANAGER = "tfpipe"  # the owner of the TrainJob's runtime patch
NO_ISTIO = {"sidecar.istio.io/inject": "false"}  # a job's pods must be able to finish (Kubeflow's mesh)
# the JobSet pod annotations the runtime passes to the trainer (trainer.distribute.JOBSET_ENV)
FROM_ANNOTATIONS = {
    "TFPIPE_JOBSET_NAME": "jobset.sigs.k8s.io/jobset-name",
    "TFPIPE_REPLICATED_JOB": "jobset.sigs.k8s.io/replicatedjob-name",
    "TFPIPE_JOB_INDEX": "jobset.sigs.k8s.io/job-index",
}
FATAL_EXIT_CODES = list(range(1, 128))  # the trainer's own errors; 128 and above: killed by a signal (retryable)


def failure_policy(max_restarts: int) -> dict:
    """The JobSet's failure policy for `max_restarts`: a worker exiting with 1-127 (its own error) fails the JobSet
    at once; any other failure (a worker killed by a signal: preempted, evicted, OOM-killed) recreates every worker,
    at most `max_restarts` times, and training resumes from the last epoch's checkpoint on the volume."""
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
    return {
        "maxRestarts": max_restarts,
        "rules": [{"name": "trainer-error", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
    }


def training_runtime(max_restarts: int = 2, name: str = RUNTIME) -> dict:
    """The TrainingRuntime `name`: one Indexed Job of workers (no retry inside it: a failed worker fails the Job,
    and the JobSet's `failure_policy(max_restarts)` decides), pods as Pod Security `restricted` admits."""
    env = [
        {"name": var, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}
        for var, key in FROM_ANNOTATIONS.items()
    ]
    container = {
        "name": NODE,
        "image": RUNTIME_IMAGE,
        "env": env,
        "ports": [{"name": "tf-worker", "containerPort": JOBSET_PORT}],
        "securityContext": pod_security.container_context(),
    }
    job = {
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": NODE, "operator": "In", "values": FATAL_EXIT_CODES},
                }
            ]
        },
        "template": {
            "metadata": {"annotations": dict(NO_ISTIO)},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": pod_security.pod_context(),
                "containers": [container],
            },
        },
    }
    return {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "tensorflow"}},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "failurePolicy": failure_policy(max_restarts),
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": job,
                            },
                        }
                    ],
                }
            },
        },
    }


def trainjob(
    name: str,
    namespace: str,
    image: str,
    workers: int,
    args: list[str],
    env: dict,
    resources: dict,
    claim_name: str,
    mount_path: str,
    service_account: str = "",
    timeout_seconds: int = 0,
    labels: dict | None = None,
    runtime: str = RUNTIME,
) -> dict:
    """The TrainJob of `workers` pods of `image` on the TrainingRuntime `runtime` of its namespace: worker 0 is the
    chief; each pod mounts the claim at `mount_path`, carries `labels`, runs as `service_account` (empty: the
    namespace's default); the job is stopped after `timeout_seconds` (0: no deadline)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    volumes, mounts = volume_parts(claim_name, mount_path)
    pod_spec: dict = {"volumes": volumes, "containers": [{"name": NODE, "volumeMounts": mounts}]} if volumes else {}
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    pod = {"metadata": {"labels": dict(labels or {})}, "spec": pod_spec}
    spec: dict = {
        "runtimeRef": {"apiGroup": GROUP, "kind": RUNTIME_KIND, "name": runtime},
        "trainer": {
            "image": image,
            "args": list(args),
            "env": [{"name": k, "value": str(v)} for k, v in {**env, JOBSET_WORKERS: workers}.items()],
            "numNodes": workers,
            **({"resourcesPerNode": resources} if resources else {}),
        },
        "runtimePatches": [
            {
                "manager": MANAGER,
                "trainingRuntimeSpec": {
                    "template": {"spec": {"replicatedJobs": [{"name": NODE, "template": {"spec": {"template": pod}}}]}}
                },
            }
        ],
    }
    if timeout_seconds:
        spec["activeDeadlineSeconds"] = timeout_seconds
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }
