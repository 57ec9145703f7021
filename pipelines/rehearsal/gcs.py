"""Cloud Storage in a rehearsal: a GCS emulator (`gcp-storage-emulator`) holds every gs:// object, and each kind of
client reaches it the way it reaches Cloud Storage on Vertex AI:

- google-cloud-storage (the steps' and the serving container's reads, the batch predictor): STORAGE_EMULATOR_HOST;
- TensorFlow's own gs:// file system (the trainer writing AIP_MODEL_DIR, reading the dataset): TensorFlow talks to
  `https://www.googleapis.com` and `https://storage.googleapis.com` only, so a local HTTPS proxy (`https_proxy`)
  answers those hosts with a certificate of a rehearsal CA (`CURL_CA_BUNDLE`) and passes each request on to the
  emulator; `GOOGLE_AUTH_TOKEN_FOR_TESTING` is its credential; its reads go in blocks of `READ_BLOCK_MB`;
- a KFP lightweight step's `artifact.path` (`/gcs/BUCKET/...`, Cloud Storage FUSE on Vertex): `Mount`, a local
  folder standing in for `/gcs/`, filled with a task's input artifacts before it runs and copied into the emulator
  after it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import ssl
import threading
from pathlib import Path

from components.train_model import free_ports
from core import storage
from pipelines.rehearsal.state_files import write_json

GOOGLE_STORAGE_HOSTS = ("www.googleapis.com", "storage.googleapis.com")  # the hosts TensorFlow's gs:// calls
LOCAL_HOSTS = "127.0.0.1,localhost"
_EMULATOR_LOCK = threading.Lock()  # one request at a time, as the emulator handles them, and the metadata writes
SAVE_SECONDS = 1.0
NO_SOFT_DELETE = {"retentionDurationSeconds": "0"}  # the rehearsal's buckets delete at once (Cloud Storage: 7 days)
# TensorFlow's gs:// reader fills a buffer of one block (64 MB by default) per file opened: zeroing it costs about
# 0.1 s per open (each validation shard every epoch, each checkpoint index read back) on a machine that also runs the
# rehearsal's servers; blocks of 8 MB read the same objects, each request asking for a range of 8 MB.
READ_BLOCK_MB = 8


SERVING = "emulator.json"  # in the emulator's folder: {"host", "pid"} of the process serving it


@contextlib.contextmanager
def gcs_emulator(directory: str, bucket: str):
    """A GCS emulator with `bucket` (without soft delete), its data kept in `directory`; yields its host URL.

    One emulator serves a folder at a time, so that rehearsals running at once on one state see one Cloud Storage:
    the first starts it (on a free local port) and names it in `directory/emulator.json`; the others use it while
    it serves (a shared `flock` on `directory/.users` each); the one that started it stops it, its data saved, once
    none uses it any more. `.join` orders the joining against the stopping."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, ".users"), "a") as users, open(os.path.join(directory, ".join"), "a") as join:
        fcntl.flock(join, fcntl.LOCK_EX)
        try:
            host, stop = _serving(directory, users), None
            if host is None:
                host, stop = _serve(directory, bucket)
                write_json(os.path.join(directory, SERVING), {"host": host, "pid": os.getpid()})
                fcntl.flock(users, fcntl.LOCK_SH)
        finally:
            fcntl.flock(join, fcntl.LOCK_UN)
        try:
            yield host
        finally:
            if stop is not None:  # this process serves it: wait until no other uses it, then stop it
                fcntl.flock(users, fcntl.LOCK_EX)
                stop()
                os.remove(os.path.join(directory, SERVING))
            fcntl.flock(users, fcntl.LOCK_UN)


def _serving(directory: str, users) -> str | None:
    """The host of the emulator another process serves `directory` with, this process counted among its users;
    None when none does (or the one found was stopping)."""

    def current():
        try:
            with open(os.path.join(directory, SERVING)) as f:
                found = json.load(f)
            os.kill(found["pid"], 0)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return None
        return found

    found = current()
    if found is None:
        return None
    fcntl.flock(users, fcntl.LOCK_SH)  # waits while a stopping emulator saves its data
    if current() == found:
        return found["host"]
    fcntl.flock(users, fcntl.LOCK_UN)
    return None


