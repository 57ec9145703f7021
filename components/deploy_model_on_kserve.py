"""Kubeflow serving step: the published repository version on a KServe InferenceService, given its share of the
traffic only once it has answered correctly (`deploy_to_kserve`); on any failure the InferenceService is rolled back
and the version removed from the repository, so that the champion serves. Every Kubernetes API call is retried while
the API server fails transiently (`kube.call`), so that a 429 or a 503 does not roll a good version back.

The predictor is this project's serving image, which serves with the TensorFlow that wrote the model the one version
its revision mounts, so that a canary and a rollback each serve their own version.
"""

import os
from typing import Any, NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output

GROUP, VERSION, PLURAL, KIND = "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService"
MISSING_HINT = "install KServe (v0.15 or later) or set platform.kubeflow.serving: url (a TF Serving you run) or none"
CONTAINER = "kserve-container"
MODEL_DIR = "/mnt/models"  # where KServe's storage initializer puts the storage URI
PORT = 8080
REVISIONS = ("serving.knative.dev", "v1", "revisions")
ISVC_LABEL = "serving.kserve.io/inferenceservice"
GRACE_SECONDS = 25  # a cancelled run's rollback, within the pod's 30 s termination grace period
ROLLBACK_SECONDS = 600  # at most, for the restored revision after a failure
CONTROL_PLANE = "control-plane"  # KServe's pod mutator webhook selects namespaces without this label
MODE = "serving.kserve.io/deploymentMode"
MODE_NAMES = {"knative": "Knative", "standard": "Standard"}  # the names KServe 0.16+ accepts in the annotation
STATUS_MODES = {"Knative": "knative", "Serverless": "knative", "Standard": "standard", "RawDeployment": "standard"}
SERVES_UNTESTED = (
    "updated {what}: its Deployment rolls the new version out, and it serves before its smoke test: in Standard "
    "mode this cluster's KServe splits no traffic and its InferenceService has no spec.canary (KServe 0.20 adds it), "
    "so nothing can hold the new version back; a failed smoke test restores the previous predictor"
)
NO_CANARY = (
    "{what} runs in KServe's Standard mode, where this cluster's KServe cannot honour a canary: it ignores "
    "canaryTrafficPercent and its InferenceService has no spec.canary (KServe 0.20 adds it); set traffic_percentage "
    "to 100, or serve in Knative mode"
)


class ServingFailed(RuntimeError):
    """The new revision did not serve; the InferenceService was rolled back."""


def storage_uri(version_path: str, claim_name: str, mount_path: str) -> str:
    """The URI KServe's storage initializer reads a repository version from: `pvc://CLAIM/PATH` for a version on
    the shared volume, a `gs://` or `s3://` URI as it is."""
    from components.lib.kube.api import on_volume

    if "://" in version_path:
        return version_path
    version_path = os.path.normpath(version_path)  # `..` cannot lead off the volume
    if claim_name and on_volume(version_path, mount_path):
        return f"pvc://{claim_name}/{os.path.relpath(version_path, mount_path)}"
    raise ValueError(
        f"KServe cannot read the model repository version {version_path}: put the model repository "
        f"on the shared volume (under {mount_path}) or on gs://"
    )


def predictor(
    uri: str,
    model_name: str,
    image: str,
    resources: dict,
    min_replicas: int,
    max_replicas: int,
    service_account: str = "",
) -> dict:
    """The InferenceService's `spec.predictor` (without canaryTrafficPercent): this project's serving image on the
    version KServe's storage initializer puts at MODEL_DIR, answering KServe's v1 route and ready once the model has
    loaded. The pod and its container run as Pod Security's `restricted` profile admits them (components.lib.kube.pod_security)."""
    from components.lib.kube import pod_security

    spec: dict[str, Any] = {
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "securityContext": pod_security.pod_context(),
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    route = f"/v1/models/{model_name}"
    env = {
        "STORAGE_URI": uri,
        "AIP_STORAGE_URI": MODEL_DIR,
        "AIP_HTTP_PORT": str(PORT),
        "AIP_HEALTH_ROUTE": route,
        "AIP_PREDICT_ROUTE": f"{route}:predict",
    }
    container = {
        "name": CONTAINER,
        "image": image,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": route, "port": PORT}, "periodSeconds": 5},
        "securityContext": pod_security.container_context(),
    }
    if resources:
        container["resources"] = resources
    return {**spec, "containers": [container]}


def refuse_control_plane(api, namespace: str, log=print, sleep=None) -> None:
    """Raise ValueError when `namespace` is labelled `control-plane` (as Kubeflow labels its own `kubeflow`): KServe's
    pod mutator skips such namespaces, so a `pvc://` model would never be mounted. A namespace the run's role
    cannot read is left to KServe, whose revision then fails to load the model."""

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from components.lib.kube import api as kube

    try:
        found = kube.call(client.CoreV1Api(api).read_namespace, namespace, log=log, sleep=sleep)
    except ApiException as e:
        if e.status in (403, 404):
            return
        raise
    labels = found.metadata.labels or {}
    if CONTROL_PLANE in labels:
        raise ValueError(
            f"KServe cannot serve in the namespace {namespace}: it is labelled {CONTROL_PLANE}={labels[CONTROL_PLANE]}, "
            "and KServe's pod mutator skips such namespaces (the model is never mounted); set "
            "platform.kubeflow.namespace to a profile namespace"
        )


def inference_service(
    name: str, namespace: str, spec_predictor: dict, labels: dict | None = None, serving_mode: str = "auto"
) -> dict:
    """The InferenceService `name` serving `spec_predictor`; `serving_mode` knative or standard asks KServe for
    that mode (annotation in KServe 0.16's names), auto leaves it to the cluster's default."""
    annotations = {"serving.kserve.io/enable-tag-routing": "true"}
    if serving_mode in MODE_NAMES:
        annotations[MODE] = MODE_NAMES[serving_mode]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}), "annotations": annotations},
        "spec": {"predictor": spec_predictor},
    }


