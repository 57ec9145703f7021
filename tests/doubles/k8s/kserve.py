"""KServe's InferenceService webhooks, ported from v0.15.2 (pkg/apis/serving/v1beta1/inference_service_defaults.go,
with the inferenceservice-config's 1 CPU / 2Gi container defaults; inference_service_validation.go, component.go,
predictor.go, predictor_custom.go), with what v0.16.0 and v0.20.0 changed for the deployment modes and the canary:

- the modes (pkg/constants/constants.go): 0.15 knows `Serverless`, `RawDeployment`, `ModelMesh`; 0.16 renamed them
  `Knative` and `Standard`, keeping the old names as deprecated aliases. The mode of an InferenceService
  (controller utils.GetDeploymentMode) is its `status.deploymentMode` once written, else its
  `serving.kserve.io/deploymentMode` annotation when the version knows the value (0.16+: an alias counts as its new
  name), else the config map's `deploy.defaultDeploymentMode` (0.16+ reads an alias as its new name);
- the defaulter writes the annotation when there is none and the default is `RawDeployment` (0.15) or `Standard`
  (0.16+); 0.20's rewrites an alias annotation to the new name;
- validateDeploymentMode: once the status has a mode, an annotation that differs is refused; 0.15 and 0.16 compare
  the strings as they are (so on 0.16 to 0.19 an InferenceService annotated `RawDeployment` is refused every update),
  0.20 compares the annotation with the status normalised;
- 0.20's `spec.canary` (validateCanarySpecs): only with the annotation `Standard`, each canary's predictor named, no
  autoscaling of its own, minReplicas at most the stable predictor's, trafficPercent 0 to 100 and at most 100 in all.

The version and the config map's default are the KServe operator double's (`settings(api)`)."""

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


MODE = "serving.kserve.io/deploymentMode"
ALIASES = {"Serverless": "Knative", "RawDeployment": "Standard"}  # 0.16+: deprecated name -> new name
MODES = {"0.15": ("Serverless", "RawDeployment", "ModelMesh")}  # the modes each version knows; 0.16+: below
NEW_MODES = ("Knative", "Standard", "ModelMesh")


def settings(api) -> tuple[str, str]:
    """(KServe version, the config map's defaultDeploymentMode as written) of the cluster's KServe operator double;
    ("0.15", "Serverless") without one."""
    operator = next((c for c in getattr(api, "controllers", []) if hasattr(c, "kserve_version")), None)
    return (operator.kserve_version, operator.default_mode) if operator else ("0.15", "Serverless")


def normalised(version: str, mode: str) -> str:
    """The mode `mode` names on `version` (0.16+: an alias is its new name)."""
    return mode if version == "0.15" else ALIASES.get(mode, mode)


def deployment_mode(version: str, default: str, status_mode: str, annotations: dict) -> str:
    """utils.GetDeploymentMode of `version`: the status's, else a known annotation's, else the config map's."""
    if status_mode:
        return normalised(version, status_mode) if version == "0.20" else status_mode
    known = MODES.get(version, NEW_MODES)
    annotated = normalised(version, annotations.get(MODE, ""))
    if MODE in annotations and annotated in known:
        return annotated
    return normalised(version, default)


def default_inference_service(obj: dict, api=None) -> None:
    version, default = settings(api)
    annotations = obj["metadata"].setdefault("annotations", {})
    if version == "0.20" and annotations.get(MODE) in ALIASES:
        annotations[MODE] = ALIASES[annotations[MODE]]
    if MODE not in annotations and normalised(version, default) in ("ModelMesh", MODES.get(version, NEW_MODES)[1]):
        annotations[MODE] = normalised(version, default)
    if not annotations:
        del obj["metadata"]["annotations"]
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
    version, _ = settings(api)
    if old is not None:
        was = (old.get("status") or {}).get("deploymentMode", "")
        was = normalised(version, was) if version == "0.20" else was
        now = annotations.get(MODE)
        if was and now is not None and now != was:
            return f"update rejected: deploymentMode cannot be changed from '{was}' to '{now}'"
    if spec.get("canary") and (denied := _canary_errors(spec, annotations)):
        return denied
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


def _canary_errors(spec: dict, annotations: dict) -> str:
    """v0.20.0's validateCanarySpecs."""
    if annotations.get(MODE) != "Standard":
        return "canary is only supported in Standard deployment mode"
    stable = spec.get("predictor") or {}
    uri = any(
        e.get("name") == "STORAGE_URI"
        for c in stable.get("containers") or []
        if c.get("name") == CONTAINER
        for e in c.get("env") or []
    )
    if not uri and "model" not in stable and not any(stable.get(f, {}).get("storageUri") for f in FRAMEWORKS):
        return "canary requires a stable predictor with a model (multi-model serving is not supported with canary)"
    names, total = set(), 0
    for i, canary in enumerate(spec["canary"]):
        predictor, name = canary.get("predictor") or {}, (canary.get("predictor") or {}).get("name", "")
        if not name:
            return f"canary[{i}] predictor.name is required"
        if name in names:
            return f'canary predictor.name "{name}" is duplicated'
        names.add(name)
        if name == stable.get("name"):
            return f'canary predictor.name "{name}" conflicts with stable predictor name'
        percent = canary.get("trafficPercent", 0)
        if not 0 <= percent <= 100:
            return f'canary "{name}" trafficPercent must be between 0 and 100, got {percent}'
        total += percent
        if _implementations(predictor) != 1:
            return f'canary "{name}" predictor: exactly one of [{IMPLEMENTATIONS}] must be specified in PredictorSpec'
        if predictor.get("workerSpec") is not None:
            return f'canary "{name}" must not set workerSpec (multi-node is not yet supported for canary)'
        if (predictor.get("maxReplicas") or 0) > 0:
            return f'canary "{name}" must not set maxReplicas (canary uses fixed replicas)'
        for field in ("scaleTarget", "scaleMetric", "autoScaling"):
            if predictor.get(field) is not None:
                return f'canary "{name}" must not set {field} (canary uses fixed replicas)'
        if predictor.get("minReplicas") is not None and predictor["minReplicas"] > stable.get("minReplicas", 1):
            return (
                f'canary "{name}" minReplicas ({predictor["minReplicas"]}) must not exceed stable predictor '
                f"minReplicas ({stable.get('minReplicas', 1)})"
            )
    if total > 100:
        return f"sum of canary trafficPercent values ({total}) must be <= 100"
    return ""
