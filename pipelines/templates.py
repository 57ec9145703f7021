"""Pipeline templates: load a compiled or published one (Artifact Registry:
`https://REGION-kfp.pkg.dev/PROJECT/REPO/PIPELINE/TAG`), and check run parameters (`--param name=value`) against
its inputs, with the names and types of the compiled spec, before anything is submitted. Each target compiles its
own (pipelines/delivery/)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from core import names
from pipelines.config import (
    PIPELINE_NAMES,
    PIPELINES,
    SOURCE_COMMIT_LABEL,
    BatchParameters,
    PipelineParameters,
)

_NO_DEFAULT = object()
_TYPE_NAMES = {
    "STRING": "a string",
    "NUMBER_INTEGER": "an integer",
    "NUMBER_DOUBLE": "a number",
    "BOOLEAN": "true or false",
    "LIST": "a JSON list",
    "STRUCT": "a JSON object",
    "INT": "an integer",
    "DOUBLE": "a number",
}  # INT/DOUBLE: pre-2.1 schema types
_TRUE, _FALSE = {"true", "1", "yes", "y", "on"}, {"false", "0", "no", "n", "off"}

YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML has it: the same documents


class TemplateError(ValueError):
    """A template cannot be compiled, loaded or run with the given parameters (user-facing message)."""


def pipeline_name(pipeline: str) -> str:
    """`training` → `tfpipe-training`: the compiled pipeline's name (also its package name in a registry)."""
    if pipeline not in PIPELINE_NAMES:
        raise TemplateError(f"unknown pipeline {pipeline!r}; use one of: {', '.join(PIPELINES)}")
    return PIPELINE_NAMES[pipeline]


def published_url(registry: str, pipeline: str, tag: str) -> str:
    """The URL of a published template version: `REGISTRY/PIPELINE_NAME/TAG`."""
    if not registry:
        raise TemplateError(
            "a template tag needs the registry: set platform.template_registry "
            "(https://REGION-kfp.pkg.dev/PROJECT/REPO) or pass --registry"
        )
    check_tag(tag)
    return f"{registry.rstrip('/')}/{pipeline_name(pipeline)}/{tag}"


def check_tag(tag: str) -> str:
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", tag or "") or tag.startswith("sha256"):
        raise TemplateError(f"bad template tag {tag!r}: letters, digits, '.', '_' and '-' (not a sha256 version)")
    return tag


def load_template(source: str, project: str | None = None, credentials=None) -> dict:
    """The pipeline spec of a compiled file or of a template URL (Artifact Registry, read with the caller's
    credentials exactly as aiplatform.PipelineJob reads it)."""
    spec: Any
    try:
        if source.startswith(("https://", "http://", "gs://")):
            from google.cloud.aiplatform.constants.pipeline import _VALID_AR_URL
            from google.cloud.aiplatform.utils import yaml_utils

            if credentials is None and _VALID_AR_URL.match(source):  # what PipelineJob would use
                from pipelines.credentials import application_default

                credentials = application_default()
            spec = yaml_utils.load_yaml(source, project, credentials)
        else:
            with open(source) as f:
                spec = next(yaml.load_all(f, Loader=YAML_LOADER), None)
    except FileNotFoundError:
        raise TemplateError(f"template not found: {source}") from None
    except OSError as e:  # urllib errors (HTTPError, URLError) are OSErrors
        raise TemplateError(f"cannot read the template {source}: {e}") from None
    except yaml.YAMLError as e:
        raise TemplateError(f"template {source} is not valid YAML: {e}") from None
    except ValueError as e:  # aiplatform: an https URL that is neither Artifact Registry nor a .yaml/.json file
        raise TemplateError(f"cannot read the template {source}: {e}") from None
    if isinstance(spec, dict) and "pipelineSpec" in spec:  # a PipelineJob JSON
        spec = spec["pipelineSpec"]
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise TemplateError(f"{source} is not a compiled KFP pipeline (no pipelineInfo/root)")
    return spec


@dataclass(frozen=True)
class Input:
    name: str
    type: str  # STRING | NUMBER_INTEGER | NUMBER_DOUBLE | BOOLEAN | LIST | STRUCT
    default: Any = _NO_DEFAULT

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT


def pipeline_inputs(spec: dict) -> dict[str, Input]:
    """The pipeline's parameter inputs, from the compiled spec's root input definitions."""
    inputs = {}
    for name, definition in (spec["root"].get("inputDefinitions", {}).get("parameters", {}) or {}).items():
        kind = definition.get("parameterType") or definition.get("type") or "STRING"
        default = definition.get("defaultValue", _NO_DEFAULT)
        if default is _NO_DEFAULT and definition.get("isOptional"):
            default = None
        inputs[name] = Input(name, kind, default)
    return inputs


