"""KServe v0.15 in Serverless mode, with Knative Serving under it, as far as a deploy step sees them (the rules are
in tests/doubles/k8s/kserve.py's sources and Knative 1.17's): every change of the predictor's pod template (spec,
labels, annotations) makes a new revision `NAME-predictor-0000N` (a `serving.knative.dev/v1` Revision object and a
pod); `canaryTrafficPercent` only moves traffic: with a revision rolled out before, the `latest` target gets that
share and the last rolled-out revision (`prev` tag) the rest, `0` pins everything to it; without it the latest
ready revision gets everything. The status is KServe's: `observedGeneration` is the Knative Service's generation,
`latestRolledoutRevision` / `previousRolledoutRevision` follow KServe's PropagateStatus, traffic entries carry the
external-domain URL of their tag, and a failed revision or model load is reported as KServe reports it.

The cluster's network (`network.Network`) routes `NAME-predictor.NS.svc.cluster.local` by the traffic split and
`latest-` / `prev-` tag hosts to their revisions; `*.example.com` (the external domain) stays unreachable.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from tests.doubles.k8s.server import now

ISVC = ("serving.kserve.io/v1beta1", "inferenceservices")
REVISIONS = ("serving.knative.dev/v1", "revisions")
NOT_IN_TEMPLATE = (
    "autoscaling.knative.dev/min-scale",
    "autoscaling.knative.dev/max-scale",
    "kubectl.kubernetes.io/last-applied-configuration",
)


@dataclass
class Revision:
    name: str
    template: dict
    pod: object
    state: str = "pending"


@dataclass
class Service:
    generation: int = 0  # the Knative Service's (its observedGeneration once reconciled)
    configuration: int = 0  # the Knative Configuration's: a new one per pod template, in the revision's name
    revisions: list = field(default_factory=list)
    rolled_out: str = ""
    previous: str = ""
    canary: object = None
    ever_ready: bool = False


class KServeOperator:
    def __init__(self, network, start_pod, domain: str = "example.com"):
        """`start_pod(isvc, revision name, predictor spec)` returns a pod (pods.ProcessPod or pods.FakePod)."""
        self.network, self.start_pod, self.domain = network, start_pod, domain
        self.services: dict[tuple, Service] = {}

    def close(self):
        for service in self.services.values():
            for revision in service.revisions:
                revision.pod.stop()

    def revision(self, name: str) -> Revision:
        return next(r for s in self.services.values() for r in s.revisions if r.name == name)

    def reconcile(self, api) -> None:
        for key, isvc in list(api.objects.items()):
            if (key[0], key[2]) == ISVC:
                self._reconcile(api, key, isvc)
        for key in [k for k in self.services if k not in api.objects]:
            self._tear_down(api, key)

    def _tear_down(self, api, key):
        service = self.services.pop(key)
        for revision in service.revisions:
            revision.pod.stop()
            api.remove((REVISIONS[0], key[1], REVISIONS[1], revision.name))
        self._routes(key, {}, [])

    def _reconcile(self, api, key, isvc):
        gv, ns, _, name = key
        if "deletionTimestamp" in isvc["metadata"]:
            api.held.add(key)
            if key in self.services:
                self._tear_down(api, key)
            api.held.discard(key)
            return
        service = self.services.setdefault(key, Service())
        predictor = copy.deepcopy(isvc["spec"]["predictor"])
        canary = predictor.pop("canaryTrafficPercent", None)
        annotations = {k: v for k, v in (isvc["metadata"].get("annotations") or {}).items() if k not in NOT_IN_TEMPLATE}
        template = {"predictor": predictor, "labels": isvc["metadata"].get("labels") or {}, "annotations": annotations}
        live = [r for r in service.revisions if api.get("revisions", r.name, ns) is not None]
        for gone in [r for r in service.revisions if r not in live]:
            gone.pod.stop()
        service.revisions = live
        if not service.revisions or service.revisions[-1].template != template:
            service.generation += 1
            service.configuration += 1
            revision_name = f"{name}-predictor-{service.configuration:05d}"
            api.create_owned(
                (REVISIONS[0], ns, REVISIONS[1], revision_name),
                {
                    "apiVersion": REVISIONS[0],
                    "kind": "Revision",
                    "metadata": {
                        "name": revision_name,
                        "namespace": ns,
                        "labels": {
                            **template["labels"],
                            "serving.kserve.io/inferenceservice": name,
                            "serving.knative.dev/service": f"{name}-predictor",
                            "serving.knative.dev/configuration": f"{name}-predictor",
                            "serving.knative.dev/configurationGeneration": str(service.configuration),
                        },
                    },
                    "spec": {"containers": predictor.get("containers") or []},
                },
            )
            service.revisions.append(Revision(revision_name, template, self.start_pod(isvc, revision_name, predictor)))
        elif canary != service.canary:
            service.generation += 1  # only the Knative Service's traffic changes
        service.canary = canary
        for revision in service.revisions:
            if revision.state == "pending":
                revision.state = revision.pod.state()
        created = service.revisions[-1]
        ready = next((r for r in reversed(service.revisions) if r.state == "ready"), None)
        traffic = self._traffic(service, canary, ready, name, ns, isvc)
        if ready is not None:
            self._propagate(service, traffic, ready, created)
        api.write_status(key, self._status(isvc, service, traffic, ready, created, name, ns))

    def _traffic(self, service, canary, ready, name, ns, isvc) -> list[dict]:
        if ready is None:
            return []
        tag_routing = (isvc["metadata"].get("annotations") or {}).get("serving.kserve.io/enable-tag-routing") == "true"
        latest = {"revisionName": ready.name, "latestRevision": True, "percent": 100}
        if tag_routing:
            latest["tag"] = "latest"
        targets = [latest]
        if canary is not None and service.rolled_out:
            latest["percent"] = canary
            if canary < 100:
                targets.append(
                    {
                        "tag": "prev",
                        "revisionName": service.rolled_out,
                        "latestRevision": False,
                        "percent": 100 - canary,
                    }
                )
        for target in targets:
            if "tag" in target:
                target["url"] = f"http://{target['tag']}-{name}-predictor.{ns}.{self.domain}"
        return targets

    @staticmethod
    def _propagate(service, traffic, ready, created):
        """KServe's PropagateStatus: the rolled-out revisions."""
        per_revision: dict = {}
        for t in traffic:
            per_revision[t["revisionName"]] = per_revision.get(t["revisionName"], 0) + t["percent"]
        for t in traffic:
            if t["revisionName"] == ready.name and t["latestRevision"]:
                if service.rolled_out != ready.name:
                    if t["percent"] == 100:
                        service.previous, service.rolled_out = service.rolled_out, ready.name
                elif (
                    ready is created
                    and t["percent"] < 100
                    and per_revision[t["revisionName"]] == 100
                    and service.previous
                ):
                    service.rolled_out = service.previous

    def _status(self, isvc, service, traffic, ready, created, name, ns) -> dict:
        failed = created.state.startswith("failed")
        conditions = []
        if failed:
            message = f'Revision "{created.name}" failed with message: {created.state.removeprefix("failed: ")}.'
            for kind in ("PredictorConfigurationReady", "PredictorReady", "Ready"):
                conditions.append({"type": kind, "status": "False", "reason": "RevisionFailed", "message": message})
        elif ready is created:
            conditions += [
                {"type": k, "status": "True"} for k in ("PredictorConfigurationReady", "PredictorReady", "Ready")
            ]
            service.ever_ready = True
        else:
            conditions += [
                {
                    "type": k,
                    "status": "Unknown",
                    "reason": "RevisionMissing",
                    "message": f'Configuration "{name}-predictor" is waiting for a Revision to become ready.',
                }
                for k in ("PredictorConfigurationReady", "PredictorReady", "Ready")
            ]
        before = {c["type"]: c for c in (isvc.get("status") or {}).get("conditions") or []}
        for c in conditions:
            same = before.get(c["type"], {})
            changed = (same.get("status"), same.get("reason")) != (c["status"], c.get("reason"))
            c["lastTransitionTime"] = now() if changed else same.get("lastTransitionTime", now())
        predictor = {"latestCreatedRevision": created.name, "traffic": traffic}
        if ready is not None:
            predictor["latestReadyRevision"] = ready.name
        if service.rolled_out:
            predictor["latestRolledoutRevision"] = service.rolled_out
        if service.previous:
            predictor["previousRolledoutRevision"] = service.previous
        status = {
            "observedGeneration": service.generation,
            "deploymentMode": "Serverless",
            "conditions": conditions,
            "components": {"predictor": predictor},
            "modelStatus": self._model_status(created, ready),
        }
        if service.ever_ready:
            predictor["url"] = f"http://{name}-predictor.{ns}.{self.domain}"
            predictor["address"] = {"url": f"http://{name}-predictor.{ns}.svc.cluster.local"}
            status["url"] = f"http://{name}.{ns}.{self.domain}"
            status["address"] = {"url": f"http://{name}.{ns}.svc.cluster.local"}
        self._routes((None, ns, None, name), {r.name: r for r in service.revisions}, traffic)
        return status

    @staticmethod
    def _model_status(created, ready) -> dict:
        if created.state.startswith("failed"):
            return {
                "transitionStatus": "BlockedByFailedLoad",
                "states": {"activeModelState": "", "targetModelState": "FailedToLoad"},
                "lastFailureInfo": {"reason": "ModelLoadFailed", "message": created.state.removeprefix("failed: ")},
            }
        if ready is created:
            return {
                "transitionStatus": "UpToDate",
                "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
            }
        return {"transitionStatus": "InProgress", "states": {"activeModelState": "", "targetModelState": "Pending"}}

    def _routes(self, key, revisions: dict, traffic: list[dict]):
        _, ns, _, name = key
        local = f"{name}-predictor.{ns}.svc.cluster.local"
        split = [
            (*revisions[t["revisionName"]].pod.address, t["percent"]) for t in traffic if t["revisionName"] in revisions
        ]
        for host in (local, f"{name}.{ns}.svc.cluster.local"):
            self.network.route(host, split) if split else self.network.unroute(host)
        for tag in ("latest", "prev"):
            target = next((t for t in traffic if t.get("tag") == tag and t["revisionName"] in revisions), None)
            if target:
                self.network.route(f"{tag}-{local}", [(*revisions[target["revisionName"]].pod.address, 100)])
            else:
                self.network.unroute(f"{tag}-{local}")


