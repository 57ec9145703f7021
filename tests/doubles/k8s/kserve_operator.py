"""KServe 0.15, 0.16 or 0.20 (`KServeOperator(version=, default_mode=)`: the inferenceservice-config's
`deploy.defaultDeploymentMode` as written; KServe ships `Serverless`), each InferenceService in the mode that version
gives it (kserve.deployment_mode), its status's `deploymentMode` that mode's name.

Knative mode (0.15's Serverless), with Knative Serving under it, as far as a deploy step sees them (the rules are
in tests/doubles/k8s/kserve.py's sources and Knative 1.17's): every change of the predictor's pod template (spec,
labels, annotations) makes a new revision `NAME-predictor-0000N` (a `serving.knative.dev/v1` Revision object and a
pod); `canaryTrafficPercent` only moves traffic: with a revision rolled out before, the `latest` target gets that
share and the last rolled-out revision (`prev` tag) the rest, `0` pins everything to it; without it the latest
ready revision gets everything. The status is KServe's: `observedGeneration` is the Knative Service's generation,
`latestRolledoutRevision` / `previousRolledoutRevision` follow KServe's PropagateStatus, traffic entries carry the
external-domain URL of their tag, and a failed revision or model load is reported as KServe reports it.

The cluster's network (`network.Network`) routes `NAME-predictor.NS.svc.cluster.local` by the traffic split and
`latest-` / `prev-` tag hosts to their revisions; `*.example.com` (the external domain) stays unreachable.

Standard mode (0.15's RawDeployment; pkg/controller/v1beta1/inferenceservice/components/predictor.go,
reconcilers/raw, inference_service_status.go's PropagateRawStatus): the predictor is a Deployment
`NAME-predictor` (0.20: `NAME-PREDICTORNAME-predictor` when `spec.predictor.name` is set) behind a Service of that
name; no Knative revisions, no traffic split: `canaryTrafficPercent` is ignored. A change of the pod template rolls
the Deployment: the new pod replaces the old once it is ready (this double runs one pod per Deployment, standing
for its replicas), and a template changed back to the serving pod's before then (a rollback: its ReplicaSet's pods
never left) stops the new pod and is rolled out at once; a pod that fails leaves the old one serving and the Deployment's Progressing condition False
(`ProgressDeadlineExceeded`, at once here, after the deadline on a cluster). The InferenceService's status is
PropagateRawStatus's: `PredictorReady` / `Ready` from the Deployment's conditions, `observedGeneration` the
Deployment's, the component's URL once ready; `address` the predictor Service's cluster-local name.
0.20's `spec.canary`: each canary a Deployment `NAME-CANARYNAME-predictor` of the stable predictor merged with the
canary's, its replicas ceil(stable minReplicas x trafficPercent / 100) taken from the stable's (at least 1 left);
`status.canaryStatuses` and the `CanaryPredictorReady` condition; a Deployment no longer in the spec is deleted.
v0.20.0 routes nothing by trafficPercent (its ingress and the stable Service select the stable pods only): a canary
answers at its own Service, and its share of the replicas is its trafficPercent.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass, field

from tests.doubles.k8s import admission, kserve
from tests.doubles.k8s.server import now

ISVC = ("serving.kserve.io/v1beta1", "inferenceservices")
REVISIONS = ("serving.knative.dev/v1", "revisions")
DEPLOYMENTS = ("apps/v1", "deployments")
SCHEMA_FILES = {
    "0.15": "inferenceservices.serving.kserve.io.v1beta1.json",
    "0.16": "inferenceservices.serving.kserve.io.v1beta1.v0.16.0.json",
    "0.20": "inferenceservices.serving.kserve.io.v1beta1.v0.20.0.json",
}
STANDARD = ("Standard", "RawDeployment")


def cluster(version: str = "0.15", default_mode: str = "Serverless") -> dict:
    """KubeAPI's `installed` and `schemas` for KServe `version` installed with `default_mode`: Knative Serving's
    revisions when the default is Knative, Deployments (apps/v1) always."""
    installed = {ISVC[0]: {ISVC[1]: "InferenceService"}, DEPLOYMENTS[0]: {DEPLOYMENTS[1]: "Deployment"}}
    if kserve.normalised(version, default_mode) in ("Knative", "Serverless"):
        installed[REVISIONS[0]] = {REVISIONS[1]: "Revision"}
    return {"installed": installed, "schemas": {f"{ISVC[0]}/{ISVC[1]}": SCHEMA_FILES[version]}}


NOT_IN_TEMPLATE = (
    "autoscaling.knative.dev/min-scale",
    "autoscaling.knative.dev/max-scale",
    "kubectl.kubernetes.io/last-applied-configuration",
)


@dataclass
class RefusedPod:
    """A predictor pod the API server refused (Pod Security): it never starts."""

    refusal: str

    def state(self) -> str:
        return f"failed: {self.refusal}"

    def stop(self) -> None:
        pass


def pod_name(owner: str, template: dict) -> str:
    """The name the ReplicaSet controller gives a pod of `owner` (a Deployment): `OWNER-HASH-XXXXX`, here derived
    from the template so that a test can name it."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return f"{owner}-{digest[:10]}-{digest[10:15]}"


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


