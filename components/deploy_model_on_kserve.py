"""Kubeflow serving step: the published repository version on a KServe InferenceService.

- Predictor: by default this project's serving image as a custom container (`kserve-container`), the image Vertex
  runs too, built from the trainer's lock file, so the SavedModel is served by the TensorFlow that wrote it (KServe's
  TensorFlow runtime is TF Serving, whose image tags trail TensorFlow's releases). KServe's storage initializer
  copies the version (`STORAGE_URI`: `pvc://CLAIM/PATH` on the shared volume, or `gs://`) to `/mnt/models`; the
  server reads it there (`AIP_STORAGE_URI`), listens on 8080 and answers KServe's v1 protocol route
  `/v1/models/NAME:predict` (`AIP_PREDICT_ROUTE`), ready once the model is loaded (`AIP_HEALTH_ROUTE`, the
  readiness probe). `predictor: tensorflow` uses KServe's TensorFlow runtime on the same storage URI instead.
- Rollout: the first deploy creates the InferenceService (all traffic: nothing to compare with); later ones patch
  its predictor, with `canaryTrafficPercent` below 100 % (KServe keeps the rest on the last rolled-out revision).
  The step waits until the new revision is Ready (failing at once on a failed revision or model load), then sends a
  smoke prediction to it (the `latest` tag's URL, tag routing on) and compares the class ids with the SavedModel's.
- Rollback on any failure: the predictor spec of before is put back (traffic stays on, or returns to, the previous
  revision; a first deploy's InferenceService is deleted) and the version is removed from the repository, so the
  champion is what serves.
- At 100 %: the InferenceService's older Knative revisions are deleted, except the `keep_previous` newest.
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


class ServingFailed(RuntimeError):
    """The new revision did not serve; the InferenceService was rolled back."""


def storage_uri(version_path: str, claim_name: str, mount_path: str) -> str:
    """The URI KServe's storage initializer reads a repository version from: `pvc://CLAIM/PATH` for a version on
    the shared volume, a `gs://` or `s3://` URI as it is."""
    from components.lib.kube import on_volume

    if "://" in version_path:
        return version_path
    if claim_name and on_volume(version_path, mount_path):
        return f"pvc://{claim_name}/{os.path.relpath(version_path, mount_path)}"
    raise ValueError(
        f"KServe cannot read the model repository version {version_path}: put the model repository "
        f"on the shared volume (under {mount_path}) or on gs://"
    )


def predictor(
    kind: str,
    uri: str,
    model_name: str,
    image: str,
    resources: dict,
    min_replicas: int,
    max_replicas: int,
    service_account: str = "",
    runtime_version: str = "",
) -> dict:
    """The InferenceService's `spec.predictor` (without canaryTrafficPercent)."""
    spec: dict[str, Any] = {"minReplicas": min_replicas, "maxReplicas": max_replicas}
    if service_account:
        spec["serviceAccountName"] = service_account
    if kind == "tensorflow":
        model = {"modelFormat": {"name": "tensorflow"}, "storageUri": uri}
        if runtime_version:
            model["runtimeVersion"] = runtime_version
        if resources:
            model["resources"] = resources
        return {**spec, "model": model}
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
    }
    if resources:
        container["resources"] = resources
    return {**spec, "containers": [container]}


def inference_service(name: str, namespace: str, spec_predictor: dict, labels: dict | None = None) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": {"serving.kserve.io/enable-tag-routing": "true"},
        },
        "spec": {"predictor": spec_predictor},
    }


def _predictor_status(obj: dict) -> dict:
    return ((obj.get("status") or {}).get("components") or {}).get("predictor") or {}


def served_url(obj: dict) -> str:
    """The URL that reaches the newest revision: the `latest` tag's under a canary, else the service's (cluster
    address first)."""
    status = obj.get("status") or {}
    for route in _predictor_status(obj).get("traffic") or []:
        if route.get("tag") == "latest" and route.get("url"):
            return route["url"]
    return ((status.get("address") or {}).get("url") or status.get("url") or "").rstrip("/")


def ready(obj: dict, generation: int) -> bool | None:
    """True once the spec of `generation` serves; raises ServingFailed on a failed revision or model load."""
    from components.lib import kube

    status = obj.get("status") or {}
    model = status.get("modelStatus") or {}
    if model.get("transitionStatus") in ("BlockedByFailedLoad", "InvalidSpec"):
        failure = model.get("lastFailureInfo") or {}
        raise ServingFailed(
            f"the model did not load ({model['transitionStatus']}): "
            f"{failure.get('message') or failure.get('reason') or 'no message'}"
        )
    for c in kube.conditions(obj):
        if (
            c.get("type") in ("Ready", "PredictorReady")
            and c.get("status") == "False"
            and c.get("reason")
            in (
                "RevisionFailed",
                "RevisionMissing",
                "ContainerHealthCheckFailed",
                "ProgressDeadlineExceeded",
                "ExitCode",
            )
        ):
            raise ServingFailed(f"{c['type']}=False ({c['reason']}): {c.get('message', '')}")
    if not kube.condition(obj, "Ready") or status.get("observedGeneration", generation) < generation:
        return None
    predictor_status = _predictor_status(obj)
    latest_created = predictor_status.get("latestCreatedRevision")
    if latest_created and predictor_status.get("latestReadyRevision") != latest_created:
        return None
    return True


