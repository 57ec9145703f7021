"""Run a Google Cloud Pipeline Component's own launcher (the `google_cloud_pipeline_components.container.v1...`
module its container runs) on a task of a compiled pipeline, as the KFP backend would: the container args with
their placeholders resolved from the task's inputs (constants from the compiled spec, the component's defaults,
and the values of upstream outputs a test gives), `Concat`/`IfPresent` expanded, and an executor input for `{{$}}`.
"""

import importlib
import json
import re
from pathlib import Path

PARAMETER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")
ARTIFACT_METADATA = re.compile(r"\{\{\$\.inputs\.artifacts\['([^']+)'\]\.metadata\['([^']+)'\]\}\}")
OUTPUT_FILE = re.compile(r"\{\{\$\.outputs\.parameters\['([^']+)'\]\.output_file\}\}")
RUN = {"{{$.pipeline_job_uuid}}": "run-uuid-1", "{{$.pipeline_job_name}}": "tfpipe-training-20261123"}


def _typed(value, kind):
    """A constant as the backend hands it to the container (protobuf Values hold numbers as doubles)."""
    if kind == "NUMBER_INTEGER" and isinstance(value, float):
        return int(value)
    return value


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def task_parameters(spec: dict, task: dict, given: dict) -> dict:
    """The task's parameter values: `given` (upstream outputs, pipeline inputs), else the compiled constants, else
    the component's defaults."""
    definitions = spec["components"][task["componentRef"]["name"]]["inputDefinitions"].get("parameters", {})
    values = {name: d["defaultValue"] for name, d in definitions.items() if "defaultValue" in d}
    for name, source in task["inputs"].get("parameters", {}).items():
        if "runtimeValue" in source:
            values[name] = source["runtimeValue"]["constant"]
    values.update(given)
    return {name: _typed(value, definitions.get(name, {}).get("parameterType")) for name, value in values.items()}


class Launch:
    """The resolved command of one GCPC task and what its launcher wrote."""

    def __init__(self, spec: dict, task: dict, given: dict, artifacts: dict, workdir: Path):
        self.component = spec["components"][task["componentRef"]["name"]]
        executor = spec["deploymentSpec"]["executors"][self.component["executorLabel"]]["container"]
        self.module = executor["command"][-1]
        self.parameters = task_parameters(spec, task, given)
        self.artifacts = artifacts  # {input name: {"uri", "metadata", "type"}}
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.outputs = {
            name: str(self.workdir / name) for name in self.component.get("outputDefinitions", {}).get("parameters", {})
        }
        self.executor_output = str(self.workdir / "executor_output.json")
        self.args = [a for arg in executor["args"] for a in self._resolve(arg)]

    def executor_input(self) -> dict:
        outputs = self.component.get("outputDefinitions", {})
        return {
            "inputs": {
                "parameterValues": self.parameters,
                "artifacts": {
                    name: {
                        "artifacts": [
                            {
                                "name": name,
                                "uri": a["uri"],
                                "metadata": a["metadata"],
                                "type": {"schemaTitle": a["type"]},
                            }
                        ]
                    }
                    for name, a in self.artifacts.items()
                },
            },
            "outputs": {
                "parameters": {name: {"outputFile": path} for name, path in self.outputs.items()},
                "artifacts": {
                    name: {
                        "artifacts": [
                            {
                                "name": name,
                                "uri": str(self.workdir / name),
                                "type": definition["artifactType"],
                                "metadata": {},
                            }
                        ]
                    }
                    for name, definition in outputs.get("artifacts", {}).items()
                },
                "outputFile": self.executor_output,
            },
        }

    def _substitute(self, text: str) -> str:
        if text == "{{$}}":
            return json.dumps(self.executor_input())
        text = PARAMETER.sub(lambda m: _text(self.parameters[m[1]]), text)
        text = ARTIFACT_METADATA.sub(lambda m: str(self.artifacts[m[1]]["metadata"][m[2]]), text)
        text = text.replace("{{$.pipeline_google_cloud_project_id}}", self.parameters.get("project", ""))
        for placeholder, value in RUN.items():
            text = text.replace(placeholder, value)
        return OUTPUT_FILE.sub(lambda m: self.outputs[m[1]], text)

    def _resolve(self, arg) -> list[str]:
        if isinstance(arg, str) and arg.startswith(('{"Concat"', '{"IfPresent"')):
            arg = json.loads(arg)
        if isinstance(arg, str):
            return [self._substitute(arg)]
        if "Concat" in arg:
            return ["".join(part for item in arg["Concat"] for part in self._resolve(item))]
        present = arg["IfPresent"]
        name = present["InputName"]
        branch = present.get("Then" if name in self.parameters or name in self.artifacts else "Else", [])
        return [a for item in (branch if isinstance(branch, list) else [branch]) for a in self._resolve(item)]

    def run(self) -> "Launch":
        importlib.import_module(self.module).main(self.args)
        return self

    def output(self, name: str) -> str:
        return Path(self.outputs[name]).read_text()
