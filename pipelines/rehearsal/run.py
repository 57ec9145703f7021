"""Run a compiled Vertex AI pipeline (the YAML `compile --target vertex` writes) on this machine.

Reused: kfp.local's orchestrator runs the spec as compiled (DAG, conditions, `OneOf`, importers, parameter and
artifact passing, placeholders) with its SubprocessRunner, and the lightweight steps run as in `make run`. Written
here: container tasks (the Google Cloud Pipeline Components) run their own command as a local process (kfp.local
refuses container components in a subprocess), forked from one that imported their launchers (warm_launchers.py),
the Vertex placeholders kfp.local does not know (`{{$.pipeline_google_cloud_project_id}}`) are resolved, and every
process talks to the API double (api/) through redirect.py. Storage is Cloud Storage's, on a local emulator
(gcs.py): the pipeline root and every artifact and job output are gs:// URIs, local data and batch instances are
copied into it first, and the steps' `artifact.path` is a mount folder standing in for Vertex's `/gcs/`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path

import yaml

from components.lib.prep import dataflow
from pipelines.rehearsal import gcs, redirect, warm_launchers
from pipelines.rehearsal.api import VertexDouble
from pipelines.rehearsal.cache import vertex_cache
from pipelines.templates import YAML_LOADER, load_template
from trainer.environment import LEGACY_KERAS

PROJECT = "tfpipe-rehearsal"  # the project of a rehearsal's resources when the config names none
PROJECT_NUMBER = "308452716099"  # the project's number: Vertex names resources with it in its answers
GCPC_MODULES = "google_cloud_pipeline_components.container."
EMULATOR_BUCKET = "rehearsal"  # where local data and instances are copied
PIPELINE_ROOT = f"gs://{EMULATOR_BUCKET}/pipeline-root"  # when the config names none


def template_location(spec: dict, default: str = "us-central1") -> str:
    """The Vertex region a compiled template targets: its tasks' `location` constant."""

    def tasks():
        for component in [spec["root"], *spec.get("components", {}).values()]:
            yield from component.get("dag", {}).get("tasks", {}).values()

    for task in tasks():
        value = task.get("inputs", {}).get("parameters", {}).get("location", {}).get("runtimeValue", {})
        if "constant" in value:
            return value["constant"]
    return default


def _go_number(value):
    """Parameters are protobuf Values (numbers are doubles): Vertex's backend (Go) writes an integral double
    without a fraction, `1`, where Python's json writes `1.0`, which protobuf integer fields refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_go_number(v) for v in value]
    if isinstance(value, dict):
        return {k: _go_number(v) for k, v in value.items()}
    return value


class _VertexJson:
    """`json` for kfp.local's placeholder resolution, with numbers written the way Vertex's backend writes them."""

    def __getattr__(self, name):
        return getattr(json, name)

    @staticmethod
    def dumps(value, *args, **kwargs):
        return json.dumps(_go_number(value), *args, **kwargs)


def gcpc_launchers(spec: dict) -> list[str]:
    """The modules the template's GCPC container tasks run (`python3 -u -m <module>`)."""
    modules: set[str] = set()
    for executor in spec["deploymentSpec"]["executors"].values():
        command = executor.get("container", {}).get("command", [])
        modules.update(m for flag, m in zip(command, command[1:]) if flag == "-m" and m.startswith(GCPC_MODULES))
    return sorted(modules)


@contextlib.contextmanager
def _kfp_local_patches(project: str, location: str):
    """Container tasks of Google Cloud Pipeline Components run their command as a local process, the Vertex
    placeholders resolve to the rehearsal's values (the run's uuid: kfp.local's unique run id), parameter values
    are written into commands as Vertex writes them, and kfp reads the template with libyaml."""
    from kfp.dsl import structures
    from kfp.local import placeholder_utils, subprocess_task_handler
    from kfp.local.orchestrator.orchestrator_utils import OrchestratorUtils

    handler = subprocess_task_handler.SubprocessTaskHandler
    dag_artifacts = OrchestratorUtils.__dict__["get_dag_output_artifacts"]
    refuse = handler.validate_not_container_component
    resolve = placeholder_utils.resolve_individual_placeholder

    def validate(self, full_command):
        if not any(GCPC_MODULES in part for part in full_command):
            refuse(self, full_command)

    def resolve_vertex(element, *args, **kwargs):
        values = {
            "{{$.pipeline_google_cloud_project_id}}": project,
            "{{$.pipeline_google_cloud_location}}": location,
            "{{$.pipeline_job_uuid}}": kwargs.get("pipeline_job_id", ""),
            "{{$.pipeline_persistent_resource_id}}": "",
        }
        for placeholder, value in values.items():
            element = element.replace(placeholder, value)
        return resolve(element, *args, **kwargs)

    def one_of_artifacts(cls, dag_outputs_spec, io_store):
        """kfp.local takes one artifact selector per DAG output; an artifact `dsl.OneOf` has one per branch: the
        output is the one of the branch that ran."""
        outputs = {}
        for key, spec in dag_outputs_spec.artifacts.items():
            for selector in spec.artifact_selectors:
                try:
                    outputs[key] = io_store.get_task_output(selector.producer_subtask, selector.output_artifact_key)
                    break
                except ValueError:
                    continue
        return outputs

    handler.validate_not_container_component = validate
    placeholder_utils.resolve_individual_placeholder = resolve_vertex
    placeholder_utils.json = _VertexJson()
    OrchestratorUtils.get_dag_output_artifacts = classmethod(one_of_artifacts)
    structures.yaml = _LibYaml()
    try:
        yield
    finally:
        handler.validate_not_container_component = refuse
        placeholder_utils.resolve_individual_placeholder = resolve
        placeholder_utils.json = json
        OrchestratorUtils.get_dag_output_artifacts = dag_artifacts
        structures.yaml = yaml