def reported_mode(obj: dict | None) -> str:
    """The mode's name as KServe wrote it in `status.deploymentMode` (either version's names); "" before."""
    return ((obj or {}).get("status") or {}).get("deploymentMode", "")


def deployment_mode(obj: dict | None) -> str:
    """knative or standard, as KServe recorded the InferenceService's mode in `status.deploymentMode` (either
    version's names); "" before its controller has written it."""
    return STATUS_MODES.get(reported_mode(obj), "")


def predictor_deployment(name: str, spec_predictor: dict) -> str:
    """The Deployment (and Service) of a Standard-mode predictor: KServe's PredictorServiceName."""
    return f"{name}-{spec_predictor['name']}-predictor" if spec_predictor.get("name") else f"{name}-predictor"


def canary_spec(spec_predictor: dict, variant: str, percent: int) -> list[dict]:
    """KServe 0.20's `spec.canary` for `spec_predictor` as the canary `variant` with `percent` % (its replicas are
    ceil(stable minReplicas x percent / 100), taken from the stable predictor's; autoscaling fields are refused)."""
    fields = {k: v for k, v in spec_predictor.items() if k not in ("minReplicas", "maxReplicas", "name")}
    return [{"predictor": {**fields, "name": variant}, "trafficPercent": percent}]


def _uri_of(spec: dict) -> str:
    container: dict = next((c for c in spec.get("containers") or [] if c.get("name") == CONTAINER), {})
    return next((e.get("value", "") for e in container.get("env") or [] if e.get("name") == "STORAGE_URI"), "")


def rolled_out(deployment: dict | None, uri: str) -> bool:
    """The Deployment runs `uri` on every replica, the old pods gone (kubectl rollout status's test)."""
    if not deployment:
        return False
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = spec.get("replicas", 1)
    return (
        _uri_of((spec.get("template") or {}).get("spec") or {}) == uri
        and (status.get("observedGeneration") or 0) >= ((deployment.get("metadata") or {}).get("generation") or 0)
        and status.get("updatedReplicas") == status.get("replicas") == status.get("availableReplicas") == wanted
    )


def raise_replica_failure(deployment: dict | None, name: str) -> None:
    """ServingFailed when the Deployment `name` cannot create its pods (its ReplicaFailure condition, the API
    server's refusal quoted: a namespace's Pod Security level, a quota)."""
    from components.lib.kube import api as kube

    failure = kube.condition(deployment or {}, "ReplicaFailure")
    if failure:
        raise ServingFailed(
            f"Deployment {name} cannot create its pods ({failure.get('reason', '')}): {failure.get('message', '')}"
        )


def _predictor_status(obj: dict) -> dict:
    return ((obj.get("status") or {}).get("components") or {}).get("predictor") or {}


def latest_created(obj: dict | None) -> str:
    return _predictor_status(obj or {}).get("latestCreatedRevision", "")


def smoke_url(obj: dict) -> str:
    """The cluster-local address of the newest ready revision: its `latest` tag on the predictor's cluster-local host
    (Knative's tag template `{tag}-{name}` and the placeholder Service it creates per tag); the predictor's own
    address when no `latest` tag is routed."""
    from urllib.parse import urlsplit

    predictor = _predictor_status(obj)
    address = urlsplit((predictor.get("address") or {}).get("url") or "")
    if not address.hostname:
        return ""
    if any(t.get("tag") == "latest" for t in predictor.get("traffic") or []):
        return f"{address.scheme}://latest-{address.netloc}"
    return f"{address.scheme}://{address.netloc}"