def _serve(directory: str, bucket: str):
    """Start an emulator on `directory`; return (its host URL, the function that stops it and saves its data)."""
    from gcp_storage_emulator.server import create_server

    _as_cloud_storage()
    [port] = free_ports(1)
    server = create_server("127.0.0.1", port, in_memory=False, default_bucket=bucket, data_dir=directory)
    server._storage.buckets[bucket]["softDeletePolicy"] = NO_SOFT_DELETE
    base = f"http://127.0.0.1:{port}"
    for objects in server._storage.objects.values():  # download links kept from an earlier emulator's port
        for item in objects.values():
            item["mediaLink"] = base + item["mediaLink"][item["mediaLink"].index("/download/") :]
    server.start()
    stopped = threading.Event()

    def save_state():
        while not stopped.wait(SAVE_SECONDS):
            server._storage.save_state()

    saver = threading.Thread(target=save_state, daemon=True, name="gcs-emulator-state")
    saver.start()

    def stop():
        server.stop()
        stopped.set()
        saver.join()
        server._storage.save_state()

    return base, stop


def _as_cloud_storage() -> None:
    """Patch gcp-storage-emulator (2026.7) for the requests TensorFlow's gs:// client makes and a rehearsal's load:
    - a chunked body (TensorFlow's uploads) is read as framed;
    - connections stay open (HTTP/1.1; requests still handled one at a time), so that TensorFlow does not open a TLS
      tunnel through the proxy per request; `Expect: 100-continue` is answered, so that no upload waits out the
      client's timeout; answers go with TCP_NODELAY, so that none waits for the client's delayed ACK;
    - the URLs it answers (upload sessions, download links) name the emulator, not the request's Host;
    - an empty media upload (a folder marker `a/`) is an empty object, not an error;
    - `a/` beside `a/b` is possible: an object's bytes are kept in a file named by a hash of its name;
    - the metadata file, which holds every object, is written at most once a second, not at every write;
    - a client gone mid-request (a step's process that failed) is not reported with a stack on stderr: the run's
      error is its one line."""
    import sys
    from functools import partial
    from http.server import ThreadingHTTPServer

    from gcp_storage_emulator import server, storage as emulated
    from gcp_storage_emulator.handlers import objects

    if getattr(server, "as_cloud_storage", False):
        return
    read_raw, media_upload, handle, request_init, write_state = (
        server._read_raw_data,
        objects._media_upload,
        server.Router.handle,
        server.Request.__init__,
        emulated.Storage._write_config_to_file,
    )

    def read_raw_data(handler):
        if (handler.headers.get("Transfer-Encoding") or "").lower() != "chunked":
            return read_raw(handler)
        body = b""
        while size := int(handler.rfile.readline().strip() or b"0", 16):
            body += handler.rfile.read(size)
            handler.rfile.readline()
        handler.rfile.readline()  # the empty line after the last chunk
        return body

    class QuietServer(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    def serve(self):
        self._httpd = QuietServer((self._host, self._port), partial(server.RequestHandler, self._storage))
        self._httpd.daemon_threads = True
        self.is_running.set()
        self._httpd.serve_forever(poll_interval=0.05)  # a stop seen within 0.05 s (http.server's default: 0.5 s)

    def handle_alone(self, method):
        with _EMULATOR_LOCK:
            return handle(self, method)

    def own_urls(self, request_handler, method):
        request_init(self, request_handler, method)
        host, port = request_handler.server.server_address[:2]
        self._base_url = f"http://{host}:{port}"
        self._full_url = self._base_url + self._path

    def upload(request, response, storage):
        if request.data is None:
            request._data = b""
        return media_upload(request, response, storage)

    def object_path(self, bucket_name, file_name):
        return f"{bucket_name}/{hashlib.sha256(file_name.encode()).hexdigest()}"

    def mark_changed(self):
        self.changed = True

    def save_state(self):
        with _EMULATOR_LOCK:
            if getattr(self, "changed", True):
                write_state(self)
                self.changed = False

    server._read_raw_data = read_raw_data
    server.RequestHandler.protocol_version = "HTTP/1.1"
    server.RequestHandler.disable_nagle_algorithm = True
    server.APIThread.run = serve
    server.Router.handle = handle_alone
    server.Request.__init__ = own_urls
    objects._media_upload = upload
    emulated.Storage._object_path = object_path
    emulated.Storage._write_config_to_file = mark_changed
    emulated.Storage.save_state = save_state
    server.as_cloud_storage = True


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for Google's storage hosts signed by it (ca.pem, cert.pem, key.pem), made once (by
    one of the rehearsals starting at once on one state)."""
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(p.exists() for p in paths):
            _write_certificates(*paths)
    return paths


def _write_certificates(ca_path: Path, cert_path: Path, key_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject, issuer, public_key, signing_key, ca: bool, names=()):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        return builder.sign(signing_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("tfpipe rehearsal CA", "tfpipe rehearsal CA", ca_key.public_key(), ca_key, True)
    leaf = certificate(
        GOOGLE_STORAGE_HOSTS[0], ca.subject.rfc4514_string()[3:], key.public_key(), ca_key, False, GOOGLE_STORAGE_HOSTS
    )
    pem = serialization.Encoding.PEM
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(leaf.public_bytes(pem))
    key_path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class _StorageProxy:
    """An HTTPS proxy for Google's storage hosts: CONNECT, TLS with the rehearsal's certificate, then the tunnel's
    requests passed to the emulator on one connection (kept alive, as with Cloud Storage)."""

    def __init__(self, emulator: str, tls: ssl.SSLContext):
        self.upstream = emulator.removeprefix("http://")
        self.tls = tls
        [self.port] = free_ports(1)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._tunnel, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target = head.split(b" ", 2)[:2]
            if method != b"CONNECT" or target.decode().rsplit(":", 1)[0] not in GOOGLE_STORAGE_HOSTS:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await writer.start_tls(self.tls)
            host, port = self.upstream.split(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, ValueError):
            writer.close()

    def start(self) -> _StorageProxy:
        self.thread.start()
        self.ready.wait()
        return self

    def stop(self) -> None:
        async def close():
            self.server.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@contextlib.contextmanager
def tensorflow_gcs(emulator: str, directory: Path):
    """Yields the environment that sends TensorFlow's gs:// file system to the emulator."""
    ca, cert, key = _certificates(directory)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    proxy = _StorageProxy(emulator, tls).start()
    try:
        yield {
            "https_proxy": f"http://127.0.0.1:{proxy.port}",
            "no_proxy": LOCAL_HOSTS,
            "NO_PROXY": LOCAL_HOSTS,
            "CURL_CA_BUNDLE": str(ca),
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "rehearsal",
            "NO_GCE_CHECK": "true",
            "GCS_READ_CACHE_BLOCK_SIZE_MB": str(READ_BLOCK_MB),
        }
    finally:
        proxy.stop()


