"""Local paths and gs:// URIs (read with google-cloud-storage; honours STORAGE_EMULATOR_HOST). Every Cloud Storage call
takes the project's retry policy (core.retries): reads, listings, deletes and resumable uploads repeat on transient
errors."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from core.retries import policy


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def local_path(value: str) -> str:
    """Absolute path for local sources and repositories (steps run as subprocesses); URIs pass unchanged."""
    if not value or value.startswith(("gs://", "builtin:")):
        return value
    return str(Path(value.removeprefix("file://")).expanduser().resolve())


def split_gcs(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"bad GCS URI {uri!r}: expected gs://BUCKET/PATH")
    return bucket, prefix


_clients = threading.local()


def gcs_client():
    """This thread's GCS client (one per thread and process, made once: a client finds its credentials and opens
    its connections when made, which would cost every read a lookup and a TLS handshake)."""
    from google.cloud import storage

    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST", ""), os.environ.get("GOOGLE_CLOUD_PROJECT", ""))
    cached = getattr(_clients, "client", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    if key[1]:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=key[2] or "local", credentials=AnonymousCredentials())
    else:
        client = storage.Client()
    _clients.client = (key, client)
    return client


def gcs_objects(uri: str, fields: str | None = None) -> tuple[str | None, list]:
    """What `staged` fetches for `uri`: `(None, [blob])` for the object `uri`, else `(folder, blobs)`, every object
    under the folder `uri` (names start with `folder`; folder placeholders skipped). `fields` trims the listing
    (keep `nextPageToken` in it: the listing follows pages). FileNotFoundError when there is nothing."""
    client = gcs_client()
    bucket_name, prefix = split_gcs(uri)
    single = (
        client.bucket(bucket_name).get_blob(prefix, retry=policy()) if prefix and not prefix.endswith("/") else None
    )
    if single is not None:
        return None, [single]
    folder = prefix.rstrip("/") + "/" if prefix else ""
    listed = client.list_blobs(bucket_name, prefix=folder, fields=fields, retry=policy())
    blobs = [b for b in listed if not b.name.endswith("/")]
    if not blobs:
        raise FileNotFoundError(f"nothing found at {uri}")
    return folder, blobs


RANGE_BYTES = 8 << 20


def open_read(uri: str):
    """A seekable binary stream of a local file or a gs:// object, read where it lives (ranged reads of
    `RANGE_BYTES`)."""
    if not is_gcs(uri):
        return open(uri, "rb")
    bucket, name = split_gcs(uri)
    blob = gcs_client().bucket(bucket).get_blob(name, retry=policy())
    if blob is None:
        raise FileNotFoundError(f"nothing found at {uri}")
    return blob.open("rb", chunk_size=RANGE_BYTES, retry=policy())


def open_write(uri: str):
    """A binary stream writing the local file (its folders made) or the gs:// object `uri`."""
    if not is_gcs(uri):
        os.makedirs(os.path.dirname(uri) or ".", exist_ok=True)
        return open(uri, "wb")
    bucket, name = split_gcs(uri)
    blob = gcs_client().bucket(bucket).blob(name)
    return blob.open("wb", chunk_size=RANGE_BYTES, ignore_flush=True, retry=policy())


def list_files(folder: str) -> list[str]:
    """The files directly in the local folder or under the gs:// prefix `folder`, sorted (none: [])."""
    if not is_gcs(folder):
        try:
            return sorted(os.path.join(folder, n) for n in os.listdir(folder))
        except FileNotFoundError:
            return []
    bucket, prefix = split_gcs(folder.rstrip("/") + "/")
    return sorted(f"gs://{bucket}/{b.name}" for b in gcs_client().list_blobs(bucket, prefix=prefix, retry=policy()))


def remove_tree(uri: str) -> None:
    """Delete the local folder or every object under the gs:// prefix `uri` (nothing there: nothing to do)."""
    if not is_gcs(uri):
        shutil.rmtree(uri, ignore_errors=True)
        return
    bucket, prefix = split_gcs(uri.rstrip("/") + "/")
    from google.api_core.exceptions import NotFound

    for blob in gcs_client().list_blobs(bucket, prefix=prefix, retry=policy()):
        with contextlib.suppress(NotFound):  # a repeated delete whose first try went through
            blob.delete(retry=policy())


def read_object(uri: str, length: int = -1, start: int = 0) -> bytes:
    """The content of the local file or gs:// object `uri` from byte `start` (its next `length` bytes when `length`
    > 0: a ranged request), in one request; FileNotFoundError when none."""
    if not is_gcs(uri):
        with open(uri, "rb") as f:
            f.seek(start)
            return f.read(length)
    if length == 0:
        return b""
    from google.api_core.exceptions import NotFound

    bucket, name = split_gcs(uri)
    try:
        blob = gcs_client().bucket(bucket).blob(name)
        if length < 0:
            return blob.download_as_bytes(start=start or None, retry=policy())
        return blob.download_as_bytes(start=start, end=start + length - 1, retry=policy())
    except NotFound:
        raise FileNotFoundError(f"nothing found at {uri}") from None


def read_bytes(uri: str) -> bytes | None:
    """The content of the file or object `uri`, None when there is none."""
    try:
        return read_object(uri)
    except FileNotFoundError:
        return None


def download(uri: str, dest: str, threads: int = 16) -> str:
    """Download the object `uri`, or every object under the folder `uri`, into `dest`; return the local path."""
    folder, blobs = gcs_objects(uri)
    if folder is None:
        target = os.path.join(dest, os.path.basename(blobs[0].name))
        blobs[0].download_to_filename(target, retry=policy())
        return target

    def fetch(blob):
        target = os.path.join(dest, blob.name[len(folder) :])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        blob.download_to_filename(target, retry=policy())

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fetch, blobs))
    return dest


@contextlib.contextmanager
def staged(uri: str):
    """Yield a local path holding `uri`: the path itself, or a temporary copy of a gs:// file or folder."""
    if not is_gcs(uri):
        yield uri
        return
    tmp = tempfile.mkdtemp(prefix="tfpipe-stage-")
    try:
        yield download(uri, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
