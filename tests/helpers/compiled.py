"""Compiled pipeline templates for the tests that read them: each (target, pipeline, platform) compiled once per
test process (KFP writes the YAML with PyYAML's pure-Python emitter), its documents parsed anew for every caller with
libyaml."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import yaml

from pipelines.config import Platform


@functools.cache
def _text(target: str, pipeline: str, platform_json: str) -> str:
    from kfp import compiler

    from pipelines.batch_prediction import build_batch_pipeline
    from pipelines.training import build_pipeline

    build = build_pipeline if pipeline == "training" else build_batch_pipeline
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pipeline.yaml"
        compiler.Compiler().compile(build(target, Platform.model_validate_json(platform_json)), str(path))
        return path.read_text()


def compiled_text(target: str, pipeline: str = "training", platform: Platform | None = None) -> str:
    """The YAML `compile --target TARGET --pipeline PIPELINE` writes for `platform` (default: Platform())."""
    return _text(target, pipeline, (platform or Platform()).model_dump_json())


def compiled_docs(target: str, pipeline: str = "training", platform: Platform | None = None) -> list[dict]:
    """Its documents: the pipeline spec, then the platform spec when there is one (the caller's to change)."""
    return list(yaml.load_all(compiled_text(target, pipeline, platform), Loader=yaml.CSafeLoader))


def compiled_file(folder: Path, target: str, pipeline: str = "training", platform: Platform | None = None) -> Path:
    """The YAML written to `folder/TARGET-PIPELINE.yaml`."""
    path = folder / f"{target}-{pipeline}.yaml"
    path.write_text(compiled_text(target, pipeline, platform))
    return path


def dag(spec: dict, component: str | None = None) -> dict:
    """The tasks of the pipeline spec's root DAG, or of `component`'s (e.g. "comp-condition-2")."""
    return (spec["components"][component]["dag"] if component else spec["root"]["dag"])["tasks"]