def _same_bytes(path: Path, blob) -> bool:
    """Whether the local file holds the object's bytes (size, then MD5)."""
    if blob is None or blob.size != path.stat().st_size:
        return False
    return base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode() == blob.md5_hash


class Mount:
    """A local folder standing in for Vertex's `/gcs/` (Cloud Storage FUSE): `ROOT/BUCKET/PATH` is
    `gs://BUCKET/PATH`. A task's input artifacts are pulled into it before it runs and its output artifacts pushed
    from it after; objects already there with the same bytes are not copied again."""

    def __init__(self, root: Path):
        self.root = root.resolve()

    def path(self, uri: str) -> Path:
        bucket, name = storage.split_gcs(uri)
        return self.root / bucket / name

    def uri(self, path: str | Path) -> str:
        return "gs://" + str(Path(path).resolve().relative_to(self.root))

    def pull(self, uri: str) -> None:
        """Copy the object `uri`, or the objects under the folder `uri`, into the mount (nothing there: nothing)."""
        bucket = storage.split_gcs(uri)[0]
        try:
            blobs = storage.gcs_objects(uri)[1]
        except FileNotFoundError:
            return
        for blob in blobs:
            target = self.root / bucket / blob.name
            if target.is_file() and _same_bytes(target, blob):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target))

    def push(self, uri: str) -> None:
        if self.path(uri).exists():
            upload(self.path(uri), uri)


