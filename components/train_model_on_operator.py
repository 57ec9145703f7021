"""Kubeflow training step: the final training as a TrainJob of Kubeflow Trainer v2 or a TFJob of the training
operator v1.9.

A TrainJob runs `workers` pods of the trainer image on the project's TrainingRuntime `tfpipe-tensorflow-distributed`
(manifests/kubeflow/trainer-v2), which the platform team applies to the namespace: the step checks it exists and does
not create it. Each pod derives its `TF_CONFIG` from its JobSet hostname and index; worker 0 is the chief. The
runtime's failure policy governs restarts: a worker's own error (exit 1-127) fails the job at once; a worker killed
by a signal restarts every worker, at most the runtime's `maxRestarts` times (the step warns in one line when that
is not `max_restarts`).
A TFJob has 1 `Chief` and `workers - 1` `Worker` replicas; the operator gives each pod its `TF_CONFIG`. With
`max_restarts` above 0 the replicas run with `restartPolicy: ExitCode`: a replica killed by a signal (exit code 128
and above: preempted, evicted, OOM-killed) gets a new pod, as often as it happens until the job's deadline
(`activeDeadlineSeconds`, the step's timeout); any other non-zero exit (the trainer exits 1 on an error) fails the
job at once. With 0, `Never`: any failure fails the job.
Either way the pods share the run's PersistentVolumeClaim: the step copies the prepared data onto it, the chief
writes the model, metrics and history there (`AIP_*` locations, as on Vertex; a restarted worker resumes from the
last epoch's checkpoint there), and the step copies them into its output artifacts after the job succeeds. The
step prints each new job condition, fails with the job's message and the last log lines of the first pod seen
failing (else the chief's), and deletes the job when the run is cancelled or times out.
A job whose pods the namespace's Pod Security level refuses can never run, and neither its status nor its pods show
it (the TFJob gets no status at all, the TrainJob's counts stay 0): the step reads its controller's create-failure
events (`FailedCreatePod` on the TFJob, `FailedCreate` on the JobSet's Jobs), fails in one line quoting the first
refusal and deletes the job.
"""

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from trainer.environment import LEGACY_KERAS, output_dirs
from trainer.flags import TrainerSetup

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
CONTAINER = "tensorflow"  # the container name the training operator expects (it adds the tfjob-port there)
MISSING_HINT = (
    "install the Kubeflow training operator (v1.9) or set platform.kubeflow.training: pod (N processes "
    "in the step's pod)"
)
TRAINJOB_HINT = "install Kubeflow Trainer v2 or set platform.kubeflow.training: tfjob or pod"
NO_ISTIO = {"sidecar.istio.io/inject": "false"}  # a job's pods must be able to finish (Kubeflow's mesh)


class TrainingJobFailed(RuntimeError):
    """The training job failed (its own message)."""


class PodsRefused(TrainingJobFailed):
    """The API server refuses the job's pods (Pod Security): the job can never run."""


def _tfjob_replica(pod) -> str:
    labels = pod.metadata.labels or {}
    kind = labels.get("training.kubeflow.org/replica-type", "")
    return kind if kind == "chief" else f"{kind} {labels.get('training.kubeflow.org/replica-index', '')}"


def _jobset_replica(pod) -> str:
    index = (pod.metadata.labels or {}).get("batch.kubernetes.io/job-completion-index", "")
    return "chief" if index == "0" else f"worker {index}"


@dataclass(frozen=True)
class Engine:
    """The kind-specific parts of a training job the step follows: its resource, the container its pods run, the
    label that names the job on them, `replica(pod)` (`chief`, `worker 1`), the condition type of success, and the
    kind and event reason of the object whose controller records that a pod could not be created."""

    kind: str
    group: str
    version: str
    plural: str
    container: str
    job_label: str
    replica: Callable
    succeeded: str
    pod_owner: str
    create_failed: str

    def what(self, namespace: str, name: str) -> str:
        return f"{self.kind} {namespace}/{name}"


