"""The Kubernetes API as the kubeflow target's engine steps use it (TFJob, Katib Experiment, InferenceService):
the official `kubernetes` client on custom objects, plus what every engine step needs around it.

- `api_client()`: in-cluster credentials in a pod (the run's service account), else the kube-config;
- `require()`: fail at once, naming the missing resource kind, when the cluster lacks an engine's CRD;
- `create_or_adopt()`: create an object; after a step retry the object of the same name (same run, same task) is
  adopted instead of failing with 409;
- `call()`: one API call retried while the API server fails transiently: 429 (API Priority and Fairness),
  500/502/503/504 and lost connections, with google-api-core's jittered exponential backoff, at least the server's
  `Retry-After` (the client's urllib3 already waits it out and retries a 429 or 503 that names one);
- `poll()`/`watch()`: wait for an object, every read through `call()`; `watch` deletes the object when the wait
  gives up (timeout, an API that stays unavailable) or the run is cancelled;
- `Follower`: prints each new status condition once, as the step polls;
- `pod_security_refusal()`: a controller's event quoting the API server's Pod Security refusal of a pod it creates
  (nothing in the job's status shows it);
- `on_cancel()`: a cancelled run stops the step's pod with SIGTERM: delete the object the step created, then exit;
- `object_name()`: a DNS-1035 name from a prefix and the run's identity, stable across retries of the same task.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import sys
import time

NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
CALL_ATTEMPTS = 8  # with backoff from 1 s doubling to 30 s: about two minutes of an unavailable API server
MANAGED_BY = {"app.kubernetes.io/managed-by": "tfpipe"}
POD_SECURITY = "violates PodSecurity"  # the API server's refusal of a pod by Pod Security admission


class EngineMissing(RuntimeError):
    """The cluster has no such resource kind (its operator is not installed)."""


class Cancelled(RuntimeError):
    """The step was stopped (run cancelled); the object it created was deleted."""


def api_client(host: str = ""):
    """A `kubernetes.client.ApiClient`: for `host` without credentials (tests, `kubectl proxy`), else in-cluster
    config inside a pod, else the kube-config."""
    from kubernetes import client, config

    if host:
        configuration = client.Configuration()
        configuration.host = host
        return client.ApiClient(configuration)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    return client.ApiClient()


# The run's identity in an engine step: the name of the run's Argo Workflow, which labels every pod of the run, given
# to the step's container by the downward API (kfp-kubernetes' use_field_path_as_env). Not a step input: the run's
# name in an input is in the step's cache key, so a scheduled run on unchanged data would never hit the cache.
RUN_ID_ENV = "TFPIPE_RUN_ID"
RUN_ID_FIELD = "metadata.labels['workflows.argoproj.io/workflow']"


def run_id() -> str:
    """The pipeline run this step belongs to (the same for a retry of the step)."""
    value = os.environ.get(RUN_ID_ENV, "").strip()
    if not value:
        raise RuntimeError(
            f"{RUN_ID_ENV} is not set: the kubeflow target's engine steps take the run's name from their pod's "
            f"{RUN_ID_FIELD} (compile the pipeline with --target kubeflow)"
        )
    return value


def own_namespace(default: str = "default") -> str:
    """The namespace of the pod this runs in (the run's namespace on Kubeflow)."""
    try:
        with open(NAMESPACE_FILE) as f:
            return f.read().strip() or default
    except OSError:
        return default


def custom(api):
    from kubernetes import client

    return client.CustomObjectsApi(api)


def require(api, group: str, version: str, plural: str, kind: str, hint: str, log=print, sleep=None) -> None:
    """Raise EngineMissing unless the API server serves `plural` in `group/version`."""
    from kubernetes.client.exceptions import ApiException

    try:
        listing = call(custom(api).get_api_resources, group, version, log=log, sleep=sleep)
    except ApiException as e:
        if e.status != 404:
            raise
        listing = None
    if listing is None or plural not in {r.name for r in listing.resources or []}:
        raise EngineMissing(f"the cluster has no {kind} ({plural}.{group}/{version}): {hint}")


def status_code(error: BaseException | None) -> int | None:
    """The HTTP status of an ApiException, also when a client library wrapped it."""
    while error is not None:
        status = getattr(error, "status", None)
        if status is not None:
            return status
        error = error.__cause__
    return None


def transient(error: BaseException) -> bool:
    """Whether the API server may answer the same call differently soon: a transient status, or no answer at all."""
    import urllib3

    status = status_code(error)
    if status is not None:
        return status in TRANSIENT_STATUS
    lost = ConnectionError | urllib3.exceptions.ProtocolError | urllib3.exceptions.MaxRetryError
    return any(isinstance(e, lost) for e in _chain(error))


def _chain(error: BaseException):
    """The error and those it was raised from or while handling (a client library may wrap it either way), or that
    it carries as an argument (urllib3's ProtocolError, which its MaxRetryError is raised from, holds the lost
    connection's error so)."""
    current: BaseException | None = error
    while current is not None:
        yield current
        carried = next((a for a in current.args if isinstance(a, BaseException)), None)
        current = current.__cause__ or current.__context__ or carried


def retry_after(error: BaseException) -> float:
    """The seconds the server's `Retry-After` header asks for (0 when it names none)."""
    headers = getattr(error, "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After", 0)))
    except (TypeError, ValueError, AttributeError):
        return 0.0


