"""The operators' admission webhooks, ported from their sources (rule by rule, with their messages):

- TFJob: training-operator release-1.9, pkg/webhooks/tensorflow/tfjob_webhook.go (validating only; the operator
  defaults in memory, never in the stored object), plus the CRD's one CEL rule;
- Katib Experiment: katib v0.19.0, pkg/webhook/v1beta1/experiment/validator/validator.go (`katib.py`), and its
  defaulting (mutate_webhook.go);
- KServe InferenceService: kserve v0.15.2, pkg/apis/serving/v1beta1/inference_service_validation.go (`kserve.py`);
- Kubeflow Trainer v2.3.0's TrainJob and (Cluster)TrainingRuntime: their CRDs' CEL rules (`trainer.py`).

Each check takes (object, old object or None on create, the API double) and returns the denial message, or "" to admit.

And Kubernetes 1.32's Pod Security admission (k8s.io/pod-security-admission, policy/check_*.go) for namespaces
labelled `pod-security.kubernetes.io/enforce: restricted`, with the API server's message. As on a cluster it
judges pods, never the objects that hold their templates: each operator double asks `pod_security_denial` as its
controller creates a pod (katib_operator.py, kserve_operator.py, training_operator.py, trainer_controller.py).
"""

from __future__ import annotations

import re

from tests.doubles.k8s import katib, kserve, trainer

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
SECCOMP_ALLOWED = ("RuntimeDefault", "Localhost")

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, "
    "and end with an alphanumeric character (e.g. 'my-name' or 'abc-123', regex used for validation is "
    "'[a-z]([-a-z0-9]*[a-z0-9])?')"
)
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")


def dns1035_errors(name: str) -> list[str]:
    errors = []
    if len(name) > 63:
        errors.append("must be no more than 63 characters")
    if not DNS1035.match(name):
        errors.append(DNS1035_MESSAGE)
    return errors


def aggregate(errors: list[str]) -> str:
    """apimachinery's ErrorList.ToAggregate(): one message bare, several in brackets, duplicates dropped."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]" if unique else ""


def validate_tfjob(obj: dict, old: dict | None, api=None) -> str:
    errors = []
    name = obj["metadata"]["name"]
    if problems := dns1035_errors(name):
        errors.append(f'metadata.name: Invalid value: "{name}": should match: {",".join(problems)}')
    spec = obj.get("spec") or {}
    run_policy = spec.get("runPolicy") or {}
    if old is not None:
        before = ((old.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
        if run_policy.get("managedBy") != before:
            errors.append(
                f'spec.runPolicy.managedBy: Invalid value: "{run_policy.get("managedBy") or "null"}": field is immutable'
            )
        queue = (run_policy.get("schedulingPolicy") or {}).get("queue")
        old_queue = (((old.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy") or {}).get("queue")
        if queue is not None and old_queue is not None and queue != old_queue:  # the CRD's CEL rule
            errors.append(
                'spec.runPolicy.schedulingPolicy.queue: Invalid value: "string": spec.runPolicy.schedulingPolicy.queue is immutable'
            )
    if "managedBy" in run_policy and run_policy["managedBy"] not in MANAGED_BY:
        errors.append(
            f'spec.runPolicy.managedBy: Unsupported value: "{run_policy["managedBy"]}": supported values: '
            + ", ".join(f'"{v}"' for v in MANAGED_BY)
        )
    replica_specs = spec.get("tfReplicaSpecs")
    if replica_specs is None:
        errors.append("spec.tfReplicaSpecs: Required value: must be required")
    else:
        chief_or_master = 0
        for rtype, rspec in replica_specs.items():
            path = f"spec.tfReplicaSpecs[{rtype}].template.spec.containers"
            containers = (((rspec or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            if not containers:
                errors.append(f"{path}: Required value: must be specified")
            if rtype in ("Chief", "Master"):
                chief_or_master += 1
            for i, container in enumerate(containers):
                if not container.get("image"):
                    errors.append(f"{path}[{i}].image: Required value: must be required")
            if not any(c.get("name") == "tensorflow" for c in containers):
                errors.append(f"{path}: Required value: must have at least one container with name tensorflow")
        if chief_or_master > 1:
            errors.append("spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role")
    return aggregate(errors)


def _names(containers: list[dict]) -> str:
    names = ", ".join(f'"{c["name"]}"' for c in containers)
    return f"container {names}" if len(containers) == 1 else f"containers {names}"


def _context(container: dict) -> dict:
    return container.get("securityContext") or {}


def _restricted_violations(spec: dict) -> list[str]:
    """The restricted profile's checks that a pod spec fails, each as `reason (detail)`, in the checks' order."""
    pod = spec.get("securityContext") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    found = []
    escalating = [c for c in containers if _context(c).get("allowPrivilegeEscalation") is not False]
    if escalating:
        found.append(
            f"allowPrivilegeEscalation != false ({_names(escalating)} must set "
            "securityContext.allowPrivilegeEscalation=false)"
        )
    not_dropped = [c for c in containers if "ALL" not in ((_context(c).get("capabilities") or {}).get("drop") or [])]
    added = [
        (c, cap)
        for c in containers
        for cap in (_context(c).get("capabilities") or {}).get("add") or []
        if cap != "NET_BIND_SERVICE"
    ]
    details = [f'{_names(not_dropped)} must set securityContext.capabilities.drop=["ALL"]'] if not_dropped else []
    details += [f'{_names([c])} must not include "{cap}" in securityContext.capabilities.add' for c, cap in added]
    if details:
        found.append(f"unrestricted capabilities ({'; '.join(details)})")
    details = ["pod must not set securityContext.runAsNonRoot=false"] if pod.get("runAsNonRoot") is False else []
    explicit_false = [c for c in containers if _context(c).get("runAsNonRoot") is False]
    if explicit_false:
        details.append(f"{_names(explicit_false)} must not set securityContext.runAsNonRoot=false")
    if pod.get("runAsNonRoot") is not True:
        unset = [c for c in containers if _context(c).get("runAsNonRoot") is None]
        if unset:
            details.append(f"pod or {_names(unset)} must set securityContext.runAsNonRoot=true")
    if details:
        found.append(f"runAsNonRoot != true ({'; '.join(details)})")
    details = ["pod must not set runAsUser=0"] if pod.get("runAsUser") == 0 else []
    root = [c for c in containers if _context(c).get("runAsUser") == 0]
    if root:
        details.append(f"{_names(root)} must not set runAsUser=0")
    if details:
        found.append(f"runAsUser=0 ({'; '.join(details)})")
    found += _seccomp_violations(pod, containers)
    return found


def _seccomp_violations(pod: dict, containers: list[dict]) -> list[str]:
    pod_type = (pod.get("seccompProfile") or {}).get("type")
    details = []
    if pod_type and pod_type not in SECCOMP_ALLOWED:
        details.append(f'pod must not set securityContext.seccompProfile.type to "{pod_type}"')
    bad = [
        c for c in containers if (_context(c).get("seccompProfile") or {}).get("type") not in (None, *SECCOMP_ALLOWED)
    ]
    if bad:
        types = {(_context(c)["seccompProfile"])["type"] for c in bad}
        details.append(
            f"{_names(bad)} must not set securityContext.seccompProfile.type to "
            + ", ".join(f'"{t}"' for t in sorted(types))
        )
    if pod_type not in SECCOMP_ALLOWED:
        unset = [c for c in containers if not (_context(c).get("seccompProfile") or {}).get("type")]
        if unset:
            details.append(
                f'pod or {_names(unset)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
            )
    return [f"seccompProfile ({'; '.join(details)})"] if details else []


def pod_security_denial(pod_name: str, spec: dict, labels: dict) -> str:
    """The API server's refusal of the pod `pod_name` (its spec) in a namespace with `labels`, or "" to admit."""
    if labels.get(ENFORCE) != "restricted":
        return ""
    violations = _restricted_violations(spec)
    if not violations:
        return ""
    version = labels.get(ENFORCE_VERSION, "latest")
    return f'pods "{pod_name}" is forbidden: violates PodSecurity "restricted:{version}": {", ".join(violations)}'


