"""Distribution strategy, cluster and chief detection, chief-only write locations.

Understands plain `TF_CONFIG` (chief is `chief`, or `worker` 0 when the cluster has no chief), Vertex AI's
`CLUSTER_SPEC` (`workerpool0..3`) and the pods of a JobSet (Kubeflow Trainer v2's TrainJob on the project's
TrainingRuntime, which sets no `TF_CONFIG`: see `tf_config_from_jobset`); the latter two are translated to
`TF_CONFIG` before the strategy is built.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass

VERTEX_POOL_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps", "workerpool3": "evaluator"}
TRAINING_ROLES = ("chief", "worker")
# A JobSet pod's environment (manifests/kubeflow/trainer-v2: the runtime maps the JobSet's pod annotations to these;
# Kubernetes sets JOB_COMPLETION_INDEX in an Indexed Job's pods; the TrainJob sets the number of workers)
JOBSET_ENV = ("TFPIPE_JOBSET_NAME", "TFPIPE_REPLICATED_JOB", "TFPIPE_JOB_INDEX", "JOB_COMPLETION_INDEX")
JOBSET_WORKERS = "TFPIPE_NUM_WORKERS"
JOBSET_PORT = 2222  # the port each worker's collective ops listen on (the runtime declares it on the container)


@dataclass(frozen=True)
class Cluster:
    """Where this process sits in the training cluster."""

    task_type: str
    task_index: int
    num_workers: int  # chief + workers (the processes that train)
    has_chief: bool = False

    @property
    def is_chief(self) -> bool:
        if self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and not self.has_chief

    @property
    def rank(self) -> int:
        """0 for the chief, then 1.. for the other workers (distinct per training process)."""
        if self.task_type == "chief":
            return 0
        return self.task_index + (1 if self.has_chief else 0)

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.task_index}"


def tf_config_from_cluster_spec(cluster_spec: dict) -> dict:
    """Translate Vertex `CLUSTER_SPEC` into the equivalent `TF_CONFIG`."""
    cluster = {VERTEX_POOL_ROLES[pool]: hosts for pool, hosts in cluster_spec["cluster"].items() if hosts}
    task = cluster_spec["task"]
    return {"cluster": cluster, "task": {"type": VERTEX_POOL_ROLES[task["type"]], "index": int(task["index"])}}


def tf_config_from_jobset(environ) -> dict:
    """`TF_CONFIG` for a pod of a JobSet's Indexed Job of `TFPIPE_NUM_WORKERS` pods: every pod is a `worker`
    (worker 0 is the chief), its index is `JOB_COMPLETION_INDEX`, and worker i's address is the stable hostname
    JobSet gives it, `JOBSET-REPLICATEDJOB-JOBINDEX-i.JOBSET:JOBSET_PORT` (the JobSet's default subdomain is its
    name). Raises ValueError naming the variable that is missing or not a valid number."""
    missing = [name for name in (*JOBSET_ENV, JOBSET_WORKERS) if not environ.get(name)]
    if missing:
        raise ValueError(f"cannot build TF_CONFIG for a JobSet pod: {', '.join(missing)} not set")
    workers, job_index, index = (_count(environ, name) for name in (JOBSET_WORKERS, "TFPIPE_JOB_INDEX", JOBSET_ENV[3]))
    if workers < 1 or index >= workers:
        raise ValueError(
            f"cannot build TF_CONFIG for a JobSet pod: JOB_COMPLETION_INDEX={index} is not below "
            f"{JOBSET_WORKERS}={workers}"
        )
    jobset, replicated_job = environ["TFPIPE_JOBSET_NAME"], environ["TFPIPE_REPLICATED_JOB"]
    hosts = [f"{jobset}-{replicated_job}-{job_index}-{i}.{jobset}:{JOBSET_PORT}" for i in range(workers)]
    return {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}


def _count(environ, name: str) -> int:
    value = environ[name]
    if not value.isdigit():
        raise ValueError(f"cannot build TF_CONFIG for a JobSet pod: {name}={value!r} is not a whole number")
    return int(value)


def resolve_tf_config(environ=os.environ) -> dict | None:
    """Return the TF_CONFIG dict for this process, setting it from CLUSTER_SPEC, else from a JobSet pod's
    environment (`TFPIPE_JOBSET_NAME` set), when TF_CONFIG is not given."""
    if environ.get("TF_CONFIG"):
        return json.loads(environ["TF_CONFIG"])
    if environ.get("CLUSTER_SPEC"):
        config = tf_config_from_cluster_spec(json.loads(environ["CLUSTER_SPEC"]))
    elif environ.get("TFPIPE_JOBSET_NAME"):
        config = tf_config_from_jobset(environ)
    else:
        return None
    environ["TF_CONFIG"] = json.dumps(config)
    return config


def cluster_from_env(environ=os.environ) -> Cluster:
    config = resolve_tf_config(environ)
    if not config:
        return Cluster("chief", 0, 1, has_chief=True)
    cluster = config.get("cluster", {})
    task = config.get("task", {})
    num_workers = sum(len(cluster.get(role, [])) for role in TRAINING_ROLES)
    return Cluster(task.get("type", "worker"), int(task.get("index", 0)), num_workers, has_chief="chief" in cluster)


def strategy_for(num_workers: int, gpus: list) -> str:
    """The strategy a process of a cluster of `num_workers` builds with `gpus` (the GPUs TensorFlow lists):
    MultiWorkerMirroredStrategy across processes (over each one's GPUs), MirroredStrategy across the GPUs of a single
    process with more than one, else the default strategy (one device)."""
    if num_workers > 1:
        return "MultiWorkerMirroredStrategy"
    return "MirroredStrategy" if len(gpus) > 1 else "default"


def training_devices(gpus: list[str]) -> list[str]:
    """The devices a process trains on, given the names of the GPUs TensorFlow lists (`/physical_device:GPU:0`):
    `GPU:0`, ..., else `CPU:0`."""
    return [name.rsplit("device:", 1)[-1] for name in gpus] or ["CPU:0"]


def make_strategy(cluster: Cluster):
    """The strategy `strategy_for` chooses for this process's cluster and the GPUs TensorFlow lists."""
    import tensorflow as tf

    name = strategy_for(cluster.num_workers, tf.config.list_physical_devices("GPU"))
    return tf.distribute.get_strategy() if name == "default" else getattr(tf.distribute, name)()


PEER_LOST = 138  # 128 + SIGUSR1: the status training-operator's ExitCode policy sets aside for retryable errors


def peer_lost_status(error: BaseException) -> int | None:
    """PEER_LOST when `error` means another worker (or a service the step needs) stopped answering: a collective
    aborted, a heartbeat or deadline missed. Restarting the worker group resumes after the last checkpointed epoch,
    so schedulers should retry it (training-operator's `ExitCode` policy restarts statuses from 128 up, the local
    launcher restarts a group whose worker was lost); None for any other error, which would fail the same way
    again."""
    import tensorflow as tf

    lost = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)
    return PEER_LOST if isinstance(error, lost) else None


PUBLIC_NAMES = {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy", "_DefaultDistributionStrategy": "default"}


def strategy_name(strategy) -> str:
    """The strategy's public name (MWMS's class is CollectiveAllReduceStrategy)."""
    return PUBLIC_NAMES.get(type(strategy).__name__, type(strategy).__name__)


def write_location(final_dir: str, cluster: Cluster) -> str:
    """The chief writes to `final_dir`; other workers get a unique temporary directory (see `discard`)."""
    if cluster.is_chief:
        return final_dir
    return tempfile.mkdtemp(prefix=f"tfpipe-{cluster.name}-")


def discard(write_dir: str, final_dir: str) -> None:
    """Remove a non-chief worker's temporary output."""
    if write_dir != final_dir:
        shutil.rmtree(write_dir, ignore_errors=True)
