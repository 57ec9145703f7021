"""Write a vendored schema file from an operator's own definition (a CRD's openAPIV3Schema, or Katib's swagger.json
of its Go types), descriptions dropped:

    git -C KATIB show v0.19.0:pkg/apis/v1beta1/swagger.json > /tmp/swagger.json
    python -m tests.doubles.k8s.schemas.vendor swagger /tmp/swagger.json v1beta1.Experiment \
        kubeflow/katib v0.19.0 $(git -C KATIB rev-parse 'v0.19.0^{commit}') pkg/apis/v1beta1/swagger.json \
        > tests/doubles/k8s/schemas/experiments.kubeflow.org.v1beta1.json
    python -m tests.doubles.k8s.schemas.vendor crd CRD.yaml VERSION REPOSITORY REF COMMIT PATH > ...
"""

import json
import sys

import yaml


def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description" or not isinstance(v, str)}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def main(kind: str, path: str, name: str, repository: str, ref: str, commit: str, source_path: str) -> dict:
    source = {"repository": repository, "ref": ref, "commit": commit, "path": source_path}
    with open(path) as f:
        if kind == "crd":
            crd = yaml.safe_load(f)
            (version,) = [v for v in crd["spec"]["versions"] if v["name"] == name]
            return {
                "source": source,
                "kind": crd["spec"]["names"]["kind"],
                "subresources": sorted(version.get("subresources") or {}),
                "schema": _strip(version["schema"]["openAPIV3Schema"]),
            }
        swagger = json.load(f)
        return {"source": source, "root": name, "definitions": _strip(swagger["definitions"])}


if __name__ == "__main__":
    json.dump(main(*sys.argv[1:8]), sys.stdout, indent=None, separators=(",", ":"), sort_keys=True)
