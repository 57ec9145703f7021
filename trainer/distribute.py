"""Distribution strategy, cluster and chief detection, chief-only write locations.

Understands plain `TF_CONFIG` (chief is `chief`, or `worker` 0 when the cluster has no chief) and Vertex AI's
`CLUSTER_SPEC` (`workerpool0..3`), which is translated to `TF_CONFIG` before the strategy is built.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass

VERTEX_POOL_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps", "workerpool3": "evaluator"}
TRAINING_ROLES = ("chief", "worker")


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


def resolve_tf_config(environ=os.environ) -> dict | None:
    """Return the TF_CONFIG dict for this process, setting it from CLUSTER_SPEC when only that is given."""
    if environ.get("TF_CONFIG"):
        return json.loads(environ["TF_CONFIG"])
    if environ.get("CLUSTER_SPEC"):
        config = tf_config_from_cluster_spec(json.loads(environ["CLUSTER_SPEC"]))
        environ["TF_CONFIG"] = json.dumps(config)
        return config
    return None


def cluster_from_env(environ=os.environ) -> Cluster:
    config = resolve_tf_config(environ)
    if not config:
        return Cluster("chief", 0, 1, has_chief=True)
    cluster = config.get("cluster", {})
    task = config.get("task", {})
    num_workers = sum(len(cluster.get(role, [])) for role in TRAINING_ROLES)
    return Cluster(task.get("type", "worker"), int(task.get("index", 0)), num_workers, has_chief="chief" in cluster)


def make_strategy(cluster: Cluster):
    """MultiWorkerMirroredStrategy for a multi-process cluster, Mirrored for >1 local GPU, else default."""
    import tensorflow as tf

    if cluster.num_workers > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


PEER_LOST = 138  # 128 + SIGUSR1: the status training-operator's ExitCode policy sets aside for retryable errors


def peer_lost_status(error: BaseException) -> int | None:
    """PEER_LOST when `error` means another worker (or a service the step needs) stopped answering: a collective
    aborted, a heartbeat or deadline missed. Restarting the worker group resumes from the backup, so schedulers
    should retry it (training-operator's `ExitCode` policy restarts statuses from 128 up, the local launcher restarts
    a group whose worker was lost); None for any other error, which would fail the same way again."""
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
