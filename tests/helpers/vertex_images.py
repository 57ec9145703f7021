"""Vertex AI's way of running the images, for the image tests: the pipelines compiled with this machine's images,
their container steps with their executor input, custom-job worker pools with CLUSTER_SPEC, tuning trials with their
appended arguments. Cloud Storage is a host folder mounted at /gcs, where Vertex's Cloud Storage FUSE mount puts
`gs://BUCKET/PATH` (`/gcs/BUCKET/PATH`): TensorFlow's own gs:// file system cannot be pointed at a local server, so
the trainer is given the FUSE paths, which Vertex supports as well."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from tests.helpers.podman import Container, image

BUCKET = "tfpipe-images"
FUSE = "/gcs"
WORKERS = 2  # the prepared data's shards and the custom job's replicas


def fuse_path(uri: str) -> str:
    """gs://BUCKET/PATH as Cloud Storage FUSE shows it in the container: /gcs/BUCKET/PATH."""
    return f"{FUSE}/{uri.removeprefix('gs://')}" if uri.startswith("gs://") else uri


def compiled(target: str, pipeline: str, folder) -> dict:
    """The pipeline compiled for `target` with this machine's images."""
    from pipelines.config import load_config
    from pipelines.delivery import delivery_for

    sets = [f"platform.{kind}_image={image(kind)}" for kind in ("components", "trainer", "serving")]
    config = load_config(sets=[*sets, f"platform.trainer_gpu_image={image('trainer')}"], environ={})
    path = delivery_for(target).compile(pipeline, config, folder / f"{target}-{pipeline}.yaml")
    with open(path) as f:
        return next(yaml.safe_load_all(f))


class CloudStorage:
    """The host folder behind /gcs: `host(uri)` is where gs://BUCKET/PATH's objects are on this machine."""

    def __init__(self, folder: Path):
        self.folder = folder
        (folder / BUCKET).mkdir(parents=True, exist_ok=True)
        for path in (folder, folder / BUCKET):
            os.chown(path, 1000, 1000)  # Cloud Storage FUSE gives the mount to the container's user

    def host(self, uri: str) -> Path:
        return self.folder / uri.removeprefix("gs://")

    def uri(self, path: Path) -> str:
        return f"gs://{path.relative_to(self.folder)}"

    @property
    def volumes(self) -> dict[str, str]:
        return {str(self.folder): FUSE}


def executor_input(spec: dict, component: str, arguments: dict, task_root: str) -> dict:
    """The executor input Vertex's launcher gives `component` (e.g. "comp-prepare-data") of the compiled `spec`:
    parameters and artifacts as given, outputs under `task_root` (gs://), the output files at their FUSE paths."""
    from google.protobuf import json_format
    from kfp.local.executor_input_utils import construct_executor_input, executor_input_to_dict
    from kfp.pipeline_spec import pipeline_spec_pb2

    component_spec = json_format.ParseDict(spec["components"][component], pipeline_spec_pb2.ComponentSpec())
    message = construct_executor_input(component_spec, arguments, task_root, block_input_artifact=False)
    outputs = message.outputs
    outputs.output_file = fuse_path(outputs.output_file)
    for parameter in outputs.parameters.values():
        parameter.output_file = fuse_path(parameter.output_file)
    return executor_input_to_dict(message, component_spec)


PROJECT = "tfpipe-images"


def run_step(spec: dict, task: str, arguments: dict, storage: CloudStorage, run: str = "run-1") -> dict:
    """Run the compiled pipeline's step `task` (e.g. "prepare-data") in its image, with the executor's own command,
    arguments and env, as Vertex runs a container step (with the job's project in CLOUD_ML_PROJECT_ID); return its
    executor output (what the next steps read)."""
    from kfp.local.placeholder_utils import replace_placeholders

    component = f"comp-{task}"
    executor = spec["deploymentSpec"]["executors"][spec["components"][component]["executorLabel"]]["container"]
    task_root = f"gs://{BUCKET}/pipeline-root/{run}/{task}"
    values = executor_input(spec, component, arguments, task_root)
    command = replace_placeholders(
        [*executor["command"], *executor["args"]],
        values,
        pipeline_resource_name=run,
        task_resource_name=task,
        pipeline_root=f"gs://{BUCKET}/pipeline-root",
        unique_pipeline_id=run,
    )
    n = len(executor["command"])
    env = {"CLOUD_ML_PROJECT_ID": PROJECT, **{e["name"]: e["value"] for e in executor.get("env", [])}}
    container = Container(executor["image"], command[n:], entrypoint=command[:n], env=env, volumes=storage.volumes)
    code = container.wait(900)
    assert code == 0, f"{task} exited with {code}:\n{container.log()[-3000:]}"
    output = storage.host(values["outputs"]["outputFile"].removeprefix(FUSE + "/"))
    return json.loads(output.read_text())