TFJOB = Engine(
    KIND,
    GROUP,
    VERSION,
    PLURAL,
    CONTAINER,
    "training.kubeflow.org/job-name",
    _tfjob_replica,
    "Succeeded",
    KIND,  # training-operator's pod control records it on the TFJob
    "FailedCreatePod",
)
TRAINJOB = Engine(
    "TrainJob",
    "trainer.kubeflow.org",
    "v1alpha1",
    "trainjobs",
    "node",
    "jobset.sigs.k8s.io/jobset-name",
    _jobset_replica,
    "Complete",
    "Job",  # the Job controller records it on the JobSet's Job
    "FailedCreate",
)


def tfjob(
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
    max_restarts: int = 2,
    timeout_seconds: int = 0,
    labels: dict | None = None,
):
    """The TFJob, a `KubeflowOrgV1TFJob` of the training operator's SDK (kubeflow-training); `as_dict()` is what
    the API server receives."""
    from kubeflow.training import (
        KubeflowOrgV1ReplicaSpec,
        KubeflowOrgV1RunPolicy,
        KubeflowOrgV1TFJob,
        KubeflowOrgV1TFJobSpec,
    )
    from kubernetes import client

    from components.lib.kube import pod_security
    from components.lib.kube.api import volume_parts

    volumes, mounts = volume_parts(claim_name, mount_path)
    container = client.V1Container(
        name=CONTAINER,
        image=image,
        args=list(args),
        env=[client.V1EnvVar(name=k, value=str(v)) for k, v in env.items()],
        resources=resources or None,
        volume_mounts=mounts or None,
        security_context=pod_security.container_context(),
    )
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=dict(labels or {}), annotations=dict(NO_ISTIO)),
        spec=client.V1PodSpec(
            containers=[container],
            volumes=volumes or None,
            service_account_name=service_account or None,
            security_context=pod_security.pod_context(),
        ),
    )

    def replicas(count):
        return KubeflowOrgV1ReplicaSpec(replicas=count, restart_policy=restart_policy(max_restarts), template=template)

    specs = {"Chief": replicas(1)}
    if workers > 1:
        specs["Worker"] = replicas(workers - 1)
    job = KubeflowOrgV1TFJob(
        api_version=f"{GROUP}/{VERSION}",
        kind=KIND,
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=dict(labels or {})),
        spec=KubeflowOrgV1TFJobSpec(
            tf_replica_specs=specs,
            run_policy=KubeflowOrgV1RunPolicy(
                clean_pod_policy="Running",  # stop what still runs once the chief is done; keep pods for logs
                ttl_seconds_after_finished=7 * 24 * 3600,  # then the operator deletes the job
                active_deadline_seconds=timeout_seconds or None,
            ),
        ),
    )
    return job


def restart_policy(max_restarts: int) -> str:
    """The replicas' restart policy: `ExitCode` (the operator recreates a replica killed by a signal, exit code 128
    and above, and fails the job on any other non-zero code) when restarts are allowed, else `Never`. The operator
    counts no ExitCode recreation toward `backoffLimit`, so none is set: the job's deadline bounds them."""
    return "ExitCode" if max_restarts else "Never"


def as_dict(job) -> dict:
    from kubernetes import client

    return client.ApiClient().sanitize_for_serialization(job)


