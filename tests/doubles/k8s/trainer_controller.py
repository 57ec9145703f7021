"""Kubeflow Trainer v2.3.0's TrainJob controller and the JobSet (v0.12) and Job controllers under it, as a step sees
them, for a TrainJob on a runtime without an ML policy (the project's `tfpipe-tensorflow-distributed`).

- The JobSet is the runtime's template (a namespaced TrainingRuntime, or a ClusterTrainingRuntime) with the
  TrainJob's `runtimePatches` merged in (lists of named items by name) and its `trainer` applied to the replicated
  job labelled `trainjob-ancestor-step: trainer` (Trainer v2 sets its replicas to 1 and parallelism and completions
  to `numNodes`; the image, args, env and `resourcesPerNode` go to its `node` container).
- Each Job is `<trainjob>-<replicatedjob>-<jobindex>`; its Indexed pods `<job>-<index>-<5 chars>`, hostname
  `<job>-<index>`, subdomain the JobSet's name, the JobSet's labels and annotations (`jobset.sigs.k8s.io/*`) and the
  Job's (`batch.kubernetes.io/job-completion-index`, `JOB_COMPLETION_INDEX` in the env); the kubelet resolves the
  env's downward-API references to the pod's annotations and labels.
- The double's pods share this machine's network: each worker's port 2222 is a free host port, and the JobSet's DNS
  names are resolved for the trainer by giving each pod the `TF_CONFIG` that `trainer.distribute` derives from that
  pod's own environment, with every `<host>.<subdomain>:2222` replaced by its pod's address.
- Pod Security admission judges each pod as the Job controller creates it: a refused one is not created, and the
  Job controller records a `FailedCreate` event on its Job (`Error creating: ` and the API server's refusal; it
  sets no Job condition for it and retries with back-off, the double tries once). Nothing else shows it: JobSet
  counts the Job neither ready nor active, and the TrainJob's `jobsStatus` (copied from the JobSet) is all zeros,
  with no condition, as on a cluster.
- A container's non-zero exit fails its Job (`backoffLimit: 0`): reason `PodFailurePolicy` when the Job's
  `podFailurePolicy` has a `FailJob` rule for the exit code, else `BackoffLimitExceeded`. The JobSet's
  `failurePolicy` then applies its first rule matching the Job's reason (`FailJobSet`), else restarts every Job
  (all pods deleted and created again, `restart-attempt` + 1) while its restarts are below `maxRestarts`, else fails
  with `ReachedMaxRestarts`. A process killed by a signal exits with 128 + the signal, as a container does.
- The TrainJob's status is what Trainer v2.3.0 copies from its JobSet: `Complete` (JobSet's `Completed`) and
  `Failed` with the JobSet's reason and message, `jobsStatus` per replicated job; `activeDeadlineSeconds` fails it
  with `DeadlineExceeded`. Failed pods are kept (stopped) for their logs; deleting the TrainJob deletes them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from tests.doubles.k8s.pods import free_port
from tests.doubles.k8s.server import now

GV = "trainer.kubeflow.org/v1alpha1"
TRAINJOBS = (GV, "trainjobs")
RUNTIME_PLURALS = {"TrainingRuntime": "trainingruntimes", "ClusterTrainingRuntime": "clustertrainingruntimes"}
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
JOBSET = "jobset.sigs.k8s.io"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
NODE = "node"
# JobSet v0.12's pkg/constants
COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAIL_JOBSET = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
DEADLINE = ("DeadlineExceeded", "TrainJob exceeded its active deadline")  # Trainer v2.3.0's pkg/constants


@dataclass
class Worker:
    name: str
    hostname: str
    index: int
    pod: dict
    process: object = None

    def exit_code(self) -> int | None:
        code = self.process.process.poll()
        return 128 - code if code is not None and code < 0 else code


@dataclass
class Run:
    jobset: dict  # the JobSet's spec
    workers: list = field(default_factory=list)
    restarts: int = 0
    started: float = field(default_factory=time.monotonic)
    conditions: list = field(default_factory=list)
    finished: bool = False


def merge_named(base, patch):
    """The runtime patch's merge: objects key by key, lists of named objects item by item by name, else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: merge_named(base.get(k), v) for k, v in patch.items()}}
    named = isinstance(patch, list) and all(isinstance(i, dict) and "name" in i for i in patch)
    if isinstance(base, list) and named and all(isinstance(i, dict) and "name" in i for i in base):
        patched = {i["name"]: i for i in patch}
        merged = [merge_named(i, patched[i["name"]]) if i["name"] in patched else i for i in base]
        return merged + [i for i in patch if i["name"] not in {b["name"] for b in base}]
    return patch


