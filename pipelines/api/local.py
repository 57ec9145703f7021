"""The API's verbs on this machine: load the configuration, compile, run locally, rehearse a Vertex run, render
the Kubernetes objects of the kubeflow target."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from components.lib.batch.instance_formats import BIGQUERY, SELF_HOSTED_BIGQUERY
from core.storage import local_path
from pipelines.api._common import Log, check_folder, config_of, logger, public, raising
from pipelines.api.results import Compiled, RehearsalSummary, RunSummary
from pipelines.config import Config, ConfigError, load_config as _load_config
from pipelines.errors import DataError

TARGETS = ("vertex", "kubeflow")
DEFAULT_STATE = "runs/rehearsal-state"
Params = Mapping[str, Any] | Sequence[str]


def load_config(
    path: str | Path | None = None,
    profile: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    sets: Sequence[str] = (),
    origin: str = "overrides",
) -> Config:
    """The configuration: the YAML file `path` (None: the defaults), its `profile` (None: $TFPIPE_PROFILE) over its
    base sections, the TFPIPE_<SECTION>__<FIELD> variables, then `sets` (`"section.field=value"` strings, as
    `--set`) and `overrides` (`{"section.field": value}`, None values ignored), validated. ConfigError naming
    each invalid field and, for an overridden one, `origin`."""
    return _load_config(path, profile=profile, sets=sets, values=overrides, origin=origin)


def refuse_examples(config: Config, fields: Iterable[str]) -> None:
    """ConfigError naming every field of `fields` that still holds an example value of tfpipe.yaml or the docs."""
    found = config.example_values(list(fields))
    if found:
        raise ConfigError(f"the config still holds example values (edit them or --set them): {', '.join(found)}")


def check_target(target: str) -> None:
    if target not in TARGETS:
        raise ConfigError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}", "target")


@public
def compile(  # noqa: A001 (the verb's name)
    target: str, config: Config | str | Path | None, output: str | Path, pipeline: str = "training"
) -> Compiled:
    """Compile `pipeline` (training | batch_prediction) for `target` (vertex | kubeflow) into `output` (.yaml or
    .json), with the config's values as the pipeline's defaults; refused while the images, identity or inputs it
    bakes in hold example values."""
    from pipelines.delivery import delivery_for
    from pipelines.preflight import tag_warning
    from pipelines.templates import TemplateError, load_template

    check_target(target)
    config = config_of(config)
    refuse_examples(config, config.cloud_fields(target, pipeline, compiling=True))
    output = str(output)
    if not output.endswith((".yaml", ".yml", ".json")):
        raise ConfigError(f"must end in .yaml or .json, got {output}", "output")
    check_folder(Path(output).parent, "output")
    try:
        with raising(ConfigError, TemplateError):
            delivery_for(target).compile(pipeline, config, output)
    except OSError as e:  # the file itself cannot be written (a read-only folder)
        if e.filename != output:
            raise
        raise ConfigError(f"cannot write {output}: {e.strerror or e}", "output") from None
    spec = load_template(output)
    inputs = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    return Compiled(output, inputs, (tag_warning(spec) or None) if target == "vertex" else None)


def source_commit() -> str:
    """The working tree's commit (short), "" outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _with(section: BaseModel, params: Mapping[str, Any] | None, name: str) -> Any:
    """`section` with `params` over its values, validated."""
    if not params:
        return section
    try:
        return type(section).model_validate({**section.model_dump(), **params})
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        raise ConfigError(f"invalid {name}: {fields}", "params") from None


def _out(out: str | Path | None, prefix: str) -> Path:
    return check_folder(out or f"runs/{prefix}{time.strftime('%Y%m%d-%H%M%S')}", "out")