class FailureLog:
    """The last log lines of the first pod seen failing (its container exited with an error, or restarted after
    one), else the chief's: read at every poll and kept, since the controller may delete the pods when the job
    fails (the training operator on its backoff limit or deadline) or restarts (JobSet recreates every worker), so
    a failure's own lines must be read while its container is still there (after a crash, the kubelet waits before
    it restarts a container; once restarted, its previous attempt's lines).
    """

    def __init__(self, api, engine: Engine, namespace: str, name: str, lines: int = 20, log=print, sleep=None):
        self.api, self.engine, self.namespace, self.name, self.lines = api, engine, namespace, name, lines
        self.log, self.sleep = log, sleep
        self.kept, self.replica, self.failed_pod = "", "chief", ""

    def watch(self) -> str:
        """The chosen pod's current lines, or its previous attempt's once it has restarted; the last ones read
        when the pods (or their logs) are gone. `replica` names whose lines they are (`chief`, `worker 1`). Each
        read through `kube.call` (a transient API error is retried, not taken for the lines' absence)."""
        from kubernetes import client

        from components.lib.kube import api as kube

        def call(fn, *args, **kwargs):
            return kube.call(fn, *args, log=self.log, sleep=self.sleep, **kwargs)

        try:
            core = client.CoreV1Api(self.api)
            selector = f"{self.engine.job_label}={self.name}"
            pods = call(core.list_namespaced_pod, self.namespace, label_selector=selector).items
            statuses = {p.metadata.name: self._container_status(p) for p in pods}
            if not self.failed_pod:  # the first pod seen failing: the others may fail after it, because of it
                failed = [n for n, status in statuses.items() if _failed(status)]
                # seen failing together: one that exited with its own error before one stopped by a signal
                failed.sort(key=lambda n: not _own_error(statuses[n]))
                self.failed_pod = next(iter(failed), "")
            chosen = self.failed_pod or next((p.metadata.name for p in pods if self.engine.replica(p) == "chief"), "")
            pod = next((p for p in pods if p.metadata.name == chosen), None)
            if pod is None:
                return self.kept
            status = statuses[chosen]
            tail = call(
                core.read_namespaced_pod_log,
                pod.metadata.name,
                self.namespace,
                container=self.engine.container,
                tail_lines=self.lines,
                previous=bool(status and status.restart_count and status.state and status.state.running),
            )
            if tail:
                self.kept, self.replica = tail, self.engine.replica(pod)
        except Exception:  # noqa: BLE001 (best effort: the job's message is the error)
            pass
        return self.kept

    def _container_status(self, pod):
        statuses = (pod.status.container_statuses or []) if pod.status else []
        return next((s for s in statuses if s.name == self.engine.container), None)


def _ended(status) -> list:
    return [s.terminated for s in (status.state, status.last_state) if s is not None and s.terminated]


def _failed(status) -> bool:
    """Whether the container exited with an error, now or in its previous attempt."""
    if status is None:
        return False
    return bool(status.restart_count) or any(t.exit_code for t in _ended(status))


def _own_error(status) -> bool:
    """Whether the container exited with an error of its own (1-127), not stopped by a signal (128 and above: the
    controller stopping the other replicas once one failed, a preemption)."""
    return status is not None and any(0 < (t.exit_code or 0) < 128 for t in _ended(status))


def run_tfjob(api, job, poll_seconds: float = 10, timeout_seconds: float = 24 * 3600, log=print, sleep=None) -> dict:
    """Create (or, on a retry, adopt) the TFJob and wait for it: returns the succeeded job; raises
    TrainingJobFailed with the job's message, TimeoutError (job deleted), or kube.Cancelled (job deleted)."""

    from kubeflow.training import TrainingClient

    from components.lib.kube import api as kube

    body = as_dict(job)
    namespace, name = job.metadata.namespace, job.metadata.name
    kube.require(api, GROUP, VERSION, PLURAL, KIND, MISSING_HINT, log, sleep)
    try:
        trainer = TrainingClient(client_configuration=api.configuration, namespace=namespace, job_kind=KIND)
        kube.call(trainer.create_job, job, log=log, sleep=sleep)
        specs = body["spec"]["tfReplicaSpecs"]
        log(
            f"created {TFJOB.what(namespace, name)}: 1 chief + {specs.get('Worker', {}).get('replicas', 0)} "
            f"worker(s) of {specs['Chief']['template']['spec']['containers'][0]['image']}"
        )
    except RuntimeError as e:
        if kube.status_code(e) != 409:
            raise
        kube.create_or_adopt(api, GROUP, VERSION, namespace, PLURAL, body, log, sleep)
    return follow_job(api, TFJOB, namespace, name, poll_seconds, timeout_seconds, log, sleep)