def _convert(item: Input, text: str):
    kind = item.type
    if kind == "STRING":
        return text
    if kind in ("NUMBER_INTEGER", "INT"):
        if re.fullmatch(r"[+-]?\d+", text.strip()):
            return int(text)
    elif kind in ("NUMBER_DOUBLE", "DOUBLE"):
        try:
            value = float(text)
            if math.isfinite(value):
                return value
        except ValueError:
            pass
    elif kind == "BOOLEAN":
        if text.strip().lower() in _TRUE | _FALSE:
            return text.strip().lower() in _TRUE
    elif kind in ("LIST", "STRUCT"):
        try:
            value = json.loads(text)
            if isinstance(value, list if kind == "LIST" else dict):
                return value
        except ValueError:
            pass
    else:
        raise TemplateError(f"--param {item.name}: the template's input type {kind!r} is not supported")
    raise TemplateError(f"--param {item.name}={text}: expected {_TYPE_NAMES.get(kind, kind)}")


_MODELS: dict[str, type[BaseModel]] = {
    PIPELINE_NAMES["training"]: PipelineParameters,
    PIPELINE_NAMES["batch_prediction"]: BatchParameters,
}


def parse_params(assignments: Sequence[str], spec: dict) -> dict:
    """`name=value` strings → the run's parameter values, typed by the template's inputs. Unknown names, values of
    the wrong type, repeated names and required inputs without a value are errors; for this project's pipelines
    the values are also checked against the config models (ranges, choices), and against the rules of where the
    template puts them (a Vertex label, a KServe InferenceService's name)."""
    inputs = pipeline_inputs(spec)
    name = spec["pipelineInfo"]["name"]
    values: dict = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TemplateError(f"--param {assignment}: expected NAME=VALUE")
        if key not in inputs:
            raise TemplateError(f"--param {key}: not an input of {name}; its inputs are: {', '.join(sorted(inputs))}")
        if key in values:
            raise TemplateError(f"--param {key}: given more than once")
        values[key] = _convert(inputs[key], text)
    missing = [i.name for i in inputs.values() if i.required and i.name not in values]
    if missing:
        raise TemplateError(
            f"{name} needs a value for {', '.join(missing)}: pass " + " ".join(f"--param {m}=VALUE" for m in missing)
        )
    model = _MODELS.get(name)
    if model is not None and values:
        from pydantic import ValidationError

        merged = {k: i.default for k, i in inputs.items() if not i.required and i.default is not None}
        merged.update(values)
        try:
            model.model_validate({k: v for k, v in merged.items() if k in model.model_fields})
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            message = first["msg"].removeprefix("Value error, ")
            raise TemplateError(f"--param {field}: {message}" if field else f"parameters: {message}") from None
    for key in sorted(_label_inputs(spec) & set(values)):
        try:
            names.label_value(str(values[key]), f"--param {key}")
        except names.InvalidName as e:
            raise TemplateError(f"{e}: this template writes it into a Vertex AI label") from None
    if "model_name" in values and _kserve_service(spec) == "":
        try:
            names.inference_service(values["model_name"], "--param model_name")
        except names.InvalidName as e:
            raise TemplateError(f"{e}: this template's KServe deploy names the InferenceService after it") from None
    return values


def _label_inputs(spec: dict) -> set[str]:
    """The pipeline inputs a template writes into a label value: the `source_commit` input of a step that outputs
    `labels` (Vertex's find-model, whose `labels` the model upload takes), when a pipeline input (handed down the
    enclosing DAGs as `pipelinechannel--NAME`) gives it. They must be Google Cloud label values."""
    found = set()
    components = spec.get("components", {})
    for component in [spec["root"], *components.values()]:
        for task in (component.get("dag") or {}).get("tasks", {}).values():
            step = components.get(task.get("componentRef", {}).get("name"), {})
            if "labels" not in step.get("outputDefinitions", {}).get("parameters", {}):
                continue
            source = task.get("inputs", {}).get("parameters", {}).get(SOURCE_COMMIT_LABEL, {})
            found.add(source.get("componentInputParameter", "").removeprefix("pipelinechannel--"))
    return found & set(pipeline_inputs(spec))


def _kserve_service(spec: dict) -> str | None:
    """The InferenceService name a template's KServe deploy step is compiled with ("": the model_name input);
    None when the template deploys on no KServe."""
    for component in spec.get("components", {}).values():
        for task in (component.get("dag") or {}).get("tasks", {}).values():
            if task.get("componentRef", {}).get("name") == "comp-deploy-model-on-kserve":
                return task["inputs"]["parameters"]["inference_service"]["runtimeValue"]["constant"]
    return None
