"""KServe v0.15.2's InferenceService webhooks, ported: the defaulter (pkg/apis/serving/v1beta1/
inference_service_defaults.go, with the shipped inferenceservice-config: Serverless, 1 CPU / 2Gi container defaults)
and the validator (inference_service_validation.go, component.go, predictor.go, predictor_custom.go)."""

from __future__ import annotations

import re

NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
FRAMEWORKS = (
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
IMPLEMENTATIONS = "SKLearn, XGBoost, Tensorflow, PyTorch, Triton, ONNX, HuggingFace, PMML, LightGBM, Paddle, Model, WorkerSpec, PodSpec"
CONTAINER = "kserve-container"
AUTOSCALER_CLASSES = ("hpa", "external", "keda", "none")
RESOURCE_DEFAULTS = {"cpu": "1", "memory": "2Gi"}


def default_inference_service(obj: dict) -> None:
    predictor = (obj.get("spec") or {}).get("predictor") or {}
    for framework in FRAMEWORKS:
        if framework in predictor:
            spec = predictor.pop(framework)
            predictor["model"] = {"modelFormat": {"name": framework}, **spec}
            if framework in ("triton", "onnx", "huggingface"):
                predictor["model"].setdefault("protocolVersion", "v2")
    containers = predictor.get("containers") or []
    if containers and _implementations(predictor) == 1 and "model" not in predictor:
        if len(containers) == 1 or not containers[0].get("name"):
            containers[0]["name"] = CONTAINER
        resources = containers[0].setdefault("resources", {})
        for kind in ("requests", "limits"):
            for key, value in RESOURCE_DEFAULTS.items():
                resources.setdefault(kind, {}).setdefault(key, value)


def _implementations(predictor: dict) -> int:
    count = sum(1 for f in (*FRAMEWORKS, "model", "workerSpec") if predictor.get(f) is not None)
    containers = predictor.get("containers") or []
    count += sum(1 for c in containers if c.get("name") == CONTAINER)
    if containers and count == 0:
        count = 1  # containers[0] is the custom predictor
    return count


def validate_inference_service(obj: dict, old: dict | None, api=None) -> str:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if old is not None:
        was = (old.get("status") or {}).get("deploymentMode", "")
        now = annotations.get("serving.kserve.io/deploymentMode")
        if was and now is not None and now != was:
            return f"update rejected: deploymentMode cannot be changed from '{was}' to '{now}'"
    if not NAME.match(meta["name"]):
        return (
            f'the InferenceService "{meta["name"]}" is invalid: a InferenceService name must consist of lower case '
            "alphanumeric characters or '-', and must start with alphabetical character. (e.g. \"my-name\" or "
            "\"abc-123\", regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    if (
        "serving.kserve.io/autoscalerClass" in annotations
        and annotations["serving.kserve.io/autoscalerClass"] not in AUTOSCALER_CLASSES
    ):
        return f"[{annotations['serving.kserve.io/autoscalerClass']}] is not a supported autoscaler class type"
    predictor = spec.get("predictor") or {}
    for c in predictor.get("containers") or []:
        if c.get("name") == "transformer-container" and any(e.get("name") == "STORAGE_URI" for e in c.get("env") or []):
            return "storage uri should not be specified in transformer container"
    for component, what in (
        ("predictor", "PredictorSpec"),
        ("transformer", "TransformerSpec"),
        ("explainer", "ExplainerSpec"),
    ):
        part = spec.get(component)
        if part is None:
            continue
        if component == "predictor" and _implementations(part) != 1:
            return f"exactly one of [{IMPLEMENTATIONS}] must be specified in {what}"
        if component == "predictor" and part.get("containers") and "model" not in part:
            protocol = next(
                (e.get("value") for e in part["containers"][0].get("env") or [] if e.get("name") == "PROTOCOL"), None
            )
            if protocol is not None and protocol not in ("v1", "v2"):
                return f"invalid protocol v1, v2. Must be one of [{protocol}]"
        if (part.get("containerConcurrency") or 0) < 0:
            return "parallelism cannot be less than 0"
        low, high = part.get("minReplicas", 1), part.get("maxReplicas", 0)
        if low < 0:
            return "'MinReplicas' cannot be less than 0"
        if high < 0:
            return "'MaxReplicas' cannot be less than 0"
        if low > high and high != 0:
            return "'MinReplicas' cannot be greater than MaxReplicas"
        if (
            part.get("deploymentStrategy") is not None
            and annotations.get("serving.kserve.io/deploymentMode") != "RawDeployment"
        ):
            return "customizing deploymentStrategy is only supported for raw deployment mode"
        metric = part.get("scaleMetric", "concurrency")
        if annotations.get("serving.kserve.io/deploymentMode") != "RawDeployment" and metric not in (
            "concurrency",
            "rps",
        ):
            return f"[{metric}] is not a supported metric"
    return ""