def ready(obj: dict, before: str) -> bool | None:
    """True once a revision newer than `before` (the latest created before this deploy; "" for a new service) is
    the latest ready one of a Ready InferenceService; raises ServingFailed on a failed revision or model load.
    `observedGeneration` is not compared: KServe reports the Knative Service's, not the InferenceService's."""
    from components.lib.kube import api as kube

    created = latest_created(obj)
    if not created or created == before:
        return None  # KServe has not reconciled the change yet: what the status says is about the old revision
    raise_failure(obj)
    if not kube.condition(obj, "Ready"):
        return None
    return _predictor_status(obj).get("latestReadyRevision") == created or None


def raise_failure(obj: dict) -> None:
    """ServingFailed when KServe reports the model's load or the predictor's rollout failed."""
    from components.lib.kube import api as kube

    model = (obj.get("status") or {}).get("modelStatus") or {}
    if model.get("transitionStatus") in ("BlockedByFailedLoad", "InvalidSpec"):
        failure = model.get("lastFailureInfo") or {}
        raise ServingFailed(
            f"the model did not load ({model['transitionStatus']}): "
            f"{failure.get('message') or failure.get('reason') or 'no message'}"
        )
    for c in kube.conditions(obj):
        if (
            c.get("type") in ("Ready", "PredictorReady", "PredictorConfigurationReady")
            and c.get("status") == "False"
            and c.get("reason")
            in ("RevisionFailed", "ContainerHealthCheckFailed", "ProgressDeadlineExceeded", "ExitCode")
        ):
            raise ServingFailed(f"{c['type']}=False ({c['reason']}): {c.get('message', '')}")


def smoke_request(check) -> dict:
    """The predict body for a check: this project's serving image takes the signature in `parameters` (Vertex's
    form)."""
    return {"instances": check.instances(), "parameters": {"signature_name": check.signature}}


def smoke_test(url: str, model_name: str, checks: list, post=None) -> dict:
    """Predict each check's examples through the revision (KServe's v1 protocol); the class ids must equal the
    SavedModel's own. Returns the deploy record's `smoke` (`smoke_record`)."""
    from components.lib.deploy.smoke import smoke_record

    if post is None:
        import requests

        post = requests.post
    results = []
    for check in checks:
        response = post(f"{url}/v1/models/{model_name}:predict", json=smoke_request(check), timeout=60)
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200]}
        if response.status_code != 200:
            raise ServingFailed(
                f"smoke prediction on {check.signature} failed ({response.status_code}): {body.get('error', body)}"
            )
        results.append(check.compare(body))
    return smoke_record(results)


def prune_revisions(api, namespace: str, name: str, keep_previous: int, log=print, sleep=None) -> list[str]:
    """Delete the InferenceService's Knative revisions other than the one serving and the `keep_previous` newest
    before it; [] when the cluster has no Knative (raw deployment mode keeps no revisions). Every call through
    `kube.call`."""
    from kubernetes.client.exceptions import ApiException

    from components.lib.kube import api as kube

    group, version, plural = REVISIONS
    objects = kube.custom(api)
    try:
        listing = kube.call(
            objects.list_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            label_selector=f"{ISVC_LABEL}={name}",
            log=log,
            sleep=sleep,
        )
    except ApiException as e:
        if e.status == 404:
            return []
        raise
    isvc = kube.call(
        objects.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name, log=log, sleep=sleep
    )
    serving = _predictor_status(isvc).get("latestReadyRevision")
    revisions = sorted(
        listing.get("items") or [],
        key=lambda r: int(r["metadata"].get("labels", {}).get("serving.knative.dev/configurationGeneration", 0)),
        reverse=True,
    )
    older = [r["metadata"]["name"] for r in revisions if r["metadata"]["name"] != serving]
    removed = older[keep_previous:]
    for revision in removed:
        kube.delete(api, group, version, namespace, plural, revision, log, sleep)
        log(f"deleted revision {revision}")
    return removed