@dataclass
class Deployment:
    """A predictor's Deployment (Standard mode): the pod serving and the one rolling in."""

    name: str
    template: dict
    replicas: int
    generation: int = 1
    serving: object = None  # the pod of the last template that became ready
    rolling: object = None  # the pod of the current template, until it is ready
    failed: str = ""  # why the current template's pod failed
    refused: str = ""  # the API server's refusal of the current template's pod (ReplicaFailure FailedCreate)
    isvc_label: str = ""
    serving_template: dict = field(default_factory=dict)  # the template of the pod serving (its ReplicaSet's)

    def stop(self):
        for pod in (self.serving, self.rolling):
            if pod is not None:
                pod.stop()

    def step(self) -> None:
        """Promote the rolling pod once ready (the old one goes); note its failure."""
        if self.rolling is None:
            return
        state = self.rolling.state()
        if state == "ready":
            if self.serving is not None:
                self.serving.stop()
            self.serving, self.rolling, self.serving_template = self.rolling, None, self.template
        elif state.startswith("failed"):
            self.failed = state.removeprefix("failed: ")

    def obj(self, ns: str, labels: dict) -> dict:
        done = self.rolling is None and not self.refused
        available = self.serving is not None
        progressing = (
            {
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": f'ReplicaSet "{self.name}" has timed out progressing.',
            }
            if self.failed
            else {"status": "True", "reason": "NewReplicaSetAvailable" if done else "ReplicaSetUpdated", "message": ""}
        )
        conditions = [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            },
            {"type": "Progressing", **progressing},
        ]
        if self.refused:
            conditions.append(
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": self.refused}
            )
        return {
            "apiVersion": DEPLOYMENTS[0],
            "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": ns, "labels": labels, "generation": self.generation},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app": f"isvc.{self.name}"}},
                "template": {
                    "metadata": {"labels": {**labels, "app": f"isvc.{self.name}"}},
                    "spec": self.template["predictor"],
                },
            },
            "status": {
                "observedGeneration": self.generation,
                "replicas": self.replicas,
                "updatedReplicas": self.replicas if done else 0,
                "readyReplicas": self.replicas if available else 0,
                "availableReplicas": self.replicas if available else 0,
                "conditions": conditions,
            },
        }


