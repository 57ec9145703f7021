"""The Kubeflow training operator (release-1.9) for TFJobs, as a step sees it: one pod a replica
(`<job>-<type>-<i>`, the operator's labels), `TF_CONFIG` (`chief` / `worker` cluster keys, the task's type and
index, only for more than one replica) with each replica's address at a free local port (the double's DNS), the
replicas run by the kubelet double; `restartPolicy: OnFailure` restarts a failed container until the restarts reach
`runPolicy.backoffLimit`; `restartPolicy: ExitCode` (pods run with `restartPolicy: Never`) deletes a pod that
failed with a retryable exit code (128 and above: killed by a signal) and creates a new one (its log starts empty;
the job is `Restarting` while it starts; it adds nothing to a restart count, so `backoffLimit` does not bound it),
and fails the job at once on any other exit code; the chief's exit decides success; `activeDeadlineSeconds` fails the job; the conditions and
messages are the operator's. `cleanPodPolicy: Running` stops the other replicas once the job has finished.

Pod Security admission judges each replica's pod as the operator creates it (release-1.9's ReconcilePods, replica
types in the spec's order): a refused pod makes the operator record a `FailedCreatePod` event on the TFJob
(`Error creating: ` and the API server's refusal) and end the reconcile with the error before it writes any status:
the TFJob keeps no status (no condition, no start time, so no deadline either). The operator keeps the pods it
created before the refused one and retries it with back-off (a repeat of the event counts it up); the double
creates no pod of such a TFJob and tries once."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from tests.doubles.k8s.admission import pod_security_denial
from tests.doubles.k8s.pods import free_port
from tests.doubles.k8s.server import now

TFJOBS = ("kubeflow.org/v1", "tfjobs")


@dataclass
class Replica:
    name: str
    rtype: str
    index: int
    pod: dict
    process: object = None
    restarts: int = 0
    failed_at: float | None = None
    uid: int = 1  # a new pod of the replica (ExitCode's recreation) gets the next one


@dataclass
class Job:
    replicas: list = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    conditions: list = field(default_factory=list)
    finished: bool = False
    cluster: dict = field(default_factory=dict)  # TF_CONFIG's cluster: replica type -> addresses
    start_time: str = field(default_factory=now)
    restarting_until: float = 0.0  # a recreated pod's start-up: the job is Restarting until then
    refused: bool = False  # Pod Security refused a replica's pod: nothing runs, no status is written


class TrainingOperator:
    def __init__(self, kubelet, restart_delay: float = 1.0):
        """`restart_delay`: the kubelet's back-off before it restarts a crashed container (10 s at first there), and
        how long a recreated pod takes to start (the job is Restarting meanwhile)."""
        self.kubelet, self.restart_delay = kubelet, restart_delay
        self.jobs: dict[tuple, Job] = {}

    def close(self):
        for job in self.jobs.values():
            self._stop(job)

    def reconcile(self, api) -> None:
        for key, obj in list(api.objects.items()):
            if (key[0], key[2]) == TFJOBS:
                self._reconcile(api, key, obj)
        for key in [k for k in self.jobs if k not in api.objects]:
            self._stop(self.jobs.pop(key))

    def _stop(self, job: Job):
        for replica in job.replicas:
            if replica.process is not None:
                replica.process.stop()

    def _condition(self, job: Job, kind: str, reason: str, message: str):
        """The operator's setCondition: Running and Restarting replace each other; an end sets Running False."""
        for c in job.conditions:
            if c["type"] == "Running" and kind in ("Succeeded", "Failed"):
                c["status"] = "False"
        replaced = {kind, *({"Running": ["Restarting"], "Restarting": ["Running"]}.get(kind, []))}
        job.conditions = [c for c in job.conditions if c["type"] not in replaced]
        job.conditions.append(
            {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now()}
        )

    def _reconcile(self, api, key, obj):
        _, ns, _, name = key
        if "deletionTimestamp" in obj["metadata"]:
            if key in self.jobs:
                self._stop(self.jobs.pop(key))
            api.pods[:] = [p for p in api.pods if p["metadata"]["labels"].get("training.kubeflow.org/job-name") != name]
            return
        job = self.jobs.get(key)
        if job is None:
            job = self.jobs[key] = self._create(api, ns, name, obj)
        if job.finished or job.refused:
            return
        spec = obj["spec"]
        run_policy = spec.get("runPolicy") or {}
        for replica in job.replicas:
            code = replica.process.process.poll()
            api.logs[replica.name] = replica.process.log()
            if code is None or code == 0:
                continue
            policy = spec["tfReplicaSpecs"][replica.rtype].get("restartPolicy", "Never")
            if policy == "ExitCode" and code < 128:  # training-operator's IsRetryableExitCode: code >= 128
                self._pod_status(replica, {"terminated": {"exitCode": code, "reason": "Error"}}, phase="Failed")
                self._fail(api, key, job, f'job "{name}" is failing because "{replica.rtype}" replica(s) failed.')
                return
            if policy == "ExitCode":
                self._recreate(api, name, job, replica, code)
                continue
            if policy not in ("OnFailure", "Always"):  # the kubelet reports the pod's end, as in every case
                self._pod_status(replica, {"terminated": {"exitCode": code, "reason": "Error"}}, phase="Failed")
                self._fail(api, key, job, f"TFJob {ns}/{name} has failed because 1 {replica.rtype} replica(s) failed.")
                return
            # the kubelet restarts the container in place, after a back-off (CrashLoopBackOff)
            if replica.failed_at is None:
                replica.failed_at = time.monotonic()
                self._pod_status(replica, {"terminated": {"exitCode": code, "reason": "Error"}})
            elif time.monotonic() - replica.failed_at >= self.restart_delay:
                api.previous_logs[replica.name] = replica.process.log()
                replica.process.stop()
                replica.restarts, replica.failed_at = replica.restarts + 1, None
                replica.process = self.kubelet.start(replica.pod, "tensorflow", self._env(job, replica))
                self._pod_status(replica, {"running": {"startedAt": now()}})
        limit = run_policy.get("backoffLimit")
        if limit is not None and sum(r.restarts for r in job.replicas) >= max(limit, 1):
            self._fail(api, key, job, f"Job {name} has failed because it has reached the specified backoff limit", True)
            return
        deadline = run_policy.get("activeDeadlineSeconds")
        if deadline and time.monotonic() - job.started >= deadline:
            self._fail(
                api, key, job, f"Job {name} has failed because it was active longer than specified deadline", True
            )
            return
        chief = next((r for r in job.replicas if r.rtype in ("Chief", "Master")), job.replicas[0])
        if chief.process.process.poll() == 0:
            self._finish(api, key, job, "Succeeded", "TFJobSucceeded", f"TFJob {ns}/{name} successfully completed.")
            return
        if not any(c["type"] == "Running" for c in job.conditions) and time.monotonic() >= job.restarting_until:
            self._condition(job, "Running", "TFJobRunning", f"TFJob {ns}/{name} is running.")
        self._write(api, key, job)

    def _recreate(self, api, name: str, job: Job, replica: Replica, code: int) -> None:
        """ExitCode and a retryable code: the failed pod shows its exit first, then the operator deletes it (its log
        with it) and creates a new pod of the replica."""
        if replica.failed_at is None:
            replica.failed_at = time.monotonic()
            self._pod_status(replica, {"terminated": {"exitCode": code, "reason": "Error"}}, phase="Failed")
            return
        replica.process.stop()
        api.pods[:] = [p for p in api.pods if p is not replica.pod]
        api.logs.pop(replica.name, None)
        replica.pod = {k: v for k, v in replica.pod.items() if k != "status"}
        replica.uid, replica.failed_at = replica.uid + 1, None
        replica.pod["metadata"] = {**replica.pod["metadata"], "uid": f"{replica.name}-{replica.uid}"}
        api.pods.append(replica.pod)
        replica.process = self.kubelet.start(replica.pod, "tensorflow", self._env(job, replica))
        self._pod_status(replica, {"running": {"startedAt": now()}})
        self._condition(
            job, "Restarting", "TFJobRestarting", f"job {name} is restarting because {replica.rtype} replica(s) failed."
        )
        job.restarting_until = time.monotonic() + self.restart_delay

    def _create(self, api, ns, name, obj) -> Job:
        job = Job()
        self._condition(job, "Created", "TFJobCreated", f"TFJob {name} is created.")
        namespace_labels = (api.namespaces or {}).get(ns) or {}
        for rtype, rspec in obj["spec"]["tfReplicaSpecs"].items():
            for index in range(rspec.get("replicas", 1)):
                template = rspec["template"]
                pod_name = f"{name}-{rtype.lower()}-{index}"
                labels = {
                    **(template.get("metadata") or {}).get("labels", {}),
                    "training.kubeflow.org/operator-name": "tfjob-controller",
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": rtype.lower(),
                    "training.kubeflow.org/replica-index": str(index),
                }
                restart = rspec.get("restartPolicy", "Never")
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "uid": f"{pod_name}-1",
                        "namespace": ns,
                        "labels": labels,
                        "annotations": (template.get("metadata") or {}).get("annotations", {}),
                    },
                    "spec": {**template["spec"], "restartPolicy": "Never" if restart == "ExitCode" else restart},
                }
                if denied := pod_security_denial(pod_name, pod["spec"], namespace_labels):
                    api.record_event(obj, "FailedCreatePod", f"Error creating: {denied}", "tfjob-controller")
                    return Job(refused=True)
                job.replicas.append(Replica(pod_name, rtype, index, pod))
        api.pods += [r.pod for r in job.replicas]
        ports = {r.name: free_port() for r in job.replicas}
        cluster: dict = {}
        for r in job.replicas:
            cluster.setdefault(r.rtype.lower(), []).append(f"127.0.0.1:{ports[r.name]}")
        job.cluster = cluster
        for replica in job.replicas:
            replica.process = self.kubelet.start(replica.pod, "tensorflow", self._env(job, replica))
            self._pod_status(replica, {"running": {"startedAt": now()}})
        return job

    @staticmethod
    def _pod_status(replica: Replica, state: dict, phase: str = "Running") -> None:
        image = replica.pod["spec"]["containers"][0]["image"]
        status = {
            "name": "tensorflow",
            "image": image,
            "imageID": "",
            "ready": "running" in state,
            "restartCount": replica.restarts,
            "state": state,
        }
        replica.pod["status"] = {"phase": phase, "containerStatuses": [status]}

    @staticmethod
    def _env(job: Job, replica: Replica) -> dict:
        if len(job.replicas) == 1:
            return {}
        config = {
            "cluster": job.cluster,
            "task": {"type": replica.rtype.lower(), "index": replica.index},
            "environment": "cloud",
        }
        return {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}

    def _fail(self, api, key, job: Job, message: str, delete_pods: bool = False):
        self._finish(api, key, job, "Failed", "TFJobFailed", message, delete_pods)

    def _finish(self, api, key, job: Job, kind: str, reason: str, message: str, delete_pods: bool = False):
        """The job's end: cleanPodPolicy Running stops what still runs; a backoff or deadline failure deletes every
        pod (their logs with them), whatever the policy."""
        self._condition(job, kind, reason, message)
        job.finished = True
        for replica in job.replicas:
            api.logs[replica.name] = replica.process.log()
            if replica.process.process.poll() is None:
                replica.process.stop()
        if delete_pods:
            names = {r.name for r in job.replicas}
            api.pods[:] = [p for p in api.pods if p["metadata"]["name"] not in names]
            for store in (api.logs, api.previous_logs):
                for pod_name in names:
                    store.pop(pod_name, None)
        self._write(api, key, job)

    @staticmethod
    def _write(api, key, job: Job):
        statuses: dict = {}
        for r in job.replicas:
            code = r.process.process.poll()
            bucket = "active" if code is None else "succeeded" if code == 0 else "failed"
            statuses.setdefault(r.rtype, {}).setdefault(bucket, 0)
            statuses[r.rtype][bucket] += 1
        api.write_status(
            key,
            {"conditions": [dict(c) for c in job.conditions], "replicaStatuses": statuses, "startTime": job.start_time},
        )
