"""Katib v0.19.0's webhooks and suggestion rules, ported from its sources:

- the Experiment defaulter (pkg/apis/controller/experiments/v1beta1/experiment_defaults.go) and validator
  (pkg/webhook/v1beta1/experiment/validation_webhook.go, validator/validator.go), with the standalone install's
  katib-config (algorithms, metrics collectors);
- the pod webhook's command rule (pkg/webhook/v1beta1/pod/utils.go): the primary container's command is wrapped
  for the metrics collector, and without a `command` the image's ENTRYPOINT is read from its registry;
- the skopt suggestion service's search space (pkg/suggestion/v1beta1/skopt/base_service.py): every double is
  log-uniform, so a range that holds 0 fails every suggestion request, and every int uniform, whatever its
  distribution;
- the grid's algorithm settings check (Optuna's service, pkg/suggestion/v1beta1/optuna/service.py
  `_validate_grid_setting`, counting with internal/search_space.py `convert_to_combinations`);
- the File metrics collector's JSON format (pkg/metricscollector/v1beta1/file-metricscollector).
"""

from __future__ import annotations

import json
import os
import re

INJECTION = "katib.kubeflow.org/metrics-collector-injection"
ALGORITHMS = (
    "random",
    "tpe",
    "grid",
    "multivariate-tpe",
    "hyperband",
    "bayesianoptimization",
    "cmaes",
    "sobol",
    "enas",
    "darts",
    "pbt",
)
COLLECTORS = ("StdOut", "File", "TensorFlowEvent")
PARAMETER_TYPES = ("int", "double", "categorical", "discrete", "unknown")
DISTRIBUTIONS = ("uniform", "logUniform", "normal", "logNormal", "unknown")
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?")  # not anchored at the end, as in the source
META_REFERENCE = re.compile(r"\$\{trialSpec\.(.+?)\}")
META_KEYS = ("Name", "Namespace", "Kind", "APIVersion", "Annotations", "Labels")
JOB_CONDITIONS = {
    "successCondition": 'status.conditions.#(type=="Complete")#|#(status=="True")#',
    "failureCondition": 'status.conditions.#(type=="Failed")#|#(status=="True")#',
}


def default_experiment(obj: dict) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("parallelTrialCount", 3)
    spec.setdefault("resumePolicy", "Never")
    objective = spec.get("objective")
    if objective is not None:
        strategies = objective.setdefault("metricStrategies", [])
        kind = objective.get("type")
        value = {"minimize": "min", "maximize": "max"}.get(kind, "latest")
        for metric in [objective.get("objectiveMetricName"), *(objective.get("additionalMetricNames") or [])]:
            if not any(s.get("name") == metric for s in strategies):
                strategies.append({"name": metric, "value": value})
    template = spec.get("trialTemplate") or {}
    if (template.get("trialSpec") or {}).get("kind") == "Job":
        for key, condition in JOB_CONDITIONS.items():
            template[key] = template.get(key) or condition
    collector_spec = spec.setdefault("metricsCollectorSpec", {})
    collector = collector_spec.setdefault("collector", {"kind": "StdOut"})
    if collector.get("kind") == "File":
        path = collector_spec.setdefault("source", {}).setdefault("fileSystemPath", {})
        path["kind"] = path.get("kind") or "File"
        path["path"] = path.get("path") or "/var/log/katib/metrics.log"
        path["format"] = path.get("format") or "TEXT"
    for parameter in spec.get("parameters") or []:
        feasible = parameter.setdefault("feasibleSpace", {})
        feasible["distribution"] = feasible.get("distribution") or "uniform"