def run_trainjob(
    api,
    body: dict,
    max_restarts: int,
    poll_seconds: float = 10,
    timeout_seconds: float = 24 * 3600,
    log=print,
    sleep=None,
) -> dict:
    """Check the TrainJob's TrainingRuntime, create (or, on a retry, adopt) the TrainJob and wait for it, as
    `run_tfjob`; EngineMissing when the namespace has no such runtime. A runtime whose `maxRestarts` is not
    `max_restarts` gets a one-line warning: its failure policy decides."""
    from kubernetes.client.exceptions import ApiException

    from components.lib.kube import api as kube, trainjob as tj

    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    kube.require(api, tj.GROUP, tj.VERSION, tj.PLURAL, tj.KIND, TRAINJOB_HINT, log, sleep)
    runtime_name = body["spec"]["runtimeRef"]["name"]
    objects = kube.custom(api)
    try:
        runtime = kube.call(
            objects.get_namespaced_custom_object,
            tj.GROUP,
            tj.VERSION,
            namespace,
            tj.RUNTIME_PLURAL,
            runtime_name,
            log=log,
            sleep=sleep,
        )
    except ApiException as e:
        if e.status != 404:
            raise
        raise kube.EngineMissing(
            f"the namespace {namespace} has no {tj.RUNTIME_KIND} {runtime_name}: apply it there "
            f"(kubectl apply -k manifests/kubeflow/trainer-v2 -n {namespace})"
        ) from None
    allowed = runtime["spec"]["template"]["spec"].get("failurePolicy", {}).get("maxRestarts", 0)
    if allowed != max_restarts:
        log(
            f"warning: {tj.RUNTIME_KIND} {namespace}/{runtime_name} restarts the workers at most {allowed} time(s), "
            f"not max_restarts={max_restarts}: its failure policy decides"
        )
    try:
        kube.call(
            objects.create_namespaced_custom_object,
            tj.GROUP,
            tj.VERSION,
            namespace,
            tj.PLURAL,
            body,
            log=log,
            sleep=sleep,
        )
        trainer = body["spec"]["trainer"]
        log(f"created {TRAINJOB.what(namespace, name)}: {trainer['numNodes']} worker(s) of {trainer['image']}")
    except ApiException as e:
        if e.status != 409:
            raise
        kube.create_or_adopt(api, tj.GROUP, tj.VERSION, namespace, tj.PLURAL, body, log, sleep)
    jobs = [
        f"{name}-{job['name']}-{index}"
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]
        for index in range(job.get("replicas", 1))
    ]
    return follow_job(api, TRAINJOB, namespace, name, poll_seconds, timeout_seconds, log, sleep, jobs)


def follow_job(
    api,
    engine: Engine,
    namespace: str,
    name: str,
    poll_seconds: float,
    timeout_seconds: float,
    log,
    sleep,
    owners: list[str] | None = None,
) -> dict:
    """Wait for the created job: print each new condition; the job once it succeeded; TrainingJobFailed with its
    message and the failing pod's last lines; deleted on cancellation or when the wait gives up. PodsRefused, the
    job deleted, once Pod Security refuses a pod of it (the create-failure events of `owners`, the objects whose
    controller creates its pods: the job itself by default)."""
    from components.lib.kube import api as kube

    what = engine.what(namespace, name)
    objects = kube.custom(api)
    follow = kube.Follower(what, log)
    replica_log = FailureLog(api, engine, namespace, name, log=log, sleep=sleep)

    def read():
        return objects.get_namespaced_custom_object(engine.group, engine.version, namespace, engine.plural, name)

    def done(obj):
        follow(obj)
        if kube.condition(obj, engine.succeeded):
            return obj
        if failed := kube.condition(obj, "Failed"):
            tail = replica_log.watch()
            raise TrainingJobFailed(
                f"{what} failed: {failed.get('message') or failed.get('reason')}"
                + (f"\n{replica_log.replica}'s last log lines:\n{tail}" if tail else "")
            )
        owner, reason = engine.pod_owner, engine.create_failed
        if refused := kube.pod_security_refusal(api, namespace, owner, owners or [name], reason, log, sleep):
            raise PodsRefused(f"{what} cannot run: the API server refuses its pods: {refused}")
        replica_log.watch()
        return None

    def remove():
        if kube.delete(api, engine.group, engine.version, namespace, engine.plural, name, log, sleep):
            log(f"deleted {what}")

    try:
        return kube.watch(read, done, remove, poll_seconds, timeout_seconds, what, log, sleep)
    except PodsRefused:
        remove()
        raise