def _wait_terminated(
    objects, namespace: str, name: str, poll_seconds: float, timeout_seconds: float, sleep, log
) -> dict | None:
    """The InferenceService `name`, or None; one being deleted (foreground deletion keeps it until its revisions are
    gone) is waited out first, so that a new one can be created."""
    from kubernetes.client.exceptions import ApiException

    from components.lib.kube import api as kube

    def read():
        try:
            return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as e:
            if e.status == 404:
                return {}
            raise

    obj = kube.poll(
        read,
        lambda o: o if not (o.get("metadata") or {}).get("deletionTimestamp") else None,
        poll_seconds,
        timeout_seconds,
        f"the deletion of {KIND} {namespace}/{name}",
        sleep,
        log,
    )
    return obj or None


def _predictor_patch(current: dict, new: dict) -> dict:
    """A merge patch of `spec.predictor` from `current` to `new`: keys of `current` that `new` lacks are removed."""
    return {**{k: None for k in current}, **new}


def _bounded(sleep, clock, seconds: float):
    """`sleep` that raises TimeoutError instead of sleeping past `seconds` from now (by `clock`)."""
    deadline = clock() + seconds

    def wait(s: float) -> None:
        if clock() + s > deadline:
            raise TimeoutError(f"not within {seconds:g} s")
        sleep(s)

    return wait