def validate_experiment(obj: dict, old: dict | None, api=None) -> str:
    from tests.doubles.k8s.admission import aggregate

    meta, spec = obj["metadata"], obj.get("spec") or {}
    namespaces = api.namespaces if api is not None else None
    if namespaces is not None and (namespaces.get(meta.get("namespace"), {}) or {}).get(INJECTION) != "enabled":
        return (
            f'Cannot create the Experiment "{meta["name"]}" in namespace "{meta.get("namespace")}": the namespace '
            f'lacks label "{INJECTION}: enabled"'
        )
    errors = []
    name = meta["name"]
    if not NAME.match(name) or len(name) > 40:
        errors.append(
            f'metadata.name: Invalid value: "{name}": name must consist of lower case alphanumeric characters or '
            "'-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name', or "
            "'abc-123', regex used for validation is '^[a-z]([-a-z0-9]*[a-z0-9])?)') and may not be longer than 40 "
            "characters. "
        )
    counts = {k: spec.get(k) for k in ("maxFailedTrialCount", "maxTrialCount", "parallelTrialCount")}
    if counts["maxFailedTrialCount"] is not None and counts["maxFailedTrialCount"] < 0:
        errors.append(
            f"spec.maxFailedTrialCount: Invalid value: {counts['maxFailedTrialCount']}: should not be less than 0"
        )
    for key in ("maxTrialCount", "parallelTrialCount"):
        if counts[key] is not None and counts[key] <= 0:
            errors.append(f"spec.{key}: Invalid value: {counts[key]}: must be greater than 0")
    if counts["maxTrialCount"] is not None:
        for key, what in (("maxFailedTrialCount", "should"), ("parallelTrialCount", "should")):
            if counts[key] is not None and counts[key] > counts["maxTrialCount"]:
                errors.append(
                    f"spec.{key}: Invalid value: {counts[key]}: {what} be less than or equal to spec.maxTrialCount"
                )
    if old is not None:
        editable = ("parallelTrialCount", "maxTrialCount", "maxFailedTrialCount")
        before = {k: v for k, v in (old.get("spec") or {}).items() if k not in editable}
        if before != {k: v for k, v in spec.items() if k not in editable}:
            errors.append(
                "spec: Forbidden: only spec.parallelTrialCount, spec.maxTrialCount and spec.maxFailedTrialCount are editable"
            )
    objective = spec.get("objective")
    objective_errors = []
    if objective is None:
        objective_errors.append("spec.objective: Required value: must be specified")
    else:
        if objective.get("type") not in ("minimize", "maximize"):
            objective_errors.append(
                f'spec.objective.type: Invalid value: "{objective.get("type", "")}": must be minimize or maximize'
            )
        if not objective.get("objectiveMetricName"):
            objective_errors.append("spec.objective.objectiveMetricName: Required value: must be specified")
    if objective_errors:
        return aggregate(errors + objective_errors)
    algorithm = (spec.get("algorithm") or {}).get("algorithmName", "")
    if not spec.get("algorithm"):
        errors.append("spec.algorithm: Required value: must be specified")
    elif algorithm not in ALGORITHMS:
        errors.append(
            f'spec.algorithm.algorithmName: Invalid value: "{algorithm}": unable to get Suggestion config data for '
            f"algorithm {algorithm}: failed to find suggestion config for algorithm: {algorithm} in ConfigMap: katib-config"
        )
    if spec.get("resumePolicy", "") not in ("", "Never", "LongRunning", "FromVolume"):
        errors.append(f'spec.resumePolicy: Invalid value: "{spec["resumePolicy"]}": invalid ResumePolicyType')
    template_errors, stop = _trial_template(spec)
    errors += template_errors
    if stop:
        return aggregate(errors)
    errors += _parameters(spec.get("parameters") or [])
    if not spec.get("parameters") and not spec.get("nasConfig"):
        errors.append("spec: Required value: spec.parameters or spec.nasConfig must be specified")
    errors += _collector(spec.get("metricsCollectorSpec") or {})
    return aggregate(errors)


def _trial_template(spec: dict) -> tuple[list[str], bool]:
    template = spec.get("trialTemplate")
    if template is None:
        return ["spec.trialTemplate: Required value: must be specified"], False
    errors = []
    if not template.get("primaryContainerName"):
        errors.append("spec.trialTemplate.primaryContainerName: Required value: must be specified")
    if not template.get("successCondition") or not template.get("failureCondition"):
        errors.append("spec.trialTemplate: Required value: successCondition and failureCondition must be specified")
    parameters = template.get("trialParameters")
    if not parameters:
        return errors + ["spec.trialTemplate.trialParameters: Required value: must be specified"], False
    if template.get("trialSpec") is None:
        return errors + [
            "spec.trialTemplate.TrialSource: Required value: spec.trialTemplate.trialSpec or "
            "spec.trialTemplate.configMap must be specified"
        ], False
    text = json.dumps(template["trialSpec"], separators=(",", ":"))
    names, references = set(), set()
    known = {p.get("name") for p in spec.get("parameters") or []}
    for i, p in enumerate(parameters):
        path = f"spec.trialTemplate.trialParameters[{i}]"
        name, reference = p.get("name", ""), p.get("reference", "")
        if not name or not reference or "{" in name or "}" in name:
            errors.append(
                f"{path}: Invalid value: \"\": name and reference must be specified and name must not contain '{{' or '}}'"
            )
            continue
        if name in names:
            errors.append(f'{path}.name: Invalid value: "{name}": parameter name {name} can\'t be duplicated')
            continue
        if reference in references:
            errors.append(
                f'{path}.reference: Invalid value: "{reference}": parameter reference {reference} can\'t be duplicated'
            )
            continue
        names.add(name)
        references.add(reference)
        if known and reference not in known and not _meta_reference(reference):
            errors.append(
                f'{path}.reference: Invalid value: "{reference}": parameter reference {reference} does not exist in spec.parameters'
            )
        placeholder = f"${{trialParameters.{name}}}"
        if placeholder not in text:
            errors.append(
                f'{path}.name: Invalid value: "{name}": parameter name: {name} in spec.trialParameters not found in '
                f"spec.trialTemplate: {text}"
            )
            return errors, True
        text = text.replace(placeholder, "test-value")
    if leftover := re.findall(r"\$\{trialParameters\..+?\}", text):
        errors.append(
            f'spec.trialTemplate: Invalid value: "": parameters: {leftover} in spec.trialTemplate not found in spec.trialParameters'
        )
    job = json.loads(text)
    if (job.get("metadata") or {}).get("name") or (job.get("metadata") or {}).get("namespace"):
        errors.append(
            'spec.trialTemplate: Invalid value: "": metadata.name and metadata.namespace in spec.trialTemplate must be omitted'
        )
    if not job.get("apiVersion") or not job.get("kind"):
        errors.append("spec.trialTemplate: Required value: APIVersion and Kind in spec.trialTemplate must be specified")
    elif (job["apiVersion"], job["kind"]) == ("batch/v1", "Job"):
        errors += job_errors(job)
    return errors, False