class KServeOperator:
    def __init__(
        self, network, start_pod, domain: str = "example.com", version: str = "0.15", default_mode: str = "Serverless"
    ):
        """`start_pod(isvc, revision or Deployment name, predictor spec)` returns a pod (pods.ProcessPod or
        pods.FakePod)."""
        if version not in SCHEMA_FILES:
            raise ValueError(f"KServe {version}: this double models {', '.join(SCHEMA_FILES)}")
        self.network, self.start_pod, self.domain = network, start_pod, domain
        self.kserve_version, self.default_mode = version, default_mode
        self.services: dict[tuple, Service] = {}
        self.raw: dict[tuple, dict[str, Deployment]] = {}  # InferenceService -> its Deployments by name

    def close(self):
        for service in self.services.values():
            for revision in service.revisions:
                revision.pod.stop()
        for deployments in self.raw.values():
            for deployment in deployments.values():
                deployment.stop()

    def mode(self, isvc: dict) -> str:
        return kserve.deployment_mode(
            self.kserve_version,
            self.default_mode,
            (isvc.get("status") or {}).get("deploymentMode", ""),
            isvc["metadata"].get("annotations") or {},
        )

    def revision(self, name: str) -> Revision:
        return next(r for s in self.services.values() for r in s.revisions if r.name == name)

    def reconcile(self, api) -> None:
        for key, isvc in list(api.objects.items()):
            if (key[0], key[2]) == ISVC:
                self._reconcile(api, key, isvc)
        for key in [k for k in self.services if k not in api.objects]:
            self._tear_down(api, key)
        for key in [k for k in self.raw if k not in api.objects]:
            self._tear_down_raw(api, key)

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
            if key in self.raw:
                self._tear_down_raw(api, key)
            api.held.discard(key)
            return
        mode = self.mode(isvc)
        if mode in STANDARD:
            return self._reconcile_standard(api, key, isvc, mode)
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
            pod = self._start(api, isvc, f"{revision_name}-deployment", revision_name, predictor)
            service.revisions.append(Revision(revision_name, template, pod))
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
        api.write_status(
            key, {**self._status(isvc, service, traffic, ready, created, name, ns), "deploymentMode": mode}
        )

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
        if created.state.startswith("failed") and not isinstance(created.pod, RefusedPod):  # a pod that ran
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

    # Standard mode
    def _tear_down_raw(self, api, key):
        for deployment in self.raw.pop(key).values():
            deployment.stop()
            api.remove((DEPLOYMENTS[0], key[1], DEPLOYMENTS[1], deployment.name))
            self.network.unroute(f"{deployment.name}.{key[1]}.svc.cluster.local")

    def _variants(self, isvc: dict, name: str) -> dict[str, tuple[dict, int]]:
        """Deployment name -> (predictor spec, replicas): the stable predictor's and each canary's (0.20)."""
        spec = isvc["spec"]
        stable = {k: v for k, v in spec["predictor"].items() if k != "canaryTrafficPercent"}
        low = stable.get("minReplicas", 1)
        canaries = {
            f"{name}-{c['predictor']['name']}-predictor": (
                {**stable, **c["predictor"], "maxReplicas": 0},
                c["predictor"].get("minReplicas") or math.ceil(low * c.get("trafficPercent", 0) / 100),
            )
            for c in spec.get("canary") or []
        }
        stable_name = f"{name}-{stable['name']}-predictor" if stable.get("name") else f"{name}-predictor"
        taken = sum(replicas for _, replicas in canaries.values())
        return {stable_name: (stable, max(low - taken, 1) if canaries else low), **canaries}

    def _reconcile_standard(self, api, key, isvc, mode):
        _, ns, _, name = key
        deployments = self.raw.setdefault(key, {})
        labels = {
            **(isvc["metadata"].get("labels") or {}),
            "serving.kserve.io/inferenceservice": name,
            "component": "predictor",
        }
        variants = self._variants(isvc, name)
        for gone in [d for d in deployments if d not in variants]:
            deployments.pop(gone).stop()
            api.remove((DEPLOYMENTS[0], ns, DEPLOYMENTS[1], gone))
            self.network.unroute(f"{gone}.{ns}.svc.cluster.local")
        for dname, (predictor, replicas) in variants.items():
            template = {
                "predictor": {k: v for k, v in predictor.items() if k not in ("name", "minReplicas", "maxReplicas")},
                "labels": labels,
            }
            deployment = deployments.get(dname)
            if deployment is None:
                deployment = deployments[dname] = Deployment(dname, template, replicas)
                self._roll(api, isvc, deployment, predictor)
            elif deployment.template != template:
                if deployment.rolling is not None:
                    deployment.rolling.stop()
                deployment.template, deployment.failed, deployment.refused = template, "", ""
                deployment.replicas, deployment.generation = replicas, deployment.generation + 1
                if deployment.serving is not None and template == deployment.serving_template:
                    deployment.rolling = None
                else:
                    self._roll(api, isvc, deployment, predictor)
            elif deployment.replicas != replicas:
                deployment.replicas, deployment.generation = replicas, deployment.generation + 1
            deployment.step()
            self._write_deployment(api, ns, deployment, labels)
            if deployment.serving is not None:
                self.network.route(f"{dname}.{ns}.svc.cluster.local", [(*deployment.serving.address, 100)])
        stable_name = next(iter(variants))
        api.write_status(key, self._raw_status(isvc, mode, deployments[stable_name], deployments, name, ns))

    def _start(self, api, isvc, owner: str, name: str, predictor: dict):
        """The predictor's pod, once Pod Security admission admits it in the InferenceService's namespace (as the
        ReplicaSet controller creates it); a RefusedPod with the API server's message otherwise."""
        labels = (api.namespaces or {}).get(isvc["metadata"]["namespace"]) or {}
        pod = admission.predictor_pod(predictor)
        if denied := admission.pod_security_denial(pod_name(owner, pod), pod, labels):
            return RefusedPod(denied)
        return self.start_pod(isvc, name, predictor)

    def _roll(self, api, isvc, deployment: Deployment, predictor: dict) -> None:
        """Start the pod of the Deployment's template; a refused one leaves it rolling nothing (ReplicaFailure)."""
        pod = self._start(api, isvc, deployment.name, deployment.name, predictor)
        deployment.refused = pod.refusal if isinstance(pod, RefusedPod) else ""
        deployment.rolling = None if deployment.refused else pod

    @staticmethod
    def _write_deployment(api, ns, deployment, labels):
        key = (DEPLOYMENTS[0], ns, DEPLOYMENTS[1], deployment.name)
        obj = deployment.obj(ns, labels)
        if key not in api.objects:
            created = api.create_owned(key, {k: v for k, v in obj.items() if k != "status"})
            created["metadata"]["generation"] = deployment.generation
        stored = api.objects[key]
        for part in ("spec", "status"):
            stored[part] = obj[part]
        stored["metadata"].update(generation=deployment.generation, labels=labels)

    def _raw_status(self, isvc, mode, stable, deployments, name, ns) -> dict:
        status = isvc.get("status") or {}
        if stable.failed:
            ready = {
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": f'ReplicaSet "{stable.name}" has timed out progressing.',
            }
        elif stable.rolling is None and stable.serving is not None and not stable.refused:
            ready = {"status": "True", "reason": "NewReplicaSetAvailable"}
        elif stable.serving is not None:
            ready = {"status": "Unknown", "reason": "ReplicaSetUpdated"}
        else:
            ready = {
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
            }
        conditions = [
            {"type": "IngressReady", "status": "True"},
            {"type": "PredictorReady", **ready},
            {"type": "Ready", **ready},
        ]
        canaries = [(n, d) for n, d in deployments.items() if d is not stable]
        out = {
            "observedGeneration": stable.generation,
            "deploymentMode": mode,
            "conditions": conditions,
            "components": {"predictor": {}},
            "modelStatus": self._raw_model_status(stable),
        }
        if canaries:
            spec_canaries = {f"{name}-{c['predictor']['name']}-predictor": c for c in isvc["spec"].get("canary") or []}
            out["canaryStatuses"] = [
                {
                    "name": spec_canaries[n]["predictor"]["name"],
                    "ready": d.serving is not None and d.rolling is None and not d.refused,
                    "trafficPercent": spec_canaries[n].get("trafficPercent", 0),
                }
                for n, d in canaries
            ]
            all_ready = all(c["ready"] for c in out["canaryStatuses"])
            conditions.append(
                {
                    "type": "CanaryPredictorReady",
                    "status": "True" if all_ready else "False",
                    "reason": "AllCanariesReady" if all_ready else "CanariesNotReady",
                }
            )
        if stable.serving is not None:
            local = f"http://{stable.name}.{ns}.svc.cluster.local"
            out["components"]["predictor"] = {"url": local, "address": {"url": local}}
            out["address"] = {"url": local}
            out["url"] = f"http://{name}-{ns}.{self.domain}"
        before = {c["type"]: c for c in status.get("conditions") or []}
        for c in conditions:
            same = before.get(c["type"], {})
            changed = (same.get("status"), same.get("reason")) != (c["status"], c.get("reason"))
            c["lastTransitionTime"] = now() if changed else same.get("lastTransitionTime", now())
        return out

    @staticmethod
    def _raw_model_status(stable) -> dict:
        if stable.failed:
            return {
                "transitionStatus": "BlockedByFailedLoad",
                "states": {"activeModelState": "Loaded" if stable.serving else "", "targetModelState": "FailedToLoad"},
                "lastFailureInfo": {"reason": "ModelLoadFailed", "message": stable.failed},
            }
        if stable.rolling is None and not stable.refused:
            return {
                "transitionStatus": "UpToDate",
                "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
            }
        return {
            "transitionStatus": "InProgress",
            "states": {"activeModelState": "Loaded" if stable.serving else "", "targetModelState": "Pending"},
        }


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
