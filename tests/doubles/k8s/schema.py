"""Objects checked as the API server checks them.

- Custom objects against their CRD's structural schema (`schemas/`, vendored from the operators' repositories):
  a field the schema does not declare is an error here, where the API server would drop it without a word
  (pruning), so a typo can never pass silently. Katib's CRD declares no schema (it preserves unknown fields); its
  Go types (swagger.json) are what its controller decodes, so they are the schema here, with the same rule.
- Core objects (pods, jobs, claims, RBAC) and the Kubernetes types that custom objects embed (a Katib trial's Job)
  against Kubernetes 1.32's own schemas, as kubernetes-validate ships them (strict: no unknown field).
- Metadata: names, label and annotation keys and values by the API server's rules.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import referencing
import referencing.jsonschema

KUBERNETES = "1.32.0"
SCHEMAS = Path(__file__).parent / "schemas"
DEFS = "https://kubernetes.io/api/_definitions.json"
CORE = f"kubernetes-json-schema/v{KUBERNETES}-local-strict"
# Katib's swagger.json names Kubernetes types without their packages
KATIB_EXTERNAL = {
    "v1.ObjectMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    "v1.ListMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
    "v1.Container": "io.k8s.api.core.v1.Container",
    "v1.HTTPGetAction": "io.k8s.api.core.v1.HTTPGetAction",
}
VALUE_KEYWORDS = (
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
    "multipleOf",
    "uniqueItems",
    "required",
)
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = re.compile(rf"^{DNS_LABEL}(\.{DNS_LABEL})*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@functools.cache
def _core_definitions() -> dict:
    root = resources.files("kubernetes_validate").joinpath(CORE)
    return json.loads(root.joinpath("_definitions.json").read_text())


@functools.cache
def _registry() -> referencing.Registry:
    definitions = referencing.Resource.from_contents(_core_definitions())
    return definitions @ referencing.Registry()


def _errors(validator, obj) -> list[str]:
    out = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in error.absolute_path).replace(".[", "[")
        out.append(f"{path or '<root>'}: {_message(error)}")
    return out


def _message(error) -> str:
    if error.validator == "additionalProperties" and error.validator_value is False:
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} (not in the schema)"
    return error.message


def core_errors(obj: dict) -> list[str]:
    """`obj` (apiVersion, kind) against Kubernetes 1.32's schema of its kind."""
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", obj.get("apiVersion", ""))
    name = f"{obj.get('kind', '').lower()}-{api_version}.json"
    path = resources.files("kubernetes_validate").joinpath(CORE).joinpath(name)
    if not path.is_file():
        return [f"<root>: no Kubernetes {KUBERNETES} schema for {obj.get('apiVersion')} {obj.get('kind')}"]
    validator = jsonschema.Draft202012Validator(json.loads(path.read_text()), registry=_registry())
    return _errors(validator, obj)