def predictor_pod(predictor: dict) -> dict:
    """The predictor's pod spec as KServe makes it: its pod fields, and the model's container as kserve-container."""
    spec = {k: v for k, v in predictor.items() if k not in ("model", "containers")}
    model = predictor.get("model")
    containers = [{**model, "name": kserve.CONTAINER}] if model else []
    return {**spec, "containers": [*containers, *(predictor.get("containers") or [])]}


# the CEL rules of the vendored CRDs that the checks above (or katib.py / kserve.py) port, by path: a re-vendored
# schema with a rule not listed here fails tests/contract/kubeflow/test_k8s_double.py
PORTED_CEL = {
    "tfjobs.kubeflow.org.v1.json": {".spec.runPolicy.schedulingPolicy.queue": "self == oldSelf"},
    "inferenceservices.serving.kserve.io.v1beta1.json": {},
    "inferenceservices.serving.kserve.io.v1beta1.v0.16.0.json": {},
    "inferenceservices.serving.kserve.io.v1beta1.v0.20.0.json": {},
    **trainer.PORTED_CEL,
}

WEBHOOKS = {
    "kubeflow.org/v1/tfjobs": [("validator.tfjob.training-operator.kubeflow.org", validate_tfjob)],
    "kubeflow.org/v1beta1/experiments": [("validator.experiment.katib.kubeflow.org", katib.validate_experiment)],
    "serving.kserve.io/v1beta1/inferenceservices": [
        ("inferenceservice.kserve-webhook-server.validator", kserve.validate_inference_service)
    ],
    # Trainer v2's CRD validation rules (CEL): the API server answers them with 422, this double with 403
    "trainer.kubeflow.org/v1alpha1/trainjobs": [
        ("trainjobs.trainer.kubeflow.org CEL", trainer.validate_trainjob),
        ("validator.trainjob.trainer.kubeflow.org", trainer.validate_runtime_ref),
    ],
    "trainer.kubeflow.org/v1alpha1/trainingruntimes": [
        ("trainingruntimes.trainer.kubeflow.org CEL", trainer.validate_runtime)
    ],
    "trainer.kubeflow.org/v1alpha1/clustertrainingruntimes": [
        ("clustertrainingruntimes.trainer.kubeflow.org CEL", trainer.validate_runtime)
    ],
}
MUTATIONS = {  # each mutation takes (object, the API double)
    "kubeflow.org/v1beta1/experiments": [lambda obj, api: katib.default_experiment(obj)],
    "serving.kserve.io/v1beta1/inferenceservices": [kserve.default_inference_service],
}