def _why(error: BaseException) -> str:
    """`kube.describe(error)`, with the API server's message when it sent one; the whole message of an error that
    is neither an API error nor a lost connection (the step's own refusals)."""
    import json

    from components.lib.kube import api as kube

    if kube.status_code(error) is None and not kube.transient(error) and str(error):
        return str(error)
    try:
        message = json.loads(getattr(error, "body", None) or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{kube.describe(error)}: {message}" if message else kube.describe(error)


def version_discarder(model_repository: str, model_name: str, version: int, log=print):
    """`discard(reason)`: remove `version` from the model repository and log why; once (later calls do nothing)."""
    from components.lib.deploy.model_repository import remove_version

    removed: list[int] = []

    def discard(reason: str) -> None:
        if not removed:
            removed.append(version)
            remove_version(model_repository, model_name, version)
            log(f"removed version {version} from the model repository: {reason}")

    return discard


def deploy_to_kserve(
    api,
    *,
    name: str,
    namespace: str,
    spec_predictor: dict,
    traffic_percentage: int,
    model_name: str,
    checks: list,
    keep_previous: int = 0,
    labels: dict | None = None,
    serving_mode: str = "auto",
    variant: str = "canary",
    poll_seconds: float = 5,
    timeout_seconds: float = 900,
    grace_seconds: float = GRACE_SECONDS,
    discard=None,
    log=print,
    sleep=None,
    clock=None,
    post=None,
) -> dict:
    """Roll the predictor out on the InferenceService `name` and prove it serves; returns the endpoint's record.

    The deployment mode is KServe's `status.deploymentMode` of the InferenceService (after a create, once its
    controller has written it); `serving_mode` knative or standard requires that mode (a new InferenceService asks
    for it), auto takes the cluster's.

    A first deploy creates the InferenceService with all the traffic (a create whose answer was lost is adopted).
    Knative mode: a later deploy patches the predictor (and the labels) with `canaryTrafficPercent: 0`, waits for a
    new latest ready revision, smoke-tests every check at its cluster-local `latest` tag, then sets
    `canaryTrafficPercent` to `traffic_percentage`; at 100 % it removes it and deletes older revisions but the
    `keep_previous` newest. Standard mode: the new version is KServe 0.20's `spec.canary` entry `variant`, added with
    trafficPercent 0 and smoke-tested at its own Service; a canary (`traffic_percentage` < 100) is then given
    `traffic_percentage`; a full rollout promotes it (spec.predictor becomes its predictor, named `variant`, and
    spec.canary is removed, with the labels) and waits until its Deployment is the stable one on every replica and
    the previous stable Deployment is gone. Where the cluster's InferenceService has no `spec.canary` (before 0.20)
    the API server refuses that patch (field validation Strict): the step refuses a canary in one line, nothing
    changed; a full rollout patches the predictor instead, waits for its Deployment to run the new version on every
    replica, then smoke-tests it at the predictor's Service (it serves before its smoke test, as the log says).
    Every API call goes through `kube.call` with `log` and `sleep`; each patch is a merge patch, so a repeated one is
    harmless.

    Until the new version serves, any failure rolls back (then raises ServingFailed) and calls `discard(reason)`
    (the caller's removal of the version from the model repository): a first deploy's InferenceService is deleted;
    a Standard-mode canary not yet promoted is removed, the stable predictor never changed; otherwise the previous
    predictor and labels are restored (Knative mode: with `canaryTrafficPercent: 0`, which keeps the traffic on the
    last rolled-out revision until the restored one is ready). A cancelled run (SIGTERM) calls `discard` first, then rolls back without sleeping past `grace_seconds` by
    `clock` (the pod's grace period), and logs what is left; it raises kube.Cancelled.

    Once the new version serves (smoke test passed, traffic moved) nothing discards it, since new predictor pods
    would mount an empty folder: a failed clean-up (pruning revisions) is logged in one line, returned as the
    record's `cleanup_error` ("" when none), and the step succeeds, because what it deployed serves and its records
    must say so; the next full rollout prunes the revisions left over."""
    import copy
    import time

    from kubernetes.client.exceptions import ApiException

    from components.lib.kube import api as kube

    sleep, clock, discard = sleep or time.sleep, clock or time.monotonic, discard or (lambda reason: None)
    objects = kube.custom(api)
    what = f"{KIND} {namespace}/{name}"
    labels = dict(labels or {})
    canary = traffic_percentage < 100

    def patch(body: dict, wait=sleep, **options) -> dict:
        return kube.call(
            objects.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            log=log,
            sleep=wait,
            **options,
        )

    def read():
        return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def wait_ready(before: str, timeout: float, about: str, wait=sleep) -> dict:
        follow = kube.Follower(what, log)

        def done(obj):
            follow(obj)
            return obj if ready(obj, before) else None

        return kube.poll(read, done, poll_seconds, timeout, about, wait, log)

    def wait_mode(obj: dict) -> tuple[str, str]:
        """(knative or standard, the name KServe's status reports), once the status has it."""
        if not deployment_mode(obj):
            obj = kube.poll(
                read,
                lambda o: o if deployment_mode(o) else None,
                poll_seconds,
                timeout_seconds,
                f"{what}'s deployment mode",
                sleep,
                log,
            )
        mode = deployment_mode(obj)
        if serving_mode != "auto" and mode != serving_mode:
            raise ValueError(
                f"{what} runs in KServe's {MODE_NAMES[mode]} mode, not {serving_mode} as platform.kubeflow.serving_mode "
                "says; KServe cannot change an InferenceService's mode: delete it, or set serving_mode to auto"
            )
        log(f"{what} runs in KServe's {MODE_NAMES[mode]} mode")
        return mode, reported_mode(obj)

    def read_deployment(deployment: str) -> dict:
        from kubernetes import client

        try:
            found = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace)
        except ApiException as e:
            if e.status == 404:
                return {}
            raise
        return api.sanitize_for_serialization(found)

    def wait_rollout(spec: dict, timeout: float, about: str, wait=sleep, gone: str = "") -> dict:
        """The InferenceService once `spec`'s Deployment runs it on every replica (and the Deployment `gone`, if
        named, is deleted)."""
        deployment, uri, follow = predictor_deployment(name, spec), _uri_of(spec), kube.Follower(what, log)

        def done(obj):
            follow(obj)
            raise_failure(obj)
            if gone and kube.call(read_deployment, gone, log=log, sleep=wait):
                return None  # KServe deletes it once it has reconciled the new stable Deployment
            found = kube.call(read_deployment, deployment, log=log, sleep=wait)
            raise_replica_failure(found, deployment)
            return obj if rolled_out(found, uri) else None

        return kube.poll(read, done, poll_seconds, timeout, about, wait, log)

    def start_canary() -> bool:
        """Add the canary `variant` at 0 %; False (nothing changed) for a full rollout where the cluster's
        InferenceService has no spec.canary; a canary there is refused (ValueError)."""
        try:
            patch(
                {
                    "metadata": {"annotations": {MODE: "Standard"}},
                    "spec": {"canary": canary_spec(spec_predictor, variant, 0)},
                },
                field_validation="Strict",
            )
        except ApiException as e:
            if e.status in (400, 422) and "canary" in (e.body or ""):
                if not canary:
                    return False
                raise ValueError(NO_CANARY.format(what=what)) from None
            raise
        log(f"added the canary {variant} to {what} with no traffic (trafficPercent 0) until it has answered")
        return True

    try:
        kube.require(api, GROUP, VERSION, PLURAL, KIND, MISSING_HINT, log, sleep)
        refuse_control_plane(api, namespace, log, sleep)
        existing = _wait_terminated(objects, namespace, name, poll_seconds, timeout_seconds, sleep, log)
        if existing is None:
            body = inference_service(name, namespace, spec_predictor, labels, serving_mode)
            kube.create_or_adopt(api, GROUP, VERSION, namespace, PLURAL, body, log, sleep)
            log(f"created {what}")
            before, previous, previous_labels, mode, staged = "", {}, {}, "", False
        else:
            mode, reported = wait_mode(existing)
            before = latest_created(existing)
            previous = copy.deepcopy(existing["spec"]["predictor"])
            previous_labels = dict(existing["metadata"].get("labels") or {})
            staged = mode == "standard" and start_canary()
            if not staged:
                new = spec_predictor if mode == "standard" else {**spec_predictor, "canaryTrafficPercent": 0}
                spec: dict[str, Any] = {"predictor": _predictor_patch(previous, new)}
                if existing["spec"].get("canary"):
                    spec["canary"] = None
                # KServe 0.16 to 0.19 refuse any update whose mode annotation is not the status's name
                annotations = {"serving.kserve.io/enable-tag-routing": "true", MODE: reported}
                patch({"metadata": {"labels": labels, "annotations": annotations}, "spec": spec})
                log(
                    f"updated {what}: the new revision starts with no traffic (canaryTrafficPercent 0) until it has answered"
                    if mode == "knative"
                    else SERVES_UNTESTED.format(what=what)
                )
    except BaseException as e:  # noqa: B036 (a cancelled run too: the version never served)
        discard(_why(e))
        raise
    restored_canary = previous.get("canaryTrafficPercent")
    promoted = {**spec_predictor, "name": variant}  # a staged full rollout's stable predictor, once promoted
    rolled: list[dict] = [] if staged else [spec_predictor]  # the new stable predictor, once spec.predictor has it

    def left() -> str:
        """What a rollback that did not finish leaves to undo."""
        if existing is None:
            return f"{what}, serving the removed version: delete it"
        if staged and not rolled:
            return f"the canary {variant} on {what}: remove it (spec.canary)"
        if mode == "standard":
            return f"the predictor of {what} runs the removed version: restore the previous one"
        return (
            f"canaryTrafficPercent 0 on {what}: "
            + ("remove it" if restored_canary is None else f"set it back to {restored_canary}")
            + " once the previous predictor's revision is ready"
        )

    def rollback(seconds: float) -> str:
        """Undo the change, not sleeping past `seconds`; says what was done and what is left."""
        wait = _bounded(sleep, clock, seconds)
        if existing is None:
            kube.delete(api, GROUP, VERSION, namespace, PLURAL, name, log, wait)
            return f"deleted {what} (it served nothing before)"
        if staged and not rolled:
            patch({"spec": {"canary": None}}, wait)
            return f"removed the canary {variant} from {what}; its stable predictor served all along"
        if mode == "standard":
            patch(
                {
                    "metadata": {"labels": {**{k: None for k in labels}, **previous_labels}},
                    "spec": {"predictor": _predictor_patch(rolled[0], previous)},
                },
                wait,
            )
            try:
                wait_rollout(previous, seconds, f"{what}'s restored predictor", wait)
            except (TimeoutError, ServingFailed) as e:
                return f"restored the previous predictor of {what}; its rollout did not finish ({e})"
            return f"restored the previous predictor of {what} (Deployment {predictor_deployment(name, previous)})"
        rejected = latest_created(kube.call(read, log=log, sleep=wait))
        patch(
            {
                "metadata": {"labels": {**{k: None for k in labels}, **previous_labels}},
                "spec": {"predictor": _predictor_patch(spec_predictor, {**previous, "canaryTrafficPercent": 0})},
            },
            wait,
        )
        pinned = _predictor_status(existing).get("latestRolledoutRevision") or "the last rolled-out revision"
        try:
            restored = wait_ready(rejected, seconds, f"{what}'s restored revision", wait)
        except (TimeoutError, ServingFailed) as e:
            return (
                f"restored the previous predictor of {what}; its traffic stays pinned to {pinned} ({e}); left: {left()}"
            )
        patch({"spec": {"predictor": {"canaryTrafficPercent": restored_canary}}}, wait)
        return (
            f"restored the previous predictor of {what} (revision {latest_created(restored)}); traffic was pinned to "
            f"{pinned} meanwhile"
        )

    def cancelled() -> None:
        """The rejected version leaves the repository first, then the rollback within the grace period."""
        start = clock()
        try:
            discard("the run was cancelled")
        except Exception as e:
            log(f"the cancelled version stays in the model repository: its removal failed ({_why(e)})")
        try:
            log(rollback(max(0.0, grace_seconds - (clock() - start))))
        except Exception as e:
            log(
                f"the rollback of {what} did not finish within the {grace_seconds:g} s grace period ({_why(e)}); "
                f"left: {left()}"
            )

    def serve_knative() -> tuple[dict, str, str, dict, bool]:
        obj = wait_ready(before, timeout_seconds, f"{what}'s new revision")
        revision, url = latest_created(obj), smoke_url(obj)
        if not url:
            raise ServingFailed(f"{what} is Ready but reports no cluster-local address")
        smoke = smoke_test(url, model_name, checks, post)
        is_canary = existing is not None and canary
        if existing is not None:
            patch({"spec": {"predictor": {"canaryTrafficPercent": traffic_percentage if is_canary else None}}})
            obj = kube.poll(
                read,
                lambda o: o if _routed(o, revision, traffic_percentage if is_canary else 100) else None,
                poll_seconds,
                timeout_seconds,
                f"{what}'s traffic to {revision}",
                sleep,
                log,
            )
        return obj, revision, url, smoke, is_canary

    def promote() -> dict:
        """KServe 0.20's promotion of the canary `variant`: spec.predictor becomes its predictor, with its name, and
        spec.canary is removed; the InferenceService once its Deployment is the stable one, at full size, and the
        previous stable Deployment is gone."""
        rolled.append(promoted)  # before the patch: a patch whose answer was lost may have been applied
        patch(
            {
                "metadata": {"labels": labels},
                "spec": {"predictor": _predictor_patch(previous, promoted), "canary": None},
            }
        )
        log(f"promoted the canary {variant} on {what}: spec.predictor is now its predictor, spec.canary removed")
        return wait_rollout(
            promoted, timeout_seconds, f"{what}'s promotion of {variant}", gone=predictor_deployment(name, previous)
        )

    def serve_standard() -> tuple[dict, str, str, dict, bool]:
        if not staged:
            obj = wait_rollout(spec_predictor, timeout_seconds, f"{what}'s rollout")
            deployment = predictor_deployment(name, spec_predictor)
            url = f"http://{deployment}.{namespace}.svc.cluster.local"
            return obj, deployment, url, smoke_test(url, model_name, checks, post), False
        deployment = f"{name}-{variant}-predictor"

        def canary_at(percent: int):
            def done(o):
                raise_failure(o)
                raise_replica_failure(kube.call(read_deployment, deployment, log=log, sleep=sleep), deployment)
                found = [c for c in (o.get("status") or {}).get("canaryStatuses") or [] if c.get("name") == variant]
                return o if found and found[0].get("ready") and found[0].get("trafficPercent") == percent else None

            return done

        kube.poll(read, canary_at(0), poll_seconds, timeout_seconds, f"{what}'s canary {variant}", sleep, log)
        url = f"http://{deployment}.{namespace}.svc.cluster.local"
        smoke = smoke_test(url, model_name, checks, post)
        if not canary:
            return promote(), deployment, url, smoke, False
        patch({"spec": {"canary": canary_spec(spec_predictor, variant, traffic_percentage)}})
        obj = kube.poll(
            read, canary_at(traffic_percentage), poll_seconds, timeout_seconds, f"{what}'s canary share", sleep, log
        )
        return obj, deployment, url, smoke, True

    with kube.on_cancel(cancelled, log):
        try:
            if not mode:
                mode, _ = wait_mode(kube.call(read, log=log, sleep=sleep))
            obj, revision, url, smoke, is_canary = serve_standard() if mode == "standard" else serve_knative()
        except kube.Cancelled:
            raise
        except Exception as e:
            try:
                undone = rollback(min(timeout_seconds, ROLLBACK_SECONDS))
            finally:
                discard(f"{what} did not serve it: {e}")
            raise ServingFailed(f"{what} did not serve the new version: {e}; {undone}") from e
    predictor_status = _predictor_status(obj)
    log(
        f"{what} serves {'revision' if mode == 'knative' else 'Deployment'} {revision} at {url}"
        + (f" ({traffic_percentage} % canary)" if is_canary else "")
    )
    removed, cleanup_error = [], ""
    if not is_canary and mode == "knative":
        try:
            removed = prune_revisions(api, namespace, name, keep_previous, log, sleep)
        except Exception as e:
            cleanup_error = f"pruning the older revisions of {what} failed: {_why(e)}"
            log(
                f"warning: {cleanup_error}; revision {revision} serves all the same (the next full rollout prunes them)"
            )
    status = obj.get("status") or {}
    return {
        "name": name,
        "namespace": namespace,
        "deployment_mode": mode,
        "url": ((status.get("address") or {}).get("url") or "").rstrip("/"),
        "smoke_url": url,
        "service_url": status.get("url"),
        "revision": revision,
        "previous_revision": predictor_status.get("previousRolledoutRevision", ""),
        "traffic": predictor_status.get("traffic", []),
        "canary": is_canary,
        "smoke": smoke,
        "deleted_revisions": removed,
        "cleanup_error": cleanup_error,
    }