def smoke_test(url: str, model_name: str, batch, expected, post=None) -> dict:
    """Predict the reference examples through the InferenceService (KServe v1 protocol); the class ids must equal
    the SavedModel's own."""
    import numpy as np

    if post is None:
        import requests

        post = requests.post
    response = post(f"{url}/v1/models/{model_name}:predict", json={"instances": np.asarray(batch).tolist()}, timeout=60)
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text[:200]}
    if response.status_code != 200:
        raise ServingFailed(f"smoke prediction failed ({response.status_code}): {body.get('error', body)}")
    try:
        served = np.array([p["class_id"] for p in body["predictions"]])
    except (KeyError, TypeError):
        raise ServingFailed(f"smoke prediction has no class_id: {str(body)[:200]}") from None
    if not np.array_equal(served, np.asarray(expected)):
        raise ServingFailed(f"smoke prediction disagrees with the published model: {served} vs {expected}")
    return {"examples": len(served), "class_ids": served.tolist()}


def prune_revisions(api, namespace: str, name: str, keep_previous: int, log=print) -> list[str]:
    """Delete the InferenceService's Knative revisions other than the one serving and the `keep_previous` newest
    before it; [] when the cluster has no Knative (raw deployment mode keeps no revisions)."""
    from kubernetes.client.exceptions import ApiException

    from components.lib import kube

    group, version, plural = REVISIONS
    objects = kube.custom(api)
    try:
        listing = objects.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=f"{ISVC_LABEL}={name}"
        )
    except ApiException as e:
        if e.status == 404:
            return []
        raise
    isvc = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    serving = _predictor_status(isvc).get("latestReadyRevision")
    revisions = sorted(
        listing.get("items") or [],
        key=lambda r: int(r["metadata"].get("labels", {}).get("serving.knative.dev/configurationGeneration", 0)),
        reverse=True,
    )
    older = [r["metadata"]["name"] for r in revisions if r["metadata"]["name"] != serving]
    removed = older[keep_previous:]
    for revision in removed:
        kube.delete(api, group, version, namespace, plural, revision)
        log(f"deleted revision {revision}")
    return removed


def deploy_to_kserve(
    api,
    *,
    name: str,
    namespace: str,
    spec_predictor: dict,
    traffic_percentage: int,
    model_name: str,
    batch,
    expected,
    keep_previous: int = 0,
    labels: dict | None = None,
    poll_seconds: float = 5,
    timeout_seconds: float = 900,
    log=print,
    sleep=None,
    post=None,
) -> dict:
    """Roll the predictor out on the InferenceService `name` and prove it serves; on failure put the previous
    predictor back (or delete a first deploy) and raise ServingFailed. Returns the endpoint's record."""
    import copy
    import time

    from kubernetes.client.exceptions import ApiException

    from components.lib import kube

    kube.require(api, GROUP, VERSION, PLURAL, KIND, MISSING_HINT)
    objects = kube.custom(api)
    what = f"{KIND} {namespace}/{name}"
    try:
        existing = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as e:
        if e.status != 404:
            raise
        existing = None
    canary = existing is not None and traffic_percentage < 100
    if existing is None:
        body = inference_service(name, namespace, spec_predictor, labels)
        applied = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        log(f"created {what}")
    else:
        previous = copy.deepcopy(existing["spec"]["predictor"])
        new = {**spec_predictor, "canaryTrafficPercent": traffic_percentage if canary else None}
        # merge patch: the predictor's keys are replaced (lists whole); keys the old predictor had and the new one
        # lacks (a model instead of containers) are removed
        patch = {
            "spec": {"predictor": {**{k: None for k in previous}, **new}},
            "metadata": {"annotations": {"serving.kserve.io/enable-tag-routing": "true"}},
        }
        applied = objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)
        log(f"updated {what}: " + (f"canary at {traffic_percentage} %" if canary else "rolling out at 100 %"))
    generation = applied.get("metadata", {}).get("generation", 1)
    follow = kube.Follower(what, log)

    def read():
        return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def done(obj):
        follow(obj)
        return obj if ready(obj, generation) else None

    def rollback(reason: str) -> str:
        if existing is None:
            kube.delete(api, GROUP, VERSION, namespace, PLURAL, name)
            return f"deleted {what} (it served nothing before)"
        objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"spec": {"predictor": {**{k: None for k in {**spec_predictor, "canaryTrafficPercent": 0}}, **previous}}},
        )
        revision = _predictor_status(existing).get("latestReadyRevision")
        return f"restored the previous predictor of {what}" + (f" (revision {revision})" if revision else "")

    with kube.on_cancel(lambda: log(rollback("cancelled")), log):
        try:
            obj = kube.poll(read, done, poll_seconds, timeout_seconds, f"{what}'s new revision", sleep or time.sleep)
            url = served_url(obj)
            if not url:
                raise ServingFailed(f"{what} is Ready but has no URL")
            smoke = smoke_test(url, model_name, batch, expected, post)
        except (ServingFailed, TimeoutError) as e:
            undone = rollback(str(e))
            raise ServingFailed(f"{what} did not serve the new version: {e}; {undone}") from e
    predictor_status = _predictor_status(obj)
    log(
        f"{what} serves revision {predictor_status.get('latestReadyRevision', '?')} at {url}"
        + (f" ({traffic_percentage} % canary)" if canary else "")
    )
    removed = [] if canary else prune_revisions(api, namespace, name, keep_previous, log)
    return {
        "name": name,
        "namespace": namespace,
        "url": url,
        "service_url": (obj.get("status") or {}).get("url"),
        "revision": predictor_status.get("latestReadyRevision", ""),
        "previous_revision": predictor_status.get("previousRolledoutRevision", ""),
        "traffic": predictor_status.get("traffic", []),
        "canary": canary,
        "smoke": smoke,
        "deleted_revisions": removed,
    }


