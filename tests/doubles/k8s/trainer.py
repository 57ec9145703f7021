"""Kubeflow Trainer v2.3.0's CRD validation rules (CEL, `x-kubernetes-validations` in manifests/base/crds/), ported
rule by rule with their messages, for TrainJob, TrainingRuntime and ClusterTrainingRuntime.

Each `validate_*` takes (object, old object or None on create, the API double) and returns the refusal, or "" to
admit. Transition rules (`self == oldSelf`) hold where the field is set in both the old and the new object; list
items are paired by their list-map key (`manager`, `name`), as the API server correlates them.
"""

from __future__ import annotations

import json
import re

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$")
TRAINJOB_MANAGERS = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
IMMUTABLE = "self == oldSelf"
POD_PATCH = ".spec.runtimePatches[*].trainingRuntimeSpec.template.spec.replicatedJobs[*].template.spec.template.spec"
# (path, rule) in the CRDs' order
TRAINJOB_RULES = [
    ("<root>", "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"),
    ("<root>", "size(self.metadata.name) <= 63"),
    (".spec.activeDeadlineSeconds", IMMUTABLE),
    (".spec.initializer", IMMUTABLE),
    (".spec.initializer.dataset.storageUri", "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')"),
    (".spec.initializer.model.storageUri", "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')"),
    (".spec.managedBy", "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']"),
    (".spec.managedBy", IMMUTABLE),
    (".spec.runtimePatches[*].manager", IMMUTABLE),
    *(
        (f"{POD_PATCH}.{field}", IMMUTABLE)
        for field in (
            "containers",
            "imagePullSecrets",
            "initContainers",
            "securityContext",
            "serviceAccountName",
            "terminationGracePeriodSeconds",
            "volumes",
        )
    ),
    (".spec.runtimeRef", IMMUTABLE),
    (".spec.trainer", IMMUTABLE),
    (".status.trainerStatus", "has(self.lastUpdatedTime)"),
]
RUNTIME_RULES = [
    (
        ".spec.mlPolicy",
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1",
    ),
    (".spec.mlPolicy.flux.numProcPerNode", "self >= 1"),
    (".spec.mlPolicy.torch.envInjection.targets[*].containerNames", "!self.exists(c, c == 'node')"),
    (
        ".spec.template.spec",
        "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
        "self.replicatedJobs.exists(x, has(x.dependsOn)))",
    ),
    (".spec.template.spec.failurePolicy", IMMUTABLE),
    (".spec.template.spec.network", IMMUTABLE),
    (".spec.template.spec.replicatedJobs[*].dependsOn", IMMUTABLE),
    (".spec.template.spec.startupPolicy", IMMUTABLE),
    (".spec.template.spec.successPolicy", IMMUTABLE),
    (".spec.template.spec.volumeClaimPolicies", IMMUTABLE),
    (
        ".spec.template.spec.volumeClaimPolicies[*]",
        "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
    ),
]
PORTED_CEL = {
    "trainjobs.trainer.kubeflow.org.v1alpha1.json": dict(TRAINJOB_RULES),
    "trainingruntimes.trainer.kubeflow.org.v1alpha1.json": dict(RUNTIME_RULES),
    "clustertrainingruntimes.trainer.kubeflow.org.v1alpha1.json": dict(RUNTIME_RULES),
}
PARTS = re.compile(r"\[\*\]|\.([^.\[]+)")
TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def _pairs(new, old, parts: list[str], here: str):
    """(path, new value, old value) at the rule's path, where both objects have it."""
    if not parts:
        yield here, new, old
        return
    part, rest = parts[0], parts[1:]
    if part == "[*]":
        if isinstance(new, list) and isinstance(old, list):
            for i, item in enumerate(new):
                match = _match(item, old, i)
                if match is not None:
                    yield from _pairs(item, match, rest, f"{here}[{i}]")
    elif isinstance(new, dict) and isinstance(old, dict) and part in new and part in old:
        yield from _pairs(new[part], old[part], rest, f"{here}.{part}" if here else part)


def _match(item, old: list, index: int):
    key = next((k for k in ("manager", "name") if isinstance(item, dict) and k in item), None)
    if key is None:
        return old[index] if index < len(old) else None
    return next((o for o in old if isinstance(o, dict) and o.get(key) == item[key]), None)


def _invalid(path: str, value, message: str) -> str:
    return f'{path}: Invalid value: "{TYPES.get(type(value), "object")}": {message}'


def _immutable(obj: dict, old: dict | None, paths: list[str], message: str) -> list[str]:
    if old is None:
        return []
    out = []
    for path in paths:
        out += [_invalid(p, new, message) for p, new, before in _pairs(obj, old, _split(path), "") if new != before]
    return out