def collect_outputs(job_dir: str, model_path: str, training_path: str) -> dict:
    """Copy the chief's model and training record from the volume into the step's artifacts; the summary."""
    if os.path.isdir(model_path):
        shutil.rmtree(model_path)
    shutil.copytree(os.path.join(job_dir, "model"), model_path)
    os.makedirs(training_path, exist_ok=True)
    for name in ("metrics.json", "history.jsonl", "logs"):
        source = os.path.join(job_dir, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(training_path, name), dirs_exist_ok=True)
        elif os.path.isfile(source):
            shutil.copy2(source, os.path.join(training_path, name))
    with open(os.path.join(training_path, "metrics.json")) as f:
        return json.load(f)


def train_with_operator(
    api,
    data_path: str,
    model_path: str,
    training_path: str,
    *,
    workers: int,
    epochs: int,
    hyperparameters: dict,
    trainer: TrainerSetup,
    max_restarts: int,
    image: str,
    namespace: str,
    service_account: str,
    claim_name: str,
    mount_path: str,
    resources: dict,
    run_id: str,
    poll_seconds: float = 10,
    timeout_seconds: float = 24 * 3600,
    log=print,
    sleep=None,
    engine: str = "tfjob",
) -> dict:
    """Stage the data on the volume, run the `engine`'s job (`tfjob` or `trainjob`), collect the model: the training
    summary (metrics.json), which names the job under the engine's key."""
    from components.lib.kube import api as kube, volume
    from components.lib.kube.trainjob import trainjob
    from trainer.flags import command_line

    name = kube.object_name("tfpipe-train", run_id, "train-model")
    run_dir = os.path.join(mount_path, "runs", kube.label_value(run_id) or "run")
    job_dir = os.path.join(run_dir, "train-model")
    os.makedirs(job_dir, exist_ok=True)
    data_dir = volume.stage_dataset(data_path, run_dir, mount_path)
    args = command_line({**hyperparameters, "epochs": epochs}, data_dir=data_dir, job_dir=job_dir, trainer=trainer)
    env = {
        **output_dirs(job_dir),
        "CLOUD_ML_HP_METRIC_FILE": f"{job_dir}/hypertune/output.metrics",
        **LEGACY_KERAS,
        "PYTHONUNBUFFERED": "1",
    }
    if engine == "trainjob":
        body = trainjob(
            name=name,
            namespace=namespace,
            image=image,
            workers=workers,
            args=args,
            env=env,
            resources=resources,
            claim_name=claim_name,
            mount_path=mount_path,
            service_account=service_account,
            timeout_seconds=int(timeout_seconds),
            labels=kube.run_labels(run_id, "train-model"),
        )
        run_trainjob(api, body, max_restarts, poll_seconds, timeout_seconds, log, sleep)
    else:
        job = tfjob(
            name,
            namespace,
            image,
            workers,
            args,
            env,
            resources,
            claim_name,
            mount_path,
            service_account,
            max_restarts,
            int(timeout_seconds),
            kube.run_labels(run_id, "train-model"),
        )
        run_tfjob(api, job, poll_seconds, timeout_seconds, log, sleep)
    summary = collect_outputs(job_dir, model_path, training_path)
    volume.release_run_folder(run_dir, data_dir != data_path)
    summary.update({engine: f"{namespace}/{name}"})
    with open(os.path.join(training_path, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


ENGINES = {"trainjob": TRAINJOB, "tfjob": TFJOB}  # auto's order of preference
NO_ENGINE = (
    "the cluster serves neither TrainJob (trainjobs.trainer.kubeflow.org/v1alpha1) nor TFJob (tfjobs.kubeflow.org/v1): "
    "install Kubeflow Trainer v2 and apply manifests/kubeflow/trainer-v2, or set platform.kubeflow.training: pod"
)


def serves(api, engine: Engine, log=print, sleep=None) -> bool:
    """Whether the API server's discovery lists the engine's resource."""
    from kubernetes.client.exceptions import ApiException

    from components.lib.kube import api as kube

    try:
        listing = kube.call(kube.custom(api).get_api_resources, engine.group, engine.version, log=log, sleep=sleep)
    except ApiException as e:
        if e.status != 404:
            raise
        return False
    return engine.plural in {r.name for r in listing.resources or []}


def choose_engine(api, setting: str, log=print, sleep=None) -> str:
    """`setting` unless it is `auto`; then `trainjob` when the cluster serves TrainJob, else `tfjob` when it serves
    TFJob (logged in one line with the reason), else EngineMissing. Training in the step's own pod is no fallback:
    this step's image has no TensorFlow (`training: pod` compiles the train-model step instead)."""
    from components.lib.kube import api as kube

    if setting != "auto":
        return setting
    skipped: list[str] = []
    for name, engine in ENGINES.items():
        resource = f"{engine.plural}.{engine.group}/{engine.version}"
        if serves(api, engine, log, sleep):
            why = f"the cluster serves {resource}" + (f", not {', '.join(skipped)}" if skipped else "")
            log(f"training engine: {engine.kind} ({why})")
            return name
        skipped.append(resource)
    raise kube.EngineMissing(NO_ENGINE)


def train_model_on_operator(
    dataset: Input[Dataset],
    workers: int,
    epochs: int,
    hyperparameters: dict,
    trainer: dict,
    max_restarts: int,
    trainer_image: str,
    namespace: str,
    service_account: str,
    claim_name: str,
    mount_path: str,
    resources: dict,
    poll_seconds: float,
    timeout_minutes: int,
    engine: str,
    model: Output[Model],
    metrics: Output[Metrics],
    training: Output[Artifact],
):
    """KFP step (kubeflow, training: auto, trainjob or tfjob): train `workers` workers of the trainer image as a
    TrainJob or a TFJob on the shared volume, with the given hyperparameters and `trainer`'s model; the model
    goes to `model`.

    Args:
        dataset: The prepared data (shards per split, stats.json).
        workers: Workers: a TrainJob's pods (worker 0 the chief), a TFJob's 1 chief and `workers - 1` workers.
        epochs: Training epochs.
        hyperparameters: Trainer flags by name with underscores.
        max_restarts: TFJob: 0, a failed replica fails the job; above 0, a replica killed by a signal (exit code
            >= 128) gets a new pod, without a count limit, until `timeout_minutes`; other exit codes fail the job
            at once. TrainJob: the runtime's `maxRestarts` decides (a warning when it differs).
        trainer_image: The trainer image the replicas run.
        namespace: Namespace of the created objects (empty: the run's namespace).
        service_account: Service account of their pods (empty: the namespace's default).
        claim_name: The shared PersistentVolumeClaim the pods mount (where the dataset and outputs live).
        mount_path: Where the pods mount the claim (paths under it are the same in every pod).
        resources: Kubernetes resources of every replica (requests, limits).
        poll_seconds: How often the step reads the objects' status, in seconds.
        timeout_minutes: The step fails when the job has not finished by then.
        engine: auto (TrainJob when the cluster serves it, else TFJob), trainjob or tfjob.
        trainer: What the trainer trains: `TrainerSetup` as a dict (the config's trainer section: the model builder,
            mixed precision, fixed hyperparameter values).
    """
    from components.lib.kube import api as kube
    from components.train_model_on_operator import ENGINES, choose_engine, train_with_operator
    from trainer.flags import TrainerSetup

    api = kube.api_client()
    summary = train_with_operator(
        api,
        dataset.path,
        model.path,
        training.path,
        workers=workers,
        epochs=epochs,
        hyperparameters=hyperparameters,
        trainer=TrainerSetup.from_dict(trainer),
        max_restarts=max_restarts,
        image=trainer_image,
        namespace=namespace or kube.own_namespace(),
        service_account=service_account,
        claim_name=claim_name,
        mount_path=mount_path,
        resources=resources,
        run_id=kube.run_id(),
        poll_seconds=poll_seconds,
        timeout_seconds=timeout_minutes * 60,
        log=kube.log_to_stdout,
        engine=choose_engine(api, engine, kube.log_to_stdout),
    )
    for key in ("val_accuracy", "val_loss", "train_accuracy", "train_loss"):
        metrics.log_metric(key, summary[key])
    model.metadata.update(
        framework="tensorflow",
        format="saved_model",
        val_accuracy=summary["val_accuracy"],
        **{k: summary[k] for k in ENGINES if k in summary},
    )