def upload(local: Path, uri: str) -> None:
    """Copy the local file or folder `local` to the gs:// `uri` (a folder's files under it), skipping objects that
    hold the same bytes already (so their generations, which data fingerprints and caches see, do not change)."""
    bucket_name, name = storage.split_gcs(uri)
    files = (
        {name: local}
        if local.is_file()
        else {f"{name.rstrip('/')}/{p.relative_to(local)}": p for p in sorted(local.rglob("*")) if p.is_file()}
    )
    client = storage.gcs_client()
    there = {b.name: b for b in client.list_blobs(bucket_name, prefix=name)}
    target = client.bucket(bucket_name)
    for object_name, path in files.items():
        if _same_bytes(path, there.get(object_name)):
            continue
        target.blob(object_name).upload_from_filename(str(path))


@contextlib.contextmanager
def mounted_tasks(mount: Mount):
    """kfp.local's tasks see Cloud Storage as Vertex's do: their output artifacts get gs:// URIs (kfp.local gives
    paths under its local pipeline root, which lies in the mount), their input artifacts are in the mount when they
    start and their outputs in Cloud Storage when they end. A task's `artifact.path` maps gs:// to the mount
    (redirect.py sets kfp's `/gcs/` prefix in each step process)."""
    from kfp import dsl
    from kfp.local import executor_input_utils, task_dispatcher

    output_artifact, run_task = (
        executor_input_utils.artifact_type_schema_to_artifact_list,
        task_dispatcher.run_single_task_implementation,
    )

    def gcs_output_artifact(name, artifact_type, task_root):
        artifacts = output_artifact(name, artifact_type, task_root)
        for artifact in artifacts.artifacts:
            artifact.uri = mount.uri(artifact.uri)
        return artifacts

    def artifacts(values) -> list:
        found = []
        for value in values:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dsl.Artifact) and item.uri.startswith("gs://"):
                    found.append(item)
        return found

    def run_mounted(*args, **kwargs):
        for artifact in artifacts(kwargs["arguments"].values()):
            mount.pull(artifact.uri)
        outputs, status = run_task(*args, **kwargs)
        for artifact in artifacts(outputs.values()):
            mount.push(artifact.uri)
        return outputs, status

    executor_input_utils.artifact_type_schema_to_artifact_list = gcs_output_artifact
    task_dispatcher.run_single_task_implementation = run_mounted
    try:
        yield
    finally:
        executor_input_utils.artifact_type_schema_to_artifact_list = output_artifact
        task_dispatcher.run_single_task_implementation = run_task


def copy_folder(source: str, destination: str) -> str:
    """Copy every object under the gs:// folder `source` to the folder `destination` (its bucket created when
    missing); returns `destination`."""
    folder, blobs = storage.gcs_objects(source)
    target, prefix = bucket(destination), storage.split_gcs(destination)[1]
    for blob in blobs:
        name = blob.name[len(folder) :] if folder is not None else blob.name.rsplit("/", 1)[-1]
        blob.bucket.copy_blob(blob, target, f"{prefix.rstrip('/')}/{name}")
    return destination


def delete_folder(uri: str) -> None:
    """Delete every object under the gs:// folder `uri`."""
    bucket_name, prefix = storage.split_gcs(uri)
    client = storage.gcs_client()
    for blob in client.list_blobs(bucket_name, prefix=prefix.rstrip("/") + "/"):
        blob.delete()


def bucket(uri: str):
    """The bucket of the gs:// `uri`, created when missing (without soft delete, so that what the rehearsals delete,
    such as deployed models' copies and the trainer's temporary files, does not stay on disk for a week)."""
    from google.api_core.exceptions import NotFound

    client = storage.gcs_client()
    name = storage.split_gcs(uri)[0]
    try:
        return client.get_bucket(name)
    except NotFound:
        created = client.create_bucket(name)
        created.soft_delete_policy.retention_duration_seconds = 0
        created.patch()
        return created