class _LibYaml:
    """kfp's YAML reading (`yaml.safe_load`, `yaml.safe_load_all`) through libyaml's parser: the same documents."""

    @staticmethod
    def safe_load(stream):
        return yaml.load(stream, Loader=YAML_LOADER)

    @staticmethod
    def safe_load_all(stream):
        return yaml.load_all(stream, Loader=YAML_LOADER)


@contextlib.contextmanager
def _environment(values: dict):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def stage_local(value: str, folder: str) -> str:
    """Local files or folders (comma-separated paths or globs) copied into the rehearsal bucket's `folder`, as a user
    copies them to Cloud Storage for Vertex; gs:// URIs and builtin: sources kept."""
    from components.lib.batch.instances import expand_inputs

    uris = []
    for item in (i.strip() for i in value.split(",") if i.strip()):
        if item.startswith(("gs://", "builtin:")):
            uris.append(item)
            continue
        for path in [item] if os.path.isdir(item) else expand_inputs(item):
            uri = f"gs://{EMULATOR_BUCKET}/{folder}/{os.path.basename(path.rstrip('/'))}"
            gcs.upload(Path(path), uri)
            uris.append(uri)
    return ",".join(uris)


def rehearse(
    template: str,
    arguments: dict,
    out: Path,
    state_dir: Path,
    verbose: bool = False,
    log=print,
    caching: bool = True,
    project: str = PROJECT,
    pipeline_root: str = PIPELINE_ROOT,
    service_account: str = "",
    api_faults: float = 0.0,
    preempt_replica: int | None = None,
) -> dict:
    """Run the compiled template with `arguments` in `project` (the config's) under `pipeline_root` (a gs:// URI on
    the rehearsal's Cloud Storage, kept in `state_dir`), its steps acting as `service_account` (the config's runs'
    account; "": the Compute Engine default); return the run summary (also written to `out`). `caching`: serve
    unchanged tasks from the cache kept in `state_dir` (Vertex's execution cache; cache.py). `api_faults`: the share
    of the steps' own Vertex AI calls refused with 429 or 503 (api/context.py's `fault`). `preempt_replica`: the
    replica each custom job loses once to a Spot preemption (jobs.Preemption)."""
    from kfp import components

    from pipelines import report
    from pipelines.local_run import run_local

    spec = load_template(template)
    location = template_location(spec)
    out.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    double = VertexDouble(
        str(out / "vertex"),
        str(state_dir / "vertex_state.json"),
        project,
        PROJECT_NUMBER,
        location,
        log,
        service_account,
        faults=api_faults,
        preempt=preempt_replica,
    ).start()
    mount = gcs.Mount(out / "gcs")
    started = time.time()
    try:
        with (
            gcs.gcs_emulator(str(state_dir / "gcs"), EMULATOR_BUCKET) as emulator,
            # CLOUD_ML_PROJECT_ID: the project Vertex gives a pipeline step's job
            _environment(
                {"STORAGE_EMULATOR_HOST": emulator, "GOOGLE_CLOUD_PROJECT": project, "CLOUD_ML_PROJECT_ID": project}
            ),
            gcs.tensorflow_gcs(emulator, state_dir / "tls") as tensorflow_env,
            _environment(
                {
                    **redirect.environment(double.grpc_target, double.http_base, project, str(mount.root)),
                    **tensorflow_env,
                    **LEGACY_KERAS,
                    "TF_CPP_MIN_LOG_LEVEL": "2",
                    dataflow.RECORD_ENV: str(out / "dataflow"),  # prep's Dataflow job: recorded, run directly
                }
            ),
            _kfp_local_patches(project, location),
            warm_launchers.serving(gcpc_launchers(spec)),
            gcs.mounted_tasks(mount),
            vertex_cache(),
            redirect.redirected(double.grpc_target, double.http_base, project),
        ):
            gcs.bucket(pipeline_root)
            for name, folder in (("instances", "instances"), ("data_source", "data")):
                if arguments.get(name):
                    arguments = {**arguments, name: stage_local(arguments[name], folder)}
            steps, run_root = run_local(
                components.load_component_from_file(template),
                arguments,
                out,
                verbose,
                state_dir / "cache" if caching else None,
                mount.path(pipeline_root.rstrip("/")),
            )
            if run_root is not None:  # what the Vertex jobs wrote into the run's folder, for the summary
                mount.pull(mount.uri(run_root))
    finally:
        double.stop()
    summary = report.collect(run_root, steps, spec["pipelineInfo"]["name"], arguments, time.time() - started)
    summary["vertex"] = vertex_section(double, out)
    jobs = double.job_service.jobs
    study = next((j["data"] for j in jobs.values() if j["kind"] == "hyperparameter_tuning_job"), None)
    if study:  # the study's own records, kept by the double with the job's logs
        summary["tuning"] = report.tuning(Path(double.job_service.job_dir(study["name"])) / "study")
    batch = next((j["data"] for j in jobs.values() if j["kind"] == "batch_prediction_job"), None)
    if batch and batch.get("completion_stats"):
        ok, failed = (int(batch["completion_stats"].get(k, 0)) for k in ("successful_count", "failed_count"))
        summary["batch_prediction"] = {
            "output_directory": batch["output_info"]["gcs_output_directory"],
            "model": batch["model"],
            "instances": ok + failed,
            "succeeded": ok,
            "failed": failed,
            "files": batch["input_config"]["gcs_source"]["uris"],
            "seconds": round(batch["end_time"] - batch["start_time"], 2),
        }
    failed_step = next((s for s in steps if s.status == "FAILED"), None)
    if failed_step and double.errors:
        api_error = _error_during(double.errors, failed_step)
        if api_error:
            summary["error"] = f"{failed_step.name}: {api_error}"
    return summary