@public
def run_locally(
    config: Config | str | Path | None,
    params: Mapping[str, Any] | None = None,
    *,
    pipeline: str = "training",
    out: str | Path | None = None,
    progress: bool = False,
    verbose: bool = False,
    log: Log | None = None,
) -> RunSummary:
    """Run `pipeline` on this machine (kfp.local, no cloud, no Docker) with `params` over the config's parameters
    (training) or batch section (batch_prediction), its output in `out` (default runs/<time>); the summary, also
    written there (run_summary.json, report.html). `progress`: print each step's lines; `verbose`: stream every
    step's log. A run that fails returns its summary with status FAILED."""
    from trainer.environment import use_legacy_keras

    config, log = config_of(config), log or logger
    if pipeline == "batch_prediction":
        arguments, dag, name, what = _batch_run(config, params)
    else:
        arguments, dag, name, what = _training_run(config, params)
    out = _out(out, "")
    use_legacy_keras()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipelines import report
    from pipelines.local_run import run_local

    log(f"Running {name} locally on {what}; output in {out}")
    started = time.time()
    steps, run_root = run_local(dag, arguments, out, verbose, quiet=not progress)
    summary = report.collect(run_root, steps, name, arguments, time.time() - started)
    report.write(summary, out)
    return RunSummary.of(summary, out)


def _training_run(config: Config, params: Mapping[str, Any] | None) -> tuple[dict, Any, str, str]:
    """The training run's arguments, DAG, name and what the first line says it runs on."""
    from pipelines.training import PIPELINE_NAME, build_pipeline

    arguments = _with(config.parameters, params, "parameters").model_dump()
    arguments["data_source"] = local_path(arguments["data_source"])
    source = arguments["data_source"]
    if not source.startswith(("gs://", "builtin:")) and not os.path.exists(source):
        raise DataError(f"data source not found: {source}")
    arguments["model_repository"] = local_path(arguments["model_repository"] or "runs/model_repository")
    arguments["source_commit"] = arguments["source_commit"] or source_commit()
    dag = build_pipeline("local", config.platform, config.study, config.trainer)
    return arguments, dag, PIPELINE_NAME, f"{source} with {arguments['workers']} worker(s)"


def _batch_run(config: Config, params: Mapping[str, Any] | None) -> tuple[dict, Any, str, str]:
    """The batch prediction run's arguments, DAG, name and what the first line says it runs on."""
    from pipelines.batch_prediction import PIPELINE_NAME, build_batch_pipeline

    arguments = _with(config.batch, params, "batch").pipeline_arguments()
    if not arguments["instances"]:
        raise ConfigError("is required with the batch_prediction pipeline", "instances")
    if arguments["instances_format"] == BIGQUERY:
        raise ConfigError(SELF_HOSTED_BIGQUERY.format(target="target local"))
    arguments["instances"] = _local_instances(arguments["instances"])
    arguments["model_repository"] = local_path(arguments["model_repository"] or "runs/model_repository")
    model = arguments["model"]
    if model and not model.isdigit() and not model.startswith("gs://") and (os.path.exists(model) or os.sep in model):
        arguments["model"] = local_path(model)
        if not os.path.exists(arguments["model"]):
            raise DataError(f"model not found: {arguments['model']}")
    what = (
        f"{arguments['instances']} ({arguments['instances_format']}) with {arguments['model_name']} "
        f"{arguments['model'] or 'champion'} from {arguments['model_repository']}"
    )
    return arguments, build_batch_pipeline("local", config.platform), PIPELINE_NAME, what


def _local_instances(instances: str) -> str:
    """Comma-separated instances with local paths made absolute; each local one must exist or match something
    (the batch predictor's own expansion; gs:// ones are checked by the step)."""
    from components.lib.batch.instances import expand_inputs

    items = [i if i.startswith("gs://") else local_path(i) for i in (i.strip() for i in instances.split(",")) if i]
    if not items:
        raise ConfigError("names no files", "instances")
    local = [i for i in items if not i.startswith("gs://")]
    try:
        if local:
            expand_inputs(",".join(local))
    except FileNotFoundError as e:
        raise DataError(str(e), "instances") from None
    return ",".join(items)


def param_strings(params: Params | None) -> list[str]:
    """Pipeline inputs as `NAME=VALUE` strings, as `--param` takes them (a mapping's booleans, lists and dicts as
    JSON)."""
    if params is None:
        return []
    if isinstance(params, Mapping):
        return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in params.items()]
    return list(params)


