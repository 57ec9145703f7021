"""Point the Google clients of a process at the local Vertex AI API double instead of
`REGION-aiplatform.googleapis.com`: GAPIC gRPC channels (the aiplatform_v1 clients GCPC's job launchers and this
project's steps use), `requests` calls (GCPC's REST launchers: upload, endpoint, deploy), Application Default
Credentials (a fixed token), and GCPC's 20-second polling intervals (0.25 s, so a rehearsal does not wait on them).

Each patch is applied when its module is first imported (a post-import hook), so processes that never talk to
Vertex, such as the trainer's workers, import nothing more. Subprocesses get the same through `shim/sitecustomize.py`,
which `environment()` puts first on PYTHONPATH; the rehearsing process itself only for the rehearsal's duration
(`redirected`), so that the Google clients of a notebook that rehearses then submits reach Google Cloud again.
"""

import contextlib
import os
import re
import sys

from core.import_hooks import WrapExecution

ENV = "TFPIPE_VERTEX_API"  # "<grpc host:port> <http base URL> <project>"
MOUNT_ENV = "TFPIPE_GCS_MOUNT"  # the folder standing in for Vertex's /gcs/ (rehearsal/gcs.py's Mount)
SHIM = os.path.join(os.path.dirname(__file__), "shim")
VERTEX_HOST = re.compile(r"^[a-z0-9-]+-aiplatform\.googleapis\.com(:443)?$")
VERTEX_URL = re.compile(r"^https://[a-z0-9-]+-aiplatform\.googleapis\.com/")
POLL_SECONDS = 0.25


def environment(grpc_target: str, http_base: str, project: str, mount: str = "") -> dict:
    """The variables that make a subprocess talk to the double (data prep's Dataflow job included: it is created on
    the double's Dataflow route) and, with `mount`, see it as Vertex's /gcs/."""
    from components.lib.prep.dataflow import API_ENV as DATAFLOW_API_ENV  # not at import: every subprocess imports this

    path = os.environ.get("PYTHONPATH", "")
    return {
        ENV: f"{grpc_target} {http_base} {project}",
        DATAFLOW_API_ENV: http_base,
        "PYTHONPATH": SHIM + (os.pathsep + path if path else ""),
        **({MOUNT_ENV: mount} if mount else {}),
    }


Undo = list  # of (object, attribute, value before the patch), in the order the patches were made


def _set(undo: Undo, obj, name: str, value) -> None:
    undo.append((obj, name, getattr(obj, name)))
    setattr(obj, name, value)


def _patch_grpc(module, undo, target):
    import grpc

    create = module.create_channel

    def create_channel(host, *args, **kwargs):
        return grpc.insecure_channel(target) if VERTEX_HOST.match(host) else create(host, *args, **kwargs)

    _set(undo, module, "create_channel", create_channel)


def _patch_requests(module, undo, base):
    send = module.Session.request

    def request(self, method, url, *args, **kwargs):
        return send(self, method, VERTEX_URL.sub(base.rstrip("/") + "/", url), *args, **kwargs)

    _set(undo, module.Session, "request", request)


def _patch_auth(module, undo, project):
    def default(*args, **kwargs):
        from google.oauth2.credentials import Credentials  # not at patch time: google.auth is still initialising

        return Credentials(token="rehearsal"), project

    _set(undo, module, "default", default)


def _patch_polling(module, undo):
    _set(undo, module, "_POLLING_INTERVAL_IN_SECONDS", POLL_SECONDS)


def _patch_mount(module, undo, mount):
    """kfp maps an artifact's gs:// URI to Vertex's Cloud Storage FUSE path `/gcs/...`: here the mount's."""
    _set(undo, module, "_GCS_LOCAL_MOUNT_PREFIX", mount.rstrip("/") + "/")


def _then(patch, undo):
    """Run `patch(module, undo)` right after the module is executed."""

    def wrap(exec_module):
        def patched(module):
            exec_module(module)
            patch(module, undo)

        return patched

    return wrap


def install(grpc_target: str, http_base: str, project: str, mount: str = "") -> Undo:
    """Redirect this process (modules imported already are patched now, the others when imported); what `restore`
    takes to undo it."""
    patches = {
        "google.api_core.grpc_helpers": lambda m, undo: _patch_grpc(m, undo, grpc_target),
        "requests.sessions": lambda m, undo: _patch_requests(m, undo, http_base),
        "google.auth": lambda m, undo: _patch_auth(m, undo, project),
        "google_cloud_pipeline_components.container.v1.gcp_launcher.job_remote_runner": _patch_polling,
        "google_cloud_pipeline_components.container.v1.gcp_launcher.lro_remote_runner": _patch_polling,
    }
    if mount:
        patches["kfp.dsl.types.artifact_types"] = lambda m, undo: _patch_mount(m, undo, mount)
    undo: Undo = []
    for name, patch in list(patches.items()):
        if name in sys.modules:
            patch(sys.modules[name], undo)
            del patches[name]
    finder = WrapExecution({name: _then(patch, undo) for name, patch in patches.items()})
    sys.meta_path.insert(0, finder)
    undo.append((sys.meta_path, None, finder))
    return undo


def restore(undo: Undo) -> None:
    """Undo `install`: the patched attributes get their values back, modules imported later are not patched."""
    for obj, name, value in reversed(undo):
        if name is None:
            obj.remove(value)
        else:
            setattr(obj, name, value)
    undo.clear()


@contextlib.contextmanager
def redirected(grpc_target: str, http_base: str, project: str, mount: str = ""):
    """This process redirected to the double while the block runs."""
    undo = install(grpc_target, http_base, project, mount)
    try:
        yield
    finally:
        restore(undo)


def install_from_env() -> None:
    value = os.environ.get(ENV)
    if value:
        grpc_target, http_base, project = value.split(" ")
        install(grpc_target, http_base, project, os.environ.get(MOUNT_ENV, ""))