def _routed(obj: dict, revision: str, percent: int) -> bool:
    """The InferenceService's traffic sends `percent` % to `revision` as its latest revision."""
    return any(
        t.get("latestRevision") and t.get("revisionName") == revision and t.get("percent") == percent
        for t in _predictor_status(obj).get("traffic") or []
    )


def deploy_model_on_kserve(
    published: Input[Model],
    dataset: Input[Dataset],
    model_repository: str,
    model_name: str,
    traffic_percentage: int,
    inference_service: str,
    serving_image: str,
    namespace: str,
    service_account: str,
    claim_name: str,
    mount_path: str,
    resources: dict,
    min_replicas: int,
    max_replicas: int,
    keep_previous: int,
    poll_seconds: float,
    timeout_minutes: int,
    endpoint: Output[Artifact],
    serving_mode: str = "auto",
) -> NamedTuple("Outputs", [("rest_url", str), ("grpc_target", str), ("version", int)]):
    """KFP step (kubeflow, serving: kserve): serve the published version on the InferenceService
    `inference_service` ("" = `model_name`) with `traffic_percentage` % of the traffic, wait until it is Ready,
    smoke-test it; on failure (or a cancelled run) remove the version from the repository and restore the previous
    predictor. Once the version serves, a failed clean-up does not fail the step: it is the endpoint's
    `cleanup_error`.

    Args:
        published: The published repository version.
        dataset: The prepared data (examples for the smoke test).
        model_repository: The versioned model repository on the shared volume.
        model_name: The model's name in the repository.
        traffic_percentage: The new version's share of the traffic in % (< 100: a canary).
        inference_service: The InferenceService's name (empty: `model_name`).
        serving_image: This project's serving image.
        namespace: Namespace of the created objects (empty: the run's namespace).
        service_account: Service account of their pods (empty: the namespace's default).
        claim_name: The shared PersistentVolumeClaim the pods mount (where the dataset and outputs live).
        mount_path: Where the pods mount the claim (paths under it are the same in every pod).
        resources: Kubernetes resources of the predictor (requests, limits).
        min_replicas: Fewest predictor replicas.
        max_replicas: Most predictor replicas.
        keep_previous: Older revisions of the InferenceService kept after a full rollout.
        poll_seconds: How often the step reads the objects' status, in seconds.
        timeout_minutes: The step fails when the new revision is not Ready by then.
        serving_mode: KServe's deployment mode: auto (the cluster's), knative or standard (required).
    """
    import json
    from collections import namedtuple

    from components.deploy_model_on_kserve import deploy_to_kserve, predictor, storage_uri, version_discarder
    from components.lib.deploy.smoke import reference_checks
    from components.lib.kube import api as kube
    from core import names

    names.model_name(model_name)  # run parameters can be set without the CLI (the KFP UI, a recurring run)
    names.location(model_repository, "model_repository")
    version, path = int(published.metadata["version"]), published.metadata["path"]
    name = inference_service or model_name
    discard = version_discarder(model_repository, model_name, version, kube.log_to_stdout)
    try:  # a name KServe would refuse fails before any object is made, and the version is removed
        names.inference_service(name, "inference_service" if inference_service else "model_name")
        spec = predictor(
            storage_uri(path, claim_name, mount_path),
            name,
            serving_image,
            resources,
            min_replicas,
            max_replicas,
            service_account,
        )
        client, labels = kube.api_client(), kube.run_labels(kube.run_id(), "deploy-model")
        checks = reference_checks(path, dataset.path)
    except BaseException as e:  # noqa: B036 (a cancelled run too: the version never served)
        discard(str(e))
        raise
    info = deploy_to_kserve(  # it removes the version (`discard`) on any failure before the version serves
        client,
        name=name,
        namespace=namespace or kube.own_namespace(),
        spec_predictor=spec,
        traffic_percentage=traffic_percentage,
        model_name=name,
        checks=checks,
        keep_previous=keep_previous,
        labels={**labels, "tfpipe/model-version": str(version)},
        serving_mode=serving_mode,
        variant=f"v{version}",
        poll_seconds=poll_seconds,
        timeout_seconds=timeout_minutes * 60,
        discard=discard,
        log=kube.log_to_stdout,
    )
    info.update(
        model_name=model_name,
        version=version,
        storage_uri=spec["containers"][0]["env"][0]["value"],
    )
    endpoint.metadata.update({k: info[k] for k in ("url", "revision", "version", "canary", "cleanup_error")})
    with open(endpoint.path, "w") as f:
        json.dump(info, f, indent=2)
    print(f"serving {model_name} version {version} on {info['namespace']}/{name}: {info['url']}")
    Outputs = namedtuple("Outputs", ["rest_url", "grpc_target", "version"])
    return Outputs(info["url"], "", version)