def deploy_model_on_kserve(
    published: Input[Model],
    dataset: Input[Dataset],
    model_repository: str,
    model_name: str,
    traffic_percentage: int,
    inference_service: str,
    predictor_kind: str,
    serving_image: str,
    runtime_version: str,
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
    run_id: str,
    endpoint: Output[Artifact],
) -> NamedTuple("Outputs", [("rest_url", str), ("grpc_target", str), ("version", int)]):
    """KFP step (kubeflow, serving: kserve): serve the published version on the InferenceService
    `inference_service` ("" = `model_name`) with `traffic_percentage` % of the traffic, wait until it is Ready,
    smoke-test it; on failure restore the previous predictor and remove the version from the repository.

    Args:
        published: The published repository version.
        dataset: The prepared data (examples for the smoke test).
        model_repository: The versioned model repository on the shared volume.
        model_name: The model's name in the repository.
        traffic_percentage: The new version's share of the traffic in % (< 100: a canary).
        inference_service: The InferenceService's name (empty: `model_name`).
        predictor_kind: serving_image (this project's serving image) or tensorflow (KServe's TensorFlow runtime).
        serving_image: This project's serving image.
        runtime_version: predictor tensorflow: the TF Serving image tag (empty: the runtime's).
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
        run_id: The pipeline run's name, part of the objects' names and labels.
    """
    import json
    from collections import namedtuple

    from components.deploy_model import reference
    from components.deploy_model_on_kserve import ServingFailed, deploy_to_kserve, predictor, storage_uri
    from components.lib import kube
    from components.lib.model_repository import remove_version

    version, path = int(published.metadata["version"]), published.metadata["path"]
    name = inference_service or model_name
    spec = predictor(
        predictor_kind,
        storage_uri(path, claim_name, mount_path),
        name,
        serving_image,
        resources,
        min_replicas,
        max_replicas,
        service_account,
        runtime_version,
    )
    batch, expected = reference(path, dataset.path)
    try:
        info = deploy_to_kserve(
            kube.api_client(),
            name=name,
            namespace=namespace or kube.own_namespace(),
            spec_predictor=spec,
            traffic_percentage=traffic_percentage,
            model_name=name,
            batch=batch,
            expected=expected,
            keep_previous=keep_previous,
            labels={**kube.run_labels(run_id, "deploy-model"), "tfpipe/model-version": str(version)},
            poll_seconds=poll_seconds,
            timeout_seconds=timeout_minutes * 60,
            log=kube.log_to_stdout,
        )
    except ServingFailed as e:
        remove_version(model_repository, model_name, version)
        raise ServingFailed(f"{e}; removed version {version} from the model repository") from e
    info.update(
        model_name=model_name,
        version=version,
        storage_uri=spec.get("model", {}).get("storageUri") or spec["containers"][0]["env"][0]["value"],
    )
    endpoint.metadata.update({k: info[k] for k in ("url", "revision", "version", "canary")})
    with open(endpoint.path, "w") as f:
        json.dump(info, f, indent=2)
    print(f"serving {model_name} version {version} on {info['namespace']}/{name}: {info['url']}")
    Outputs = namedtuple("Outputs", ["rest_url", "grpc_target", "version"])
    return Outputs(info["url"], "", version)