@public
def rehearse(
    config: Config | str | Path | None,
    params: Params | None = None,
    *,
    template: str | Path | None = None,
    pipeline: str = "training",
    out: str | Path | None = None,
    state: str | Path = DEFAULT_STATE,
    caching: bool = True,
    api_faults: float = 0.0,
    preempt_replica: int | None = None,
    progress: bool = False,
    verbose: bool = False,
    log: Log | None = None,
) -> RehearsalSummary:
    """Run the compiled Vertex AI pipeline (`template`, else `pipeline` compiled now into `out`) on this machine
    against a local Vertex AI API double, with `params` (pipeline inputs: a mapping or `NAME=VALUE` strings) checked
    against the template; the summary with the Vertex AI requests the steps made. `state`: the rehearsed Model
    Registry, endpoints, bucket and cache, shared by successive rehearsals; `api_faults`: the share of the steps'
    Vertex AI calls refused with 429 or 503; `preempt_replica`: the replica each custom job loses once to a Spot
    preemption. A rehearsal that fails returns its summary with status FAILED."""
    from pipelines import report
    from pipelines.delivery import delivery_for
    from pipelines.rehearsal.iam import Iam
    from pipelines.rehearsal.run import PIPELINE_ROOT, PROJECT, PROJECT_NUMBER, rehearse as run_rehearsal
    from pipelines.templates import TemplateError, load_template, parse_params

    config, log = config_of(config), log or logger
    out = _out(out, "rehearsal-")
    with raising(ConfigError, TemplateError):
        if not template:
            template = delivery_for("vertex").compile(pipeline, config, out / "template.yaml")
        spec = load_template(str(template))
        arguments = _local_arguments(parse_params(param_strings(params), spec), spec)
    state_dir = Path(state).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)  # its iam.json: the set-up of this config (a new one; kept if there)
    platform = config.platform.model_copy(update={"project": config.platform.project or PROJECT})
    Iam(str(state_dir / "iam.json"), platform.service_account, PROJECT_NUMBER, platform)
    root = config.platform.pipeline_root
    with contextlib.ExitStack() as stack:
        if not progress:  # the steps' lines (the local runner's) and the double's messages go to stdout
            stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
        log(f"Rehearsing {spec['pipelineInfo']['name']} ({template}) against a local Vertex AI; output in {out}")
        summary = run_rehearsal(
            str(template),
            arguments,
            out,
            state_dir,
            verbose,
            log,
            caching=caching,
            project=platform.project,
            pipeline_root=root if root.startswith("gs://") else PIPELINE_ROOT,
            service_account=config.platform.service_account,
            api_faults=api_faults,
            preempt_replica=preempt_replica,
        )
    report.write(summary, out)
    return RehearsalSummary.of(summary, out)


def _local_arguments(arguments: dict, spec: dict) -> dict:
    """The local paths among a rehearsal's inputs made absolute (steps run in other folders), the template's
    default data source included."""
    for name in ("data_source", "instances"):
        if name in arguments:
            arguments[name] = ",".join(local_path(i.strip()) for i in str(arguments[name]).split(","))
    inputs = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    if "data_source" in inputs and "data_source" not in arguments:
        default = inputs["data_source"].get("defaultValue", "")
        if default and not default.startswith(("gs://", "builtin:")):
            arguments["data_source"] = local_path(default)
    return arguments


@public
def render(
    config: Config | str | Path | None, out: str | Path, target: str = "kubeflow", source: str | None = None
) -> list[str]:
    """Write every Kubernetes object the kubeflow steps would create for the config (training job and runtime,
    Katib Experiment, InferenceService, the namespace's claim, permissions Job and RBAC) into `out`, one YAML file
    each, run-time values as placeholders, under a header naming `source` (default: the config's path); the paths
    written."""
    from pipelines.render import RenderError, render_kubeflow, write

    if target != "kubeflow":
        raise ConfigError(f"only kubeflow has objects to render, got {target!r}", "target")
    source = source or (str(config) if isinstance(config, (str, Path)) else "the default config")
    with raising(ConfigError, RenderError):
        return write(render_kubeflow(config_of(config)), str(out), source)
