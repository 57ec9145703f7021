"""The operators' admission webhooks, ported from their sources (rule by rule, with their messages):

- TFJob: training-operator release-1.9, pkg/webhooks/tensorflow/tfjob_webhook.go (validating only; the operator
  defaults in memory, never in the stored object), plus the CRD's one CEL rule;
- Katib Experiment: katib v0.19.0, pkg/webhook/v1beta1/experiment/validator/validator.go (`katib.py`), and its
  defaulting (mutate_webhook.go);
- KServe InferenceService: kserve v0.15.2, pkg/apis/serving/v1beta1/inference_service_validation.go (`kserve.py`).

Each check takes (object, old object or None on create, the API double) and returns the denial message, or "" to admit.
"""

from __future__ import annotations

import re

from tests.doubles.k8s import katib, kserve

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


# the CEL rules of the vendored CRDs that the checks above (or katib.py / kserve.py) port, by path: a re-vendored
# schema with a rule not listed here fails tests/contract/kubeflow/test_k8s_double.py
PORTED_CEL = {
    "tfjobs.kubeflow.org.v1.json": {".spec.runPolicy.schedulingPolicy.queue": "self == oldSelf"},
    "inferenceservices.serving.kserve.io.v1beta1.json": {},
}

WEBHOOKS = {
    "kubeflow.org/v1/tfjobs": [("validator.tfjob.training-operator.kubeflow.org", validate_tfjob)],
    "kubeflow.org/v1beta1/experiments": [("validator.experiment.katib.kubeflow.org", katib.validate_experiment)],
    "serving.kserve.io/v1beta1/inferenceservices": [
        ("inferenceservice.kserve-webhook-server.validator", kserve.validate_inference_service)
    ],
}
MUTATIONS = {
    "kubeflow.org/v1beta1/experiments": [katib.default_experiment],
    "serving.kserve.io/v1beta1/inferenceservices": [kserve.default_inference_service],
}