def process_pods(
    claims: dict[str, str], images: dict[str, str], runtime: str = "process", namespaces: dict | None = None
):
    """`start_pod` for KServeOperator running the predictor's container as a process (`runtime="podman"`: in its
    built image): `claims` maps claim names to host folders, `images` image names to the project's Dockerfiles
    they are built from (podman: to the built images' names). A `pvc://CLAIM/PATH` storage URI is mounted read-only
    at /mnt/models as KServe mounts it (direct PVC mount: a subPath of the claim), and the injector's rewrite of
    STORAGE_URI to /mnt/models is applied; not in a namespace labelled `control-plane` (`namespaces`: name ->
    labels), which KServe's pod mutator webhook skips: there the container starts as it was given."""
    from tests.doubles.k8s.pods import PodmanPod, ProcessPod, image_config

    def start(isvc, revision, spec):
        (container,) = [c for c in spec["containers"] if c["name"] == "kserve-container"]
        mounts: dict = {}
        if "control-plane" not in (namespaces or {}).get(isvc["metadata"]["namespace"], {}):
            container, mounts = _storage_mounted(container, claims)
        if runtime == "podman":
            return PodmanPod(container, images[container["image"]], mounts, read_only={"/mnt/models"})
        return ProcessPod(container, image_config(images[container["image"]]), mounts)

    return start


def _storage_mounted(container: dict, claims: dict[str, str]) -> tuple[dict, dict]:
    """KServe's pod mutator: the `pvc://` storage URI's folder at /mnt/models, and STORAGE_URI rewritten to it."""
    env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
    claim, _, path = env["STORAGE_URI"].removeprefix("pvc://").partition("/")
    container = {
        **container,
        "env": [
            *(e for e in container["env"] if e["name"] != "STORAGE_URI"),
            {"name": "STORAGE_URI", "value": "/mnt/models"},
        ],
    }
    return container, {"/mnt/models": f"{claims[claim]}/{path}"}
