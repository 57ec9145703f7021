"""Data fingerprint: a digest of what data prep would read from a source, without reading the data.

prepare-data takes the digest as its `data_fingerprint` input and this step is never cached (unless a run-level
`enable_caching=True` on Vertex overrides that), so fresh data means a new prepare-data run and the same data a cache
hit. The digest is SHA-256 over a canonical, sorted JSON listing of what prep reads (resolved as prep resolves it):

- `gs://` object or folder: each object's name (relative to the folder), size and generation;
- local CSV file or image folder (every file under it): relative path, size and mtime_ns;
- a CSV glob (local or gs://): each matched file's path (or object name) with the same;
- `builtin:NAME`: the name and the installed scikit-learn version (the data set is fixed per version).
"""

import hashlib
import json
import os
from importlib import metadata

from components.lib.prep.source_reads import match_files, match_gcs
from components.lib.prep.sources import check_builtin, file_kind, folder_files, is_glob, source_kind
from core.storage import gcs_objects, is_gcs

GCS_FIELDS = "items(name,generation,size),nextPageToken"  # a cheap listing; nextPageToken keeps paging on


def _gcs_listing(data_source: str) -> tuple[str, list]:
    """The kind and `[name, size, generation]` of each object."""
    if is_glob(data_source):
        blobs = match_gcs(data_source, GCS_FIELDS)
        if not blobs:
            raise FileNotFoundError(f"nothing found at {data_source}")
        return "csv", [[b.name, int(b.size), int(b.generation)] for b in blobs]
    folder, blobs = gcs_objects(data_source, fields=GCS_FIELDS)
    if folder is None:
        name = os.path.basename(blobs[0].name)
        file_kind(data_source, name)
        return "csv", [[name, int(blobs[0].size), int(blobs[0].generation)]]
    return "folder", [[b.name[len(folder) :], int(b.size), int(b.generation)] for b in blobs]


def _local_listing(data_source: str) -> tuple[str, list]:
    """The kind and `[relative path, size, mtime_ns]` of each file."""
    path = data_source.removeprefix("file://")
    kind = source_kind(data_source, path)
    if kind == "folder":
        files = [(rel, os.path.join(path, rel)) for rel in folder_files(path)]
    else:
        files = [(p, p) for p in match_files(path)] if is_glob(path) else [(os.path.basename(path), path)]
    entries = []
    for rel, full in files:
        try:
            st = os.stat(full)
        except FileNotFoundError:  # a dangling link: prep lists it too (and quarantines it)
            st = os.lstat(full)
        entries.append([rel.replace(os.sep, "/"), st.st_size, st.st_mtime_ns])
    return kind, entries


def fingerprint(data_source: str) -> dict:
    """The digest of `data_source` (`sha256:<hex>`) with its kind, file count and total bytes; a missing or
    unsupported source raises the error data prep gives."""
    if data_source.startswith("builtin:"):
        scheme, kind = "builtin", "builtin"
        entries = [[check_builtin(data_source.split(":", 1)[1]), f"scikit-learn=={metadata.version('scikit-learn')}"]]
    else:
        scheme = "gcs" if is_gcs(data_source) else "local"
        kind, entries = (_gcs_listing if scheme == "gcs" else _local_listing)(data_source)
    canonical = json.dumps([scheme, kind, sorted(entries)], separators=(",", ":"))
    files = [] if kind == "builtin" else entries
    return {
        "source": data_source,
        "kind": kind,
        "files": len(files),
        "bytes": sum(e[1] for e in files),
        "digest": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest(),
    }


def summary(result: dict) -> str:
    """One line for the step's log."""
    what = "built-in data set" if result["kind"] == "builtin" else f"{result['files']} files, {result['bytes']} bytes"
    return f"{result['source']} ({result['kind']}): {what}, {result['digest']}"


def fingerprint_data(data_source: str) -> str:
    """KFP step (run it with caching off): the digest of what data prep would read from `data_source`, for
    prepare-data's `data_fingerprint` input.

    Args:
        data_source: The data source, as given to data prep (a builtin name, a local path or a gs:// URI).
    """
    from components.fingerprint_data import fingerprint, summary

    result = fingerprint(data_source)
    print(summary(result))
    return result["digest"]