# the Job's and pod's pointer fields that may be 0 or false (Go keeps them; `omitempty` drops a plain bool's false)
POINTER_FIELDS = frozenset(
    (
        "backoffLimit",
        "runAsUser",
        "runAsGroup",
        "fsGroup",
        "allowPrivilegeEscalation",
        "privileged",
        "runAsNonRoot",
        "readOnlyRootFilesystem",
        "automountServiceAccountToken",
    )
)


def job_errors(job: dict) -> list[str]:
    """Katib converts a batch/v1 Job template to the typed Job and refuses anything the conversion drops: unknown
    fields, and explicitly empty lists, maps and strings (Go's omitempty)."""
    from tests.doubles.k8s import schema

    problems = schema.core_errors({**job, "metadata": {**(job.get("metadata") or {}), "name": "trial"}})
    problems += [f"{path} - {value!r}" for path, value in _empty_values(job, "")]
    return [
        f'spec.trialTemplate: Invalid value: "": invalid spec.trialTemplate: unable to convert: {p} to Job'
        for p in problems
    ]


def _empty_values(value, path: str):
    if isinstance(value, dict):
        for k, v in value.items():
            if v in ({}, [], "", False) and k not in POINTER_FIELDS:
                yield f"{path}/{k}", v
            else:
                yield from _empty_values(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _empty_values(v, f"{path}/{i}")


def _meta_reference(reference: str) -> bool:
    m = META_REFERENCE.search(reference)
    if not m:
        return False
    key = m.group(1)
    inner = re.match(r"(.+)\[(.+)]", key)
    return key in META_KEYS or bool(inner and inner.group(1) in META_KEYS)


def _parameters(parameters: list[dict]) -> list[str]:
    errors = []
    for i, p in enumerate(parameters):
        path = f"spec.parameters[{i}]"
        kind, feasible = p.get("parameterType", ""), p.get("feasibleSpace") or {}
        if kind not in PARAMETER_TYPES:
            errors.append(f'{path}.parameterType: Invalid value: "{kind}": parameterType: {kind} is not supported')
        distribution = feasible.get("distribution", "")
        if distribution and distribution not in DISTRIBUTIONS:
            errors.append(
                f'{path}.feasibleSpace.distribution: Invalid value: "{distribution}": distribution: {distribution} is not supported'
            )
        if kind in ("int", "double"):
            if feasible.get("list"):
                errors.append(
                    f"{path}.feasibleSpace.list: Invalid value: {feasible['list']}: feasibleSpace.list is not supported for parameterType: {kind}"
                )
            if not feasible.get("max") or not feasible.get("min"):
                errors.append(
                    f"{path}.feasibleSpace.max: Required value: feasibleSpace.max or feasibleSpace.min must be specified for parameterType: {kind}"
                )
        if kind in ("categorical", "discrete") and any(feasible.get(k) for k in ("max", "min", "step")):
            errors.append(
                f"{path}.feasibleSpace: Invalid value: {json.dumps(feasible)}: feasibleSpace .max, .min and .step is not supported for parameterType: {kind}"
            )
    return errors


def _collector(collector_spec: dict) -> list[str]:
    kind = (collector_spec.get("collector") or {}).get("kind")
    if kind not in COLLECTORS:
        return [
            f'spec.metricsCollectorSpec.collector.kind: Invalid value: "{kind}": GetMetricsCollectorConfigData '
            f"failed: failed to find metrics collector config for kind: {kind} in ConfigMap: katib-config"
        ]
    if kind != "File":
        return []
    source = collector_spec.get("source") or {}
    path = source.get("fileSystemPath") or {}
    errors = []
    if path.get("kind") != "File" or not os.path.isabs(path.get("path", "")):
        errors.append(
            "spec.metricsCollectorSpec.source.fileSystemPath.path: Required value: file path where metrics file exists is required"
        )
    if path.get("format") not in ("TEXT", "JSON"):
        errors.append(
            "spec.metricsCollectorSpec.source.fileSystemPath.format: Required value: format of metrics file is required for metrics collector"
        )
    if path.get("format") == "JSON" and source.get("filter") is not None:
        errors.append(
            'spec.metricsCollectorSpec.source.filter: Invalid value: "": filter must be nil when format of metrics file is json'
        )
    return errors


def skopt_dimension_error(parameter: dict) -> str:
    """What skopt raises building the search space (scikit-optimize 0.10, as the skopt image resolves it): "" when
    the dimension builds."""
    kind, feasible = parameter["parameterType"], parameter["feasibleSpace"]
    if kind not in ("int", "double"):
        return ""
    try:
        low, high = (int(feasible[k]) if kind == "int" else float(feasible[k]) for k in ("min", "max"))
    except ValueError as e:
        return str(e)
    if high <= low:
        return f"the lower bound {low} has to be less than the upper bound {high}"
    if kind == "double" and low * high <= 0:  # every double is Real(min, max, "log-uniform")
        return "search space should not contain 0 when using log-uniform prior"
    return ""


def sampled_distribution(algorithm: str, parameter: dict) -> str:
    """The distribution an int or double parameter is drawn from: skopt (`bayesianoptimization`) builds
    `Integer(min, max)`, uniform, and `Real(min, max, "log-uniform")` whatever `feasibleSpace.distribution` says;
    the other services follow it."""
    if algorithm == "bayesianoptimization":
        return "uniform" if parameter["parameterType"] == "int" else "logUniform"
    return parameter["feasibleSpace"].get("distribution") or "uniform"


def grid_validation_error(spec: dict) -> str:
    """What the grid's ValidateAlgorithmSettings answers, "" when `maxTrialCount` fits the combinations (an int
    range by its step, 1 when unset; a list by its values). Doubles (which need a step) are not ported."""
    combinations = 1
    for p in spec["parameters"]:
        feasible = p["feasibleSpace"]
        assert p["parameterType"] != "double", "the double does not port grid over doubles"
        if p["parameterType"] == "int":
            step = int(feasible.get("step") or 1)
            combinations *= len(range(int(feasible["min"]), int(feasible["max"]) + 1, step))
        else:
            combinations *= len(feasible["list"])
    max_trial = spec.get("maxTrialCount") or 0
    if max_trial > combinations:
        return f"Max Trial Count: {max_trial} > all possible search combinations: {combinations}"
    return ""


def wrapped_command(container: dict, collector_path: str, image_entrypoint: list[str] | None) -> tuple[list, list]:
    """The primary container's (command, args) after the pod webhook wrapped it for a File collector. Without a
    `command`, the image's ENTRYPOINT comes from its registry: `image_entrypoint` None (the registry cannot be read)
    raises PermissionError, which denies the pod."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    if not command:
        if image_entrypoint is None:
            raise PermissionError(
                f'Failed to get container image "{container["image"]}" info from registry: the image is not in a '
                "registry the webhook can read"
            )
        command = list(image_entrypoint)
    argv = command + args
    shell = ["sh", "-c"]
    if argv[0] in ("sh", "bash") and len(argv) > 1 and argv[1] == "-c":
        shell, argv = argv[:2], argv[2:]
    folder = os.path.dirname(collector_path)
    argv += ["&&", f"echo completed > {folder}/$$$$.pid"]
    return shell, [" ".join(argv)]


def parse_json_metrics(text: str, names: list[str]) -> list[dict]:
    """The File collector's JSON format: every non-empty line a JSON object; a metric only when its value is a
    string; `timestamp` an RFC 3339 string or epoch seconds. Raises ValueError on a line that is not an object."""
    logs = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError(f"failed to parse the json object: {line}")
        for name in names:
            if isinstance(obj.get(name), str):
                logs.append({"name": name, "value": obj[name], "timestamp": obj.get("timestamp")})
    if not any(log["name"] == names[0] for log in logs):
        return [{"name": names[0], "value": "unavailable", "timestamp": None}]
    return logs
