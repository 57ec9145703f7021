"""The versioned model repository, TF Serving's layout: `<base>/<model_name>/<version>/saved_model.pb`.

Each version carries its metadata (metrics, data stats, parameters, run id) in `assets.extra/`, which servers
ignore, so a version and its metadata appear and disappear together. Versions are strictly increasing and written
atomically (copy to a temporary name, then rename); an existing version is never overwritten.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass

METADATA_FILE = "assets.extra/model_metadata.json"


@dataclass(frozen=True)
class Version:
    number: int
    path: str
    metadata: dict


def versions(base: str, model_name: str) -> list[int]:
    """Loadable versions (integer directories holding saved_model.pb), oldest first."""
    import tensorflow as tf

    root = f"{base.rstrip('/')}/{model_name}"
    if not tf.io.gfile.isdir(root):
        return []
    found = []
    for entry in tf.io.gfile.listdir(root):
        name = entry.rstrip("/")
        if name.isdigit() and tf.io.gfile.exists(f"{root}/{name}/saved_model.pb"):
            found.append(int(name))
    return sorted(found)


def read_version(base: str, model_name: str, number: int) -> Version:
    import tensorflow as tf

    path = f"{base.rstrip('/')}/{model_name}/{number}"
    metadata_path = f"{path}/{METADATA_FILE}"
    metadata = {}
    if tf.io.gfile.exists(metadata_path):
        with tf.io.gfile.GFile(metadata_path) as f:
            metadata = json.load(f)
    return Version(number, path, metadata)


def champion(base: str, model_name: str) -> Version | None:
    """The newest version, or None for an empty repository (or no repository configured)."""
    if not base:
        return None
    found = versions(base, model_name)
    return read_version(base, model_name, found[-1]) if found else None


def publish(model_dir: str, base: str, model_name: str, metadata: dict) -> Version:
    """Copy the SavedModel in `model_dir` into the repository as the next version (local paths)."""
    if not base:
        raise ValueError("no model repository configured: set the model_repository parameter")
    if base.startswith("gs://"):
        raise ValueError("publishing to a gs:// model repository is not supported yet; use a local path")
    if not os.path.isfile(os.path.join(model_dir, "saved_model.pb")):
        raise FileNotFoundError(f"no saved_model.pb in {model_dir}")
    root = os.path.join(base, model_name)
    os.makedirs(root, exist_ok=True)
    staging = os.path.join(root, f".tmp-{uuid.uuid4().hex}")
    shutil.copytree(model_dir, staging)
    try:
        while True:
            existing = [int(e) for e in os.listdir(root) if e.isdigit()]
            number = max(existing, default=0) + 1
            record = {**metadata, "version": number, "model_name": model_name}
            os.makedirs(os.path.join(staging, os.path.dirname(METADATA_FILE)), exist_ok=True)
            with open(os.path.join(staging, METADATA_FILE), "w") as f:
                json.dump(record, f, indent=2)
            try:
                os.rename(staging, os.path.join(root, str(number)))  # fails if a concurrent publish took it
                return Version(number, os.path.join(root, str(number)), record)
            except OSError:
                continue
    finally:
        shutil.rmtree(staging, ignore_errors=True)