def describe(error: BaseException) -> str:
    """`HTTP 503 Service Unavailable`, `connection lost (RemoteDisconnected)`, or the error's type and first line."""
    status = status_code(error)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '') or ''}".strip()
    lost = next((e for e in _chain(error) if isinstance(e, ConnectionError)), None)
    if lost is not None:
        return f"connection lost ({type(lost).__name__})"
    return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}".rstrip(": ")


def call(fn, *args, attempts: int = CALL_ATTEMPTS, sleep=None, log=print, **kwargs):
    """`fn(*args, **kwargs)`, retried while it fails with a `transient` error, at most `attempts` times: each wait
    the next of google-api-core's jittered exponential delays (1 s doubling to 30 s), at least the server's
    `Retry-After` (`sleep`: None is `time.sleep`, as everywhere here). A create whose answer was lost comes back as
    409 and a delete as 404: callers adopt those."""
    from google.api_core.retry import exponential_sleep_generator

    sleep = sleep or time.sleep
    delays = exponential_sleep_generator(1.0, 30.0, 2.0)
    for attempt in range(1, attempts + 1):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if attempt == attempts or not transient(e):
                raise
            delay = max(next(delays), retry_after(e))
            log(f"Kubernetes API: {describe(e)}; retrying in {delay:.1f} s ({attempt}/{attempts - 1})")
            sleep(delay)
    raise AssertionError("unreachable")


def create_or_adopt(
    api, group: str, version: str, namespace: str, plural: str, body: dict, log=print, sleep=None
) -> dict:
    """Create `body`; if an object of that name exists already and carries the same run label (a retry of the
    step), adopt it."""
    from kubernetes.client.exceptions import ApiException

    objects = custom(api)
    name = body["metadata"]["name"]
    try:
        return call(
            objects.create_namespaced_custom_object, group, version, namespace, plural, body, log=log, sleep=sleep
        )
    except ApiException as e:
        if e.status != 409:
            raise
    existing = call(objects.get_namespaced_custom_object, group, version, namespace, plural, name, log=log, sleep=sleep)
    run = body["metadata"].get("labels", {}).get("tfpipe/run-id")
    if run and existing["metadata"].get("labels", {}).get("tfpipe/run-id") != run:
        raise RuntimeError(
            f"{body['kind']} {namespace}/{name} exists and belongs to another run; delete it or "
            "rerun under another name"
        )
    log(f"{body['kind']} {namespace}/{name} exists already (a retry of this step): following it")
    return existing


