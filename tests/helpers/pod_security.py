"""Pod Security's verdict on the pods an object's controller would create from it, for tests that check objects
before any controller runs (the rendered objects): the API server admits the objects themselves and judges only
their pods (tests/doubles/k8s/admission.py's `pod_security_denial`)."""

from __future__ import annotations

from tests.doubles.k8s import admission

RESTRICTED = {admission.ENFORCE: "restricted"}


def pods_of(obj: dict) -> list[tuple[str, dict]]:
    """(pod name, pod spec) of the pods the controllers would create for a TFJob (one a replica type), a Job (its
    pod's name is random), a TrainingRuntime (each replicated job's first pod, for a TrainJob that patches nothing
    of their security), an Experiment (a trial's pod) or an InferenceService (its predictor's pod); none for the
    other kinds."""
    name, spec = obj["metadata"]["name"], obj.get("spec") or {}
    kind = obj.get("kind")
    if kind == "TFJob":
        return [
            (f"{name}-{rtype.lower()}-0", _template_spec(rspec))
            for rtype, rspec in (spec.get("tfReplicaSpecs") or {}).items()
        ]
    if kind == "Job":
        return [(f"{name}-pod", _template_spec(spec))]
    if kind == "TrainingRuntime":
        jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        return [(f"{name}-{job['name']}-0-0", _template_spec(job["template"].get("spec"))) for job in jobs]
    if kind == "Experiment":
        trial = ((spec.get("trialTemplate") or {}).get("trialSpec") or {}).get("spec")
        return [(f"{name}-trial", _template_spec(trial))]
    if kind == "InferenceService":
        return [(f"{name}-predictor", admission.predictor_pod(spec.get("predictor") or {}))]
    return []


def _template_spec(holder: dict | None) -> dict:
    return (((holder or {}).get("template") or {}).get("spec")) or {}


def denials(obj: dict, labels: dict = RESTRICTED) -> list[str]:
    """The API server's refusal of each of `obj`'s pods that a namespace with `labels` forbids."""
    return [denied for pod, spec in pods_of(obj) if (denied := admission.pod_security_denial(pod, spec, labels))]
