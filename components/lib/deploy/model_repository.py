"""The versioned model repository, TF Serving's layout: `<base>/<model_name>/<version>/saved_model.pb`, `base` a local
folder or a gs:// URI. Each version carries its metadata (metrics, data stats, parameters, run id) in `assets.extra/`,
which servers ignore.

- A version is listed, and loadable, once its saved_model.pb exists: locally a whole folder is renamed into place
  (and out); on GCS, which has no rename, saved_model.pb is uploaded last and deleted first.
- Numbers strictly increase and are never reused, nor versions overwritten: a publish claims the next number by
  creating `<model_name>/.claims/<N>` only if absent (O_EXCL locally, `ifGenerationMatch=0` on GCS), above any number
  lost to a concurrent publish; claims outlive removed versions.
- Model names are checked by every function here (core.names.model_name: one path segment); a local version is
  written or removed only when its model folder, resolved, lies inside the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from core import names, storage

METADATA_FILE = "assets.extra/model_metadata.json"
MODEL_FILE = "saved_model.pb"
CLAIMS = ".claims"
THREADS = 8  # parallel GCS requests
_NUMBER = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class Version:
    number: int
    path: str
    metadata: dict


def _root(base: str, model_name: str) -> str:
    if not base:
        raise ValueError("no model repository configured: set the model_repository parameter")
    names.model_name(model_name)
    return f"{base.rstrip('/')}/{model_name}"


def _writable(base: str, root: str) -> None:
    """InvalidName unless the local model folder `root`, resolved, lies inside the repository `base`."""
    if not storage.is_gcs(root):
        names.inside(base, root, "model_name")


def _is_number(name: str) -> bool:
    return _NUMBER.fullmatch(name) is not None


def _scan_local(root: str) -> tuple[list[int], int]:
    """The loadable versions, oldest first, and the highest number in use (a version folder or a claim), or 0."""
    entries = os.listdir(root) if os.path.isdir(root) else []
    numbers = [int(e) for e in entries if _is_number(e)]
    claims_dir = os.path.join(root, CLAIMS)
    claims = [int(e) for e in os.listdir(claims_dir) if _is_number(e)] if os.path.isdir(claims_dir) else []
    loadable = sorted(n for n in numbers if os.path.isfile(os.path.join(root, str(n), MODEL_FILE)))
    return loadable, max(numbers + claims, default=0)


def _scan_gcs(bucket, prefix: str) -> tuple[list[int], int]:
    """As `_scan_local`, for the objects under `gs://<bucket>/<prefix>/`."""
    loadable, used = set(), set()
    for blob in bucket.list_blobs(prefix=f"{prefix}/", fields="items(name),nextPageToken"):
        first, _, rest = blob.name[len(prefix) + 1 :].partition("/")
        if first == CLAIMS and _is_number(rest):
            used.add(int(rest))
        elif _is_number(first):
            used.add(int(first))
            if rest == MODEL_FILE:
                loadable.add(int(first))
    return sorted(loadable), max(used, default=0)


def _gcs_bucket(uri: str):
    bucket_name, prefix = storage.split_gcs(uri)
    return storage.gcs_client().bucket(bucket_name), prefix


def versions(base: str, model_name: str) -> list[int]:
    """Loadable versions (integer folders holding saved_model.pb), oldest first."""
    root = _root(base, model_name)
    if storage.is_gcs(root):
        return _scan_gcs(*_gcs_bucket(root))[0]
    return _scan_local(root)[0]


def read_version(base: str, model_name: str, number: int) -> Version:
    """A loadable version with its metadata ({} when it has none); FileNotFoundError if it is not loadable."""
    path = f"{_root(base, model_name)}/{number}"
    missing = FileNotFoundError(f"no {MODEL_FILE} in {path}")
    if storage.is_gcs(path):
        from google.api_core.exceptions import NotFound

        bucket, prefix = _gcs_bucket(path)
        if bucket.get_blob(f"{prefix}/{MODEL_FILE}") is None:
            raise missing
        try:
            metadata = json.loads(bucket.blob(f"{prefix}/{METADATA_FILE}").download_as_bytes())
        except NotFound:
            metadata = {}
        return Version(number, path, metadata)
    if not os.path.isfile(f"{path}/{MODEL_FILE}"):
        raise missing
    metadata = {}
    if os.path.isfile(f"{path}/{METADATA_FILE}"):
        with open(f"{path}/{METADATA_FILE}") as f:
            metadata = json.load(f)
    return Version(number, path, metadata)


def champion(base: str, model_name: str) -> Version | None:
    """The newest version, or None for an empty repository (or no repository configured)."""
    if not base:
        return None
    found = versions(base, model_name)
    return read_version(base, model_name, found[-1]) if found else None


def publish(model_dir: str, base: str, model_name: str, metadata: dict) -> Version:
    """Copy the SavedModel in the local folder `model_dir` into the repository as the next version."""
    root = _root(base, model_name)
    if not os.path.isfile(os.path.join(model_dir, MODEL_FILE)):
        raise FileNotFoundError(f"no {MODEL_FILE} in {model_dir}")
    _writable(base, root)
    return (_publish_gcs if storage.is_gcs(root) else _publish_local)(model_dir, root, model_name, metadata)


def remove_version(base: str, model_name: str, number: int) -> None:
    """Delete a version (for a rollback), keeping its claim so that its number is never published again."""
    root = _root(base, model_name)
    _writable(base, root)
    if storage.is_gcs(root):
        bucket, prefix = _gcs_bucket(root)
        blobs = list(bucket.list_blobs(prefix=f"{prefix}/{number}/"))
        if not blobs:
            raise FileNotFoundError(f"no version {number} in {root}")
        _claim_gcs(bucket.blob(f"{prefix}/{CLAIMS}/{number}"), uuid.uuid4().hex)  # if copied in without a claim
        model_file = f"{prefix}/{number}/{MODEL_FILE}"
        rest = [b for b in blobs if b.name != model_file]
        if len(rest) < len(blobs):
            bucket.blob(model_file).delete()  # first: the version stops being loadable before the rest goes
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(lambda blob: blob.delete(), rest))
        return
    path = os.path.join(root, str(number))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no version {number} in {root}")
    _claim_local(root, number)  # if copied in without a claim
    trash = os.path.join(root, f".tmp-{uuid.uuid4().hex}")
    os.rename(path, trash)
    shutil.rmtree(trash)


def _record(metadata: dict, number: int, model_name: str) -> dict:
    return {**metadata, "version": number, "model_name": model_name}


def _claim_next(highest: Callable[[], int], take: Callable[[int], bool]) -> int:
    """Take the lowest number above every number in use; after a lost race, look again above the number lost."""
    number = 0
    while True:
        number = max(number, highest()) + 1
        if take(number):
            return number


def _claim_local(root: str, number: int) -> bool:
    os.makedirs(os.path.join(root, CLAIMS), exist_ok=True)
    try:
        os.close(os.open(os.path.join(root, CLAIMS, str(number)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _claim_gcs(blob, token: str) -> bool:
    from google.api_core.exceptions import PreconditionFailed

    try:
        blob.upload_from_string(token, if_generation_match=0)
        return True
    except PreconditionFailed:  # taken: by another publish, or by this one when a retry followed a lost reply
        return blob.download_as_text() == token


def _publish_local(model_dir: str, root: str, model_name: str, metadata: dict) -> Version:
    os.makedirs(root, exist_ok=True)
    staging = os.path.join(root, f".tmp-{uuid.uuid4().hex}")
    shutil.copytree(model_dir, staging)

    def take(number: int) -> bool:
        if not _claim_local(root, number):
            return False
        os.makedirs(os.path.join(staging, os.path.dirname(METADATA_FILE)), exist_ok=True)
        with open(os.path.join(staging, METADATA_FILE), "w") as f:
            json.dump(_record(metadata, number, model_name), f, indent=2)
        try:
            os.rename(staging, os.path.join(root, str(number)))  # fails if a folder `number` was made by hand
            return True
        except OSError:
            return False

    try:
        number = _claim_next(lambda: _scan_local(root)[1], take)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Version(number, f"{root}/{number}", _record(metadata, number, model_name))


def _publish_gcs(model_dir: str, root: str, model_name: str, metadata: dict) -> Version:
    bucket, prefix = _gcs_bucket(root)
    files = [
        os.path.relpath(os.path.join(folder, name), model_dir).replace(os.sep, "/")
        for folder, _, names in os.walk(model_dir)
        for name in names
    ]
    token = uuid.uuid4().hex
    number = _claim_next(
        lambda: _scan_gcs(bucket, prefix)[1], lambda n: _claim_gcs(bucket.blob(f"{prefix}/{CLAIMS}/{n}"), token)
    )
    record = _record(metadata, number, model_name)
    folder = f"{prefix}/{number}"
    with ThreadPoolExecutor(THREADS) as pool:
        uploads = [
            pool.submit(bucket.blob(f"{folder}/{name}").upload_from_filename, os.path.join(model_dir, name))
            for name in files
            if name not in (MODEL_FILE, METADATA_FILE)
        ]
        uploads.append(
            pool.submit(
                bucket.blob(f"{folder}/{METADATA_FILE}").upload_from_string,
                json.dumps(record, indent=2),
                content_type="application/json",
            )
        )
        for upload in uploads:
            upload.result()
    bucket.blob(f"{folder}/{MODEL_FILE}").upload_from_filename(os.path.join(model_dir, MODEL_FILE))  # now loadable
    return Version(number, f"{root}/{number}", record)