def _error_during(errors: list[dict], step) -> str | None:
    """The last API error answered while `step` ran (its own request, or the job it waited for), after the name of
    the API that answered it (Dataflow's routes are under /v1b3/)."""
    during = [e for e in errors if step.started - 1 <= e["time"] <= step.started + step.seconds + 1]
    if not during:
        return None
    api = "Dataflow" if "/v1b3/" in during[-1]["method"] else "Vertex AI"
    return f"{api}: {during[-1]['message']}"


def vertex_section(double: VertexDouble, out: Path) -> dict:
    """What the run did on the (rehearsed) Vertex AI: the requests log, the jobs, the registry (each version's
    aliases, artifacts and labels: its source_commit among them) and endpoints."""
    state = double.registry.state
    return {
        "project": double.registry.project_ids[0],
        "location": double.location,
        "requests": str(Path(double.requests_path)),
        "refused": double.refused,
        "jobs": [
            {
                "name": j["name"],
                "kind": j["kind"],
                "display_name": j["data"].get("display_name"),
                "state": j["data"]["state"],
                "error": j["data"].get("error", {}).get("message"),
            }
            for j in double.job_service.jobs.values()
        ],
        "models": [
            {
                "name": name,
                "display_name": m["display_name"],
                "versions": [
                    {
                        "version_id": v["version_id"],
                        "aliases": v["version_aliases"],
                        "artifact_uri": v["artifact_uri"],
                        "labels": v.get("labels", {}),
                    }
                    for v in m["versions"]
                ],
            }
            for name, m in state["models"].items()
        ],
        "endpoints": [
            {
                "name": name,
                "display_name": e["display_name"],
                "traffic_split": e["traffic_split"],
                "deployed_models": [
                    {"id": d["id"], "model": f"{d['model']}@{d['model_version_id']}"} for d in e["deployed_models"]
                ],
            }
            for name, e in state["endpoints"].items()
        ],
        "errors": [e["message"] for e in double.errors],
    }


def state_location(state_dir: Path, default: str = "us-central1") -> str:
    """The region of a rehearsal's saved resources."""
    path = state_dir / "vertex_state.json"
    state = json.loads(path.read_text()) if path.exists() else {}
    names = [*state.get("models", {}), *state.get("endpoints", {})]
    return names[0].split("/")[3] if names else default


@contextlib.contextmanager
def rehearsal_api(state_dir: Path, location: str, log=print):
    """The double on a rehearsal's saved registry, endpoints and Cloud Storage, this process redirected to it
    (promote, rollback)."""
    directory = state_dir / "api"
    double = VertexDouble(
        str(directory), str(state_dir / "vertex_state.json"), PROJECT, PROJECT_NUMBER, location, log
    ).start()
    try:
        with (
            gcs.gcs_emulator(str(state_dir / "gcs"), EMULATOR_BUCKET) as emulator,
            _environment({"STORAGE_EMULATOR_HOST": emulator}),
            redirect.redirected(double.grpc_target, double.http_base, PROJECT),
        ):
            yield double
    finally:
        double.stop()
        shutil.rmtree(directory, ignore_errors=True)