def _split(path: str) -> list[str]:
    """`.a[*].b` as ["a", "[*]", "b"]."""
    return [p or "[*]" for p in PARTS.findall(path)]


def _at(obj, path: str):
    """(path, value) where `obj` has the rule's path (each list item for `[*]`)."""
    yield from ((p, v) for p, v, _ in _pairs(obj, obj, _split(path), ""))


def validate_trainjob(obj: dict, old: dict | None, api=None) -> str:
    from tests.doubles.k8s.admission import aggregate

    name = obj["metadata"]["name"]
    errors = []
    if not DNS1035.match(name):
        errors.append(_invalid("<root>", obj, "metadata.name must match RFC 1035 DNS label format"))
    if len(name) > 63:
        errors.append(_invalid("<root>", obj, "metadata.name must be no more than 63 characters"))
    for kind in ("dataset", "model"):
        for path, uri in _at(obj, f".spec.initializer.{kind}.storageUri"):
            if uri != "" and not URI.match(uri):
                errors.append(_invalid(path, uri, "storageUri may be empty, or it must be a valid URI (scheme://...)"))
    for path, manager in _at(obj, ".spec.managedBy"):
        if manager not in TRAINJOB_MANAGERS:
            errors.append(
                _invalid(
                    path,
                    manager,
                    "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
                )
            )
    for path, status in _at(obj, ".status.trainerStatus"):
        if "lastUpdatedTime" not in status:
            errors.append(_invalid(path, status, "lastUpdatedTime is required when trainerStatus is present"))
    errors += _immutable(obj, old, [p for p, rule in TRAINJOB_RULES if rule == IMMUTABLE], "field is immutable")
    return aggregate(errors)


def validate_runtime(obj: dict, old: dict | None, api=None) -> str:
    from tests.doubles.k8s.admission import aggregate

    errors = []
    for path, policy in _at(obj, ".spec.mlPolicy"):
        if sum(k in policy for k in ("torch", "mpi", "jax", "xgboost", "flux")) > 1:
            errors.append(_invalid(path, policy, "Only one of the policy can be configured"))
    for path, count in _at(obj, ".spec.mlPolicy.flux.numProcPerNode"):
        if count < 1:
            errors.append(_invalid(path, count, "NumProcPerNode in fluxPolicy must be >= 1"))
    for path, names in _at(obj, ".spec.mlPolicy.torch.envInjection.targets[*].containerNames"):
        if "node" in names:
            errors.append(
                _invalid(
                    path,
                    names,
                    "containerNames must not include the main node container because PET_* envs are always "
                    "injected into it",
                )
            )
    for path, spec in _at(obj, ".spec.template.spec"):
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        if in_order and any("dependsOn" in job for job in spec.get("replicatedJobs") or []):
            errors.append(_invalid(path, spec, "StartupPolicy and DependsOn APIs are mutually exclusive"))
    for path, claim_policy in _at(obj, ".spec.template.spec.volumeClaimPolicies[*]"):
        if any(((t.get("metadata") or {}).get("namespace") or "") for t in claim_policy.get("templates") or []):
            errors.append(_invalid(path, claim_policy, "namespace cannot be set for VolumeClaimPolicies templates"))
    errors += _immutable(obj, old, [p for p, rule in RUNTIME_RULES if rule == IMMUTABLE], "Value is immutable")
    return aggregate(errors)


def validate_runtime_ref(obj: dict, old: dict | None, api) -> str:
    """Trainer v2.3.0's TrainJob webhook (ValidateObjects): the runtime `spec.runtimeRef` names must exist."""
    ref = obj["spec"]["runtimeRef"]
    kind = ref.get("kind", "ClusterTrainingRuntime")
    plural = {"TrainingRuntime": "trainingruntimes", "ClusterTrainingRuntime": "clustertrainingruntimes"}.get(kind)
    if plural is None:
        return f"unsupported runtime: {kind}.{ref.get('apiGroup', '')}"
    namespace = obj["metadata"].get("namespace") if kind == "TrainingRuntime" else None
    if ("trainer.kubeflow.org/v1alpha1", namespace, plural, ref["name"]) in api.objects:
        return ""
    field = "runtimeRef" if kind == "TrainingRuntime" else "RuntimeRef"
    return (
        f"spec.{field}: Invalid value: {json.dumps(ref, separators=(',', ':'))}: {plural}.trainer.kubeflow.org "
        f'"{ref["name"]}" not found: specified {kind[0].lower() + kind[1:]} must be created before the TrainJob '
        "is created"
    )