def _structural(node: dict, cel: list, path: str = "") -> dict:
    """A CRD structural schema as JSON Schema 2020-12, pruning turned into `additionalProperties: false`."""
    out: dict = {k: node[k] for k in VALUE_KEYWORDS if k in node}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    if node.get("exclusiveMinimum") is True:
        out["exclusiveMinimum"] = out.pop("minimum")
    if node.get("exclusiveMaximum") is True:
        out["exclusiveMaximum"] = out.pop("maximum")
    for rule in node.get("x-kubernetes-validations") or []:
        cel.append({"path": path or "<root>", **rule})
    if node.get("x-kubernetes-list-type") == "map":
        out["x-list-map-keys"] = node.get("x-kubernetes-list-map-keys", [])
    for junctor in ("anyOf", "allOf", "oneOf"):
        if junctor in node:  # value validations only (structural schemas forbid types and pruning in them)
            out[junctor] = [{k: v for k, v in branch.items() if not k.startswith("x-")} for branch in node[junctor]]
    if "not" in node:
        out["not"] = node["not"]
    if "items" in node:
        out["items"] = _structural(node["items"], cel, f"{path}[*]")
    properties = dict(node.get("properties") or {})
    if node.get("x-kubernetes-embedded-resource"):
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.pop("metadata", None)
        out["properties"] = {"metadata": {"$ref": f"{DEFS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}
    if properties:
        out.setdefault("properties", {}).update({k: _structural(v, cel, f"{path}.{k}") for k, v in properties.items()})
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(node["additionalProperties"], cel, f"{path}.*")
    elif node.get("type") == "object" and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _swagger(definitions: dict, node):
    """Katib's swagger definitions (its Go types) as JSON Schema 2020-12: fields the types lack are errors."""
    if isinstance(node, list):
        return [_swagger(definitions, v) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        if name in definitions:
            return {"$ref": f"#/$defs/{name}"}
        if name in KATIB_EXTERNAL:
            return {"$ref": f"{DEFS}#/$defs/{KATIB_EXTERNAL[name]}"}
        return {"type": "string"} if name == "v1.Time" else {"type": "object"}  # Unstructured: checked by kind
    out = {
        k: _swagger(definitions, v)
        for k, v in node.items()
        if k not in ("default", "format", "properties") and not k.startswith("x-")
    }
    if "properties" in node:
        out["properties"] = {k: _swagger(definitions, v) for k, v in node["properties"].items()}
    if node.get("type") == "object" and "properties" in node:
        out["additionalProperties"] = False
    return out


class CustomSchema:
    """One vendored schema: `errors(obj)` lists what the API server (or the operator's decoder) refuses."""

    def __init__(self, filename: str):
        raw = json.loads((SCHEMAS / filename).read_text())
        self.source = raw["source"]
        self.subresources: list[str] = raw.get("subresources", ["status"])
        self.cel: list[dict] = []
        if "definitions" in raw:
            definitions = {k: _swagger(raw["definitions"], v) for k, v in raw["definitions"].items()}
            schema = {"$ref": f"#/$defs/{raw['root']}", "$defs": definitions}
        else:
            schema = _structural(raw["schema"], self.cel)
            schema.setdefault("properties", {})["metadata"] = {
                "$ref": f"{DEFS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
            }
        self.validator = jsonschema.Draft202012Validator(schema, registry=_registry())

    def errors(self, obj: dict) -> list[str]:
        return _errors(self.validator, obj) + _list_map_errors(self.validator.schema, obj, "", self._resolve)

    def _resolve(self, node: dict) -> dict:
        if "$ref" in node and node["$ref"].startswith("#/$defs/"):
            return self.validator.schema["$defs"][node["$ref"][8:]]
        return node


def _list_map_errors(schema: dict, value, path: str, resolve) -> list[str]:
    """`x-kubernetes-list-type: map`: no two items with the same keys (the API server refuses duplicates)."""
    schema = resolve(schema)
    out = []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-list-map-keys")
        if keys:
            seen = set()
            for item in value:
                key = tuple((item or {}).get(k) for k in keys)
                if key in seen:
                    out.append(f"{path}: duplicate entry with {dict(zip(keys, key))}")
                seen.add(key)
        for i, item in enumerate(value):
            out += _list_map_errors(schema["items"], item, f"{path}[{i}]", resolve)
    elif isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, item in value.items():
            sub = properties.get(key) or (
                schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
            )
            if sub:
                out += _list_map_errors(sub, item, f"{path}.{key}" if path else key, resolve)
    return out


@functools.cache
def custom_schema(filename: str) -> CustomSchema:
    return CustomSchema(filename)


def metadata_errors(metadata: dict) -> list[str]:
    """The API server's own checks of an object's metadata: a DNS-1123 subdomain name, label and annotation keys
    and values."""
    out = []
    name = metadata.get("name", "")
    if not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        out.append(
            f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower "
            "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    for kind in ("labels", "annotations"):
        for key, value in (metadata.get(kind) or {}).items():
            out += [f"metadata.{kind}: {e}" for e in _qualified_name_errors(key)]
            if kind == "labels" and (len(value) > 63 or (value and not LABEL_NAME.match(value))):
                out.append(
                    f"metadata.labels: Invalid value: {value!r}: a valid label must be an empty string or "
                    "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                    "alphanumeric character (63 characters at most)"
                )
    size = sum(len(k) + len(v) for k, v in (metadata.get("annotations") or {}).items())
    if size > 256 * 1024:
        out.append(f"metadata.annotations: Too long: must have at most 262144 bytes, not {size}")
    return out


def _qualified_name_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    out = []
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        out.append(f"Invalid value: {key!r}: prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        out.append(
            f"Invalid value: {key!r}: name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (63 characters at most)"
        )
    return out