def delete(api, group: str, version: str, namespace: str, plural: str, name: str, log=print, sleep=None) -> bool:
    """Delete with foreground propagation (its pods go first), through `call`; False when it was gone already."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        call(
            custom(api).delete_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            name,
            body=client.V1DeleteOptions(propagation_policy="Foreground"),
            log=log,
            sleep=sleep,
        )
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def conditions(obj: dict) -> list[dict]:
    return list((obj.get("status") or {}).get("conditions") or [])


def condition(obj: dict, kind: str) -> dict | None:
    """The condition of type `kind` when its status is "True"."""
    return next((c for c in conditions(obj) if c.get("type") == kind and c.get("status") == "True"), None)


class Follower:
    """Prints every condition the first time it is seen (type, status, reason, message)."""

    def __init__(self, what: str, log=print):
        self.what, self.log = what, log
        self.seen: set[tuple] = set()

    def __call__(self, obj: dict) -> None:
        for c in conditions(obj):
            key = (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("lastTransitionTime"))
            if key not in self.seen:
                self.seen.add(key)
                reason = f" ({c['reason']})" if c.get("reason") else ""
                message = f": {c['message']}" if c.get("message") else ""
                self.log(f"{self.what}: {c.get('type')}={c.get('status')}{reason}{message}")


def pod_security_refusal(api, namespace: str, kind: str, names: list[str], reason: str, log=print, sleep=None) -> str:
    """The first Pod Security refusal among the `reason` events (a controller's pod-create failures) of the `kind`
    objects `names`, as `Kind ns/name (reason): message`; "" when there is none. Other create failures (a quota) are
    not refusals: their pods may come."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    for name in names:
        selector = f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
        events = call(core.list_namespaced_event, namespace, field_selector=selector, log=log, sleep=sleep)
        refused = next((e.message for e in events.items if POD_SECURITY in (e.message or "")), "")
        if refused:
            return f"{kind} {namespace}/{name} ({reason}): {refused}"
    return ""


def poll(read, done, seconds: float, timeout: float, what: str, sleep=None, log=print):
    """Call `read()` (through `call`) every `seconds` until `done(obj)` returns a result (not None); TimeoutError
    after `timeout`."""
    sleep = sleep or time.sleep
    deadline = time.monotonic() + timeout
    while True:
        obj = call(read, sleep=sleep, log=log)
        result = done(obj)
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not finish within {timeout / 60:.0f} min")
        sleep(seconds)


def watch(read, done, remove, seconds: float, timeout: float, what: str, log=print, sleep=None):
    """`poll` an object this step created until `done`; `remove()` it when the run is cancelled or the wait gives up
    (timed out, or the API server stayed unavailable through `call`'s retries): a job nobody waits for must not keep
    running. A failure `done` reports leaves the object, whose pods hold the logs."""
    with on_cancel(remove, log):
        try:
            return poll(read, done, seconds, timeout, what, sleep, log)
        except Exception as e:
            if isinstance(e, TimeoutError) or transient(e):
                log(f"{what}: giving up ({describe(e)}); deleting it")
                remove()
            raise


@contextlib.contextmanager
def on_cancel(cleanup, log=print):
    """While inside: SIGTERM/SIGINT (KFP stops a cancelled run's pods with SIGTERM) run `cleanup()` and raise
    Cancelled. Outside the main thread (no signal handlers there) it does nothing."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[str] = []

    def handler(signum, frame):
        received.append(signal.Signals(signum).name)
        log(f"received {received[-1]}: the run was cancelled")
        try:
            cleanup()
        finally:
            raise Cancelled(f"stopped by {received[-1]}; cleaned up")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except Exception as e:
        # the handler's Cancelled can land inside a client library that catches it and retries (then the object
        # it removed is a 404): once a signal came, whatever ends the wait is the cancellation
        if received and not isinstance(e, Cancelled):
            raise Cancelled(f"stopped by {received[-1]}; cleaned up") from e
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def object_name(prefix: str, *identity: str, limit: int = 50) -> str:
    """`<prefix>-<10 hex of the identity>`: lowercase, DNS-1035, at most `limit` characters (TFJob and Katib add
    suffixes to pod and trial names), the same for the same identity (a retry of the same task)."""
    digest = hashlib.sha256("/".join(identity).encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-") or "tfpipe"
    if not stem[0].isalpha():
        stem = f"t-{stem}"
    return f"{stem[: limit - 11].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """A label value (at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:63].rstrip("-._")


def run_labels(run_id: str, step: str) -> dict:
    return {**MANAGED_BY, "tfpipe/run-id": label_value(run_id), "tfpipe/step": label_value(step)}


# The images' user and group (containers/*.Dockerfile: uid and gid 1000). Pods that write to the shared claim set it
# as their fsGroup, so the kubelet gives a volume that supports it to that group; `OnRootMismatch` does so once, not
# at every pod start (a recursive change of a large data set would delay each pod).
IMAGE_UID = 1000
VOLUME_SECURITY: dict[str, int | str] = {"fsGroup": IMAGE_UID, "fsGroupChangePolicy": "OnRootMismatch"}


def volume_parts(claim_name: str, mount_path: str) -> tuple[list[dict], list[dict]]:
    """The pod's `volumes` and the container's `volumeMounts` for the shared claim (none without a claim)."""
    if not claim_name:
        return [], []
    return (
        [{"name": "tfpipe-data", "persistentVolumeClaim": {"claimName": claim_name}}],
        [{"name": "tfpipe-data", "mountPath": mount_path}],
    )


def on_volume(path: str, mount_path: str) -> bool:
    return path == mount_path or path.startswith(mount_path.rstrip("/") + "/")


def log_to_stdout(message: str) -> None:
    print(message, flush=True)
    sys.stdout.flush()