def downward_env(container: dict, pod: dict) -> dict:
    """The kubelet's downward API: env `valueFrom.fieldRef` of the pod's name, namespace, annotations and labels."""
    meta = pod["metadata"]
    out = {}
    for item in container.get("env") or []:
        path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        for prefix, values in (("metadata.annotations", "annotations"), ("metadata.labels", "labels")):
            if path.startswith(f"{prefix}['"):
                out[item["name"]] = (meta.get(values) or {}).get(path[len(prefix) + 2 : -2], "")
        if path in ("metadata.name", "metadata.namespace"):
            out[item["name"]] = meta[path.split(".")[1]]
    return out


class TrainerController:
    def __init__(self, kubelet):
        self.kubelet = kubelet
        self.runs: dict[tuple, Run] = {}

    def close(self):
        for run in self.runs.values():
            self._stop(run)

    def reconcile(self, api) -> None:
        for key, obj in list(api.objects.items()):
            if (key[0], key[2]) == TRAINJOBS:
                self._reconcile(api, key, obj)
        for key in [k for k in self.runs if k not in api.objects]:
            self._stop(self.runs.pop(key))

    @staticmethod
    def _stop(run: Run):
        for worker in run.workers:
            worker.process.stop()

    def _reconcile(self, api, key, obj):
        name = key[3]
        if "deletionTimestamp" in obj["metadata"]:
            if key in self.runs:
                self._stop(self.runs.pop(key))
            api.pods[:] = [p for p in api.pods if p["metadata"]["labels"].get(f"{JOBSET}/jobset-name") != name]
            return
        run = self.runs.get(key)
        if run is None:
            runtime = self._runtime(api, key[1], obj["spec"]["runtimeRef"])
            if runtime is None:
                return  # the webhook refuses such a TrainJob; one whose runtime went away waits for it
            run = self.runs[key] = Run(jobset_spec(obj, runtime))
            self._start(api, key, obj, run)
        if run.finished or not run.workers:
            return
        for worker in run.workers:
            api.logs[worker.pod["metadata"]["name"]] = worker.process.log()
            self._pod_status(worker)
        deadline = obj["spec"].get("activeDeadlineSeconds")
        failed = next((w for w in run.workers if w.exit_code() not in (None, 0)), None)
        if deadline and time.monotonic() - run.started >= deadline:
            self._finish(api, key, run, "Failed", *DEADLINE)
        elif failed is not None:
            self._job_failed(api, key, obj, run, failed)
        elif all(w.exit_code() == 0 for w in run.workers):
            self._finish(api, key, run, "Complete", *COMPLETED)
        else:
            self._write(api, key, run)

    @staticmethod
    def _runtime(api, namespace: str, ref: dict) -> dict | None:
        kind = ref.get("kind", "ClusterTrainingRuntime")
        return api.objects.get(
            (GV, namespace if kind == "TrainingRuntime" else None, RUNTIME_PLURALS[kind], ref["name"])
        )

    def _start(self, api, key, obj, run: Run) -> None:
        """Create every Job's pods (the restart attempt `run.restarts`) and start their containers."""
        from tests.doubles.k8s.admission import pod_security_denial

        ns, name = key[1], key[3]
        run.workers = []
        labels = (api.namespaces or {}).get(ns, {})
        for rjob in run.jobset["replicatedJobs"]:
            template = rjob["template"]
            count = template["spec"].get("completions", 1)
            for job_index in range(rjob.get("replicas", 1)):
                job_name = f"{name}-{rjob['name']}-{job_index}"
                for index in range(count):
                    pod = self._pod(ns, name, rjob, job_name, job_index, index, run.restarts)
                    if denied := pod_security_denial(pod["metadata"]["name"], pod["spec"], labels):
                        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name, "namespace": ns}}
                        api.record_event(job, "FailedCreate", f"Error creating: {denied}", "job-controller")
                        continue
                    run.workers.append(Worker(pod["metadata"]["name"], pod["spec"]["hostname"], index, pod))
                    api.pods.append(pod)
        if not run.workers:
            self._write(api, key, run)
            return
        ports = {f"{w.hostname}.{name}": free_port() for w in run.workers}
        for worker in run.workers:
            (container,) = [c for c in worker.pod["spec"]["containers"] if c["name"] == NODE]
            env = {**downward_env(container, worker.pod), "JOB_COMPLETION_INDEX": str(worker.index)}
            env["TF_CONFIG"] = resolved_tf_config(container, env, ports)
            worker.process = self.kubelet.start(worker.pod, NODE, env)
            self._pod_status(worker)

    @staticmethod
    def _pod(ns, name, rjob, job_name, job_index, index, attempt) -> dict:
        template = rjob["template"]["spec"]["template"]
        marks = {
            f"{JOBSET}/jobset-name": name,
            f"{JOBSET}/replicatedjob-name": rjob["name"],
            f"{JOBSET}/replicatedjob-replicas": str(rjob.get("replicas", 1)),
            f"{JOBSET}/job-index": str(job_index),
            f"{JOBSET}/job-global-index": str(job_index),
            f"{JOBSET}/restart-attempt": str(attempt),
            COMPLETION_INDEX: str(index),
        }
        meta = template.get("metadata") or {}
        labels = {
            **(rjob["template"].get("metadata") or {}).get("labels", {}),
            **meta.get("labels", {}),
            **marks,
            "batch.kubernetes.io/job-name": job_name,
            "job-name": job_name,
        }
        pod_name = f"{job_name}-{index}-{uuid.uuid4().hex[:5]}"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "uid": str(uuid.uuid4()),
                "namespace": ns,
                "labels": labels,
                "annotations": {**meta.get("annotations", {}), **marks},
            },
            "spec": {**template["spec"], "hostname": f"{job_name}-{index}", "subdomain": name},
        }

    def _job_failed(self, api, key, obj, run: Run, worker: Worker) -> None:
        """The Job's failure reason, then the JobSet's failure policy."""
        code = worker.exit_code()
        rjob = next(
            r
            for r in run.jobset["replicatedJobs"]
            if r["name"] == worker.pod["metadata"]["labels"][f"{JOBSET}/replicatedjob-name"]
        )
        job_name = worker.pod["metadata"]["labels"]["job-name"]
        reason = "BackoffLimitExceeded"
        for rule in (rjob["template"]["spec"].get("podFailurePolicy") or {}).get("rules", []):
            codes = rule.get("onExitCodes") or {}
            hit = code in codes.get("values", [])
            if codes and (hit if codes.get("operator") == "In" else not hit) and rule["action"] == "FailJob":
                reason = "PodFailurePolicy"
                break
        policy = run.jobset.get("failurePolicy")
        if policy is None:
            self._finish(api, key, run, "Failed", FAILED_JOBS[0], first_failed(FAILED_JOBS[1], job_name))
            return
        rule = next(
            (
                r
                for r in policy.get("rules", [])
                if not r.get("onJobFailureReasons") or reason in r["onJobFailureReasons"]
            ),
            None,
        )
        if rule is not None and rule["action"] == "FailJobSet":
            self._finish(api, key, run, "Failed", FAIL_JOBSET[0], first_failed(FAIL_JOBSET[1], job_name))
        elif run.restarts >= policy.get("maxRestarts", 0):
            self._finish(api, key, run, "Failed", MAX_RESTARTS[0], first_failed(MAX_RESTARTS[1], job_name))
        else:
            self._stop(run)
            names = {w.name for w in run.workers}
            api.pods[:] = [p for p in api.pods if p["metadata"]["name"] not in names]
            for pod_name in names:
                api.logs.pop(pod_name, None)
            run.restarts += 1
            self._start(api, key, obj, run)
            self._write(api, key, run)

    def _finish(self, api, key, run: Run, kind: str, reason: str, message: str) -> None:
        run.conditions.append(
            {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now()}
        )
        run.finished = True
        for worker in run.workers:
            api.logs[worker.pod["metadata"]["name"]] = worker.process.log()
            if worker.exit_code() is None:
                worker.process.stop()
            self._pod_status(worker)
        self._write(api, key, run)

    @staticmethod
    def _pod_status(worker: Worker) -> None:
        code = worker.exit_code()
        state = (
            {"running": {"startedAt": now()}}
            if code is None
            else {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
        )
        if worker.pod.get("status", {}).get("containerStatuses", [{}])[0].get("state", {}).keys() == state.keys():
            return
        phase = "Running" if code is None else "Succeeded" if code == 0 else "Failed"
        image = next(c["image"] for c in worker.pod["spec"]["containers"] if c["name"] == NODE)
        status = {"name": NODE, "image": image, "imageID": "", "ready": code is None, "restartCount": 0, "state": state}
        worker.pod["status"] = {"phase": phase, "containerStatuses": [status]}

    @staticmethod
    def _write(api, key, run: Run) -> None:
        statuses = []
        for rjob in run.jobset["replicatedJobs"]:
            codes = [
                w.exit_code()
                for w in run.workers
                if w.pod["metadata"]["labels"][f"{JOBSET}/replicatedjob-name"] == rjob["name"]
            ]
            active = sum(c is None for c in codes)
            statuses.append(
                {
                    "name": rjob["name"],
                    "ready": 0 if run.finished else active,
                    "succeeded": int(bool(codes) and all(c == 0 for c in codes)),
                    "failed": int(any(c not in (None, 0) for c in codes)),
                    "active": int(active > 0 and not run.finished),
                    "suspended": 0,
                }
            )
        status = {"jobsStatus": statuses}
        if run.conditions:
            status["conditions"] = [dict(c) for c in run.conditions]
        api.write_status(key, status)


def first_failed(message: str, job_name: str) -> str:
    """JobSet's messageWithFirstFailedJob."""
    return f"{message} (first failed job: {job_name})"


def jobset_spec(trainjob: dict, runtime: dict) -> dict:
    """The JobSet's spec: the runtime's template, the TrainJob's runtime patches, then its trainer."""
    spec = json.loads(json.dumps(runtime["spec"]["template"]["spec"]))
    for patch in trainjob["spec"].get("runtimePatches") or []:
        template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        spec = merge_named(spec, template.get("spec") or {})
    trainer = trainjob["spec"].get("trainer") or {}
    nodes = trainer.get("numNodes") or runtime["spec"].get("mlPolicy", {}).get("numNodes", 1)
    for rjob in spec["replicatedJobs"]:
        if (rjob["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) != "trainer":
            continue
        job = rjob["template"]["spec"]
        rjob["replicas"] = 1
        job["parallelism"] = job["completions"] = nodes
        for container in job["template"]["spec"]["containers"]:
            if container["name"] != NODE:
                continue
            for field_name in ("image", "args", "command"):
                if field_name in trainer:
                    container[field_name] = list(trainer[field_name]) if field_name != "image" else trainer["image"]
            container["env"] = merge_named(container.get("env") or [], trainer.get("env") or [])
            if "resourcesPerNode" in trainer:
                container["resources"] = trainer["resourcesPerNode"]
    return spec


def resolved_tf_config(container: dict, downward: dict, ports: dict) -> str:
    """The `TF_CONFIG` the trainer derives from the pod's environment, its JobSet hostnames resolved."""
    from trainer.distribute import tf_config_from_jobset

    env = {item["name"]: item.get("value", "") for item in container.get("env") or [] if "value" in item}
    config = tf_config_from_jobset({**env, **downward})
    hosts = config["cluster"]["worker"]
    config["cluster"]["worker"] = [f"127.0.0.1:{ports[h.rsplit(':', 1)[0]]}" for h in hosts]
    return json.dumps(config, separators=(",", ":"))
