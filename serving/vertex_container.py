"""Entry point of the serving image (containers/serving.Dockerfile): the model server under Vertex AI's
custom-container contract, configured by the environment only:

  AIP_STORAGE_URI        required: the SavedModel's directory (`saved_model.pb` at its root), gs:// or local
  AIP_HTTP_PORT          the port, on 0.0.0.0 (default 8080)
  AIP_HEALTH_ROUTE       GET: 200 once the model is loaded, 503 before
  AIP_PREDICT_ROUTE      POST {"instances": [...]} -> {"predictions": [...], "deployedModelId": ...}
  AIP_ENDPOINT_ID, AIP_DEPLOYED_MODEL_ID
                         `deployedModelId` in answers, and the routes when their variables are unset:
                         /v1/endpoints/ENDPOINT/deployedModels/DEPLOYED_MODEL[:predict] (/health, /predict without ids)
  TFPIPE_MAX_REQUEST_BYTES
                         the largest request body (default 64 MiB): Vertex's batch prediction sends `batch_size`
                         instances a request straight to the container, past the online endpoints' 1.5 MB limit

The server listens at once (Vertex's liveness probe restarts a container whose port stays closed for about 40
seconds) and serves the model, copied into a local model repository, once it loads. HTTP only (Vertex forwards no
gRPC); batching on, as in the local deploy step. Exits non-zero, the reason on stderr, when AIP_STORAGE_URI is unset
or holds no saved_model.pb, or the download or the load fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from core.storage import download, gcs_client, is_gcs, split_gcs

log = logging.getLogger("tfpipe.serving")

MODEL_NAME = "model"  # the name in the local repository (TF Serving's /v1/models/model/... routes also answer)
VERSION = 1
DEFAULT_PORT = 8080
MAX_REQUEST_BYTES = 64 * 2**20
LOAD_CHECK_SECONDS = 0.1


def vertex_routes(endpoint_id: str, deployed_model_id: str) -> tuple[str, str]:
    """The health and predict routes Vertex AI gives a deployed model's container."""
    route = f"/v1/endpoints/{endpoint_id}/deployedModels/{deployed_model_id}"
    return route, f"{route}:predict"


class ContainerError(Exception):
    """A configuration or model problem: reported on stderr, exit status 1."""


@dataclass(frozen=True)
class Settings:
    storage_uri: str
    port: int
    health_route: str
    predict_route: str
    deployed_model_id: str
    max_request_bytes: int = MAX_REQUEST_BYTES

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Vertex's variables (read by hand, not with pydantic-settings: the routes' defaults depend on two ids)."""
        uri = environ.get("AIP_STORAGE_URI", "").strip()
        if not uri:
            raise ContainerError(
                "AIP_STORAGE_URI is not set: it must name the SavedModel's directory "
                "(gs://BUCKET/PATH or a local path holding saved_model.pb)"
            )
        try:
            port = int(environ.get("AIP_HTTP_PORT") or DEFAULT_PORT)
        except ValueError:
            raise ContainerError(f"AIP_HTTP_PORT must be a port number, got {environ['AIP_HTTP_PORT']!r}") from None
        limit = environ.get("TFPIPE_MAX_REQUEST_BYTES") or str(MAX_REQUEST_BYTES)
        if not limit.isdigit() or int(limit) < 1:
            raise ContainerError(f"TFPIPE_MAX_REQUEST_BYTES must be a positive number of bytes, got {limit!r}")
        endpoint, deployed = environ.get("AIP_ENDPOINT_ID", ""), environ.get("AIP_DEPLOYED_MODEL_ID", "")
        health, predict = vertex_routes(endpoint, deployed) if endpoint and deployed else ("/health", "/predict")
        return cls(
            uri.removeprefix("file://"),
            port,
            environ.get("AIP_HEALTH_ROUTE") or health,
            environ.get("AIP_PREDICT_ROUTE") or predict,
            deployed,
            int(limit),
        )


def check_model(uri: str) -> None:
    """Fail fast (before listening) when `uri` holds no saved_model.pb at its root."""
    if is_gcs(uri):
        bucket, prefix = split_gcs(uri)
        name = f"{prefix.rstrip('/')}/saved_model.pb" if prefix.strip("/") else "saved_model.pb"
        try:
            found = gcs_client().bucket(bucket).get_blob(name) is not None
        except Exception as e:  # noqa: BLE001 (credentials, permissions, a missing bucket: all reported the same way)
            raise ContainerError(f"cannot read {uri}: {type(e).__name__}: {e}") from None
    else:
        found = os.path.isfile(os.path.join(uri, "saved_model.pb"))
    if not found:
        raise ContainerError(
            f"AIP_STORAGE_URI {uri} holds no saved_model.pb: it must be the SavedModel's "
            "directory (saved_model.pb, variables/, assets.extra/ directly under it)"
        )


def place_model(uri: str, version_dir: str) -> None:
    """Put the SavedModel at `version_dir` in one step (the poller never sees half a version): a gs:// directory is
    downloaded beside it and renamed; a local one is linked."""
    if not is_gcs(uri):
        os.symlink(os.path.abspath(uri), version_dir)
        return
    partial = os.path.join(os.path.dirname(version_dir), f".{VERSION}.partial")  # not a version: the poller skips it
    os.makedirs(partial)
    download(uri.rstrip("/") + "/", partial)
    os.rename(partial, version_dir)


async def _wait_loaded(models, serving: asyncio.Task) -> None:
    from serving.models import NotFound

    while not models.ready() and not serving.done():
        try:
            (status,) = models.status(MODEL_NAME, VERSION)
        except NotFound:  # not polled yet
            status = None
        if status is not None and status.error_code != "OK":
            raise ContainerError(f"the SavedModel failed to load: {status.error_message}")
        await asyncio.sleep(LOAD_CHECK_SECONDS)


async def _run(server, models, uri: str, version_dir: str) -> int:
    serving = asyncio.create_task(server.serve())
    try:
        await asyncio.to_thread(place_model, uri, version_dir)
        log.info("copied %s to %s", uri, version_dir)
        await _wait_loaded(models, serving)
    except Exception as e:  # noqa: BLE001 (download or load failure: the container must not sit unhealthy)
        print(
            f"error: {e if isinstance(e, ContainerError) else f'cannot copy {uri}: {type(e).__name__}: {e}'}",
            file=sys.stderr,
            flush=True,
        )
        while not server.rest_port and not serving.done():  # stop() needs the HTTP server created
            await asyncio.sleep(0.05)
        server.stop()
        await serving
        return 1
    await serving
    return 0


def _stopped(signum, frame):
    raise SystemExit(0)  # a requested stop: unwind, so that the local copy of the model is removed


def main(environ: Mapping[str, str] = os.environ) -> int:
    try:
        settings = Settings.from_environ(environ)
        check_model(settings.storage_uri)
    except ContainerError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    from serving.batching import BatchingOptions
    from serving.repository import Repository, ServedModels
    from serving.server import ModelServer, ServerOptions, run, set_tensorflow_threads

    # Vertex stops the container with SIGTERM. While serving, uvicorn takes the signal over, shuts down gracefully,
    # then raises it again, into this handler.
    signal.signal(signal.SIGTERM, _stopped)
    set_tensorflow_threads()  # TensorFlow's default pools; their threads spin only above 2 CPUs
    repository = tempfile.mkdtemp(prefix="tfpipe-serving-")
    try:
        os.makedirs(os.path.join(repository, MODEL_NAME))
        models = ServedModels(
            Repository(repository, (MODEL_NAME,)), batching=BatchingOptions(max_batch_size=32, timeout_s=0.0)
        )
        server = ModelServer(
            models,
            ServerOptions(
                host="0.0.0.0",
                rest_port=settings.port,
                grpc_port=-1,
                health_route=settings.health_route,
                predict_route=settings.predict_route,
                deployed_model_id=settings.deployed_model_id,
                max_request_bytes=settings.max_request_bytes,
            ),
        )
        log.info(
            "health %s, predict %s; copying %s", settings.health_route, settings.predict_route, settings.storage_uri
        )
        return run(_run(server, models, settings.storage_uri, os.path.join(repository, MODEL_NAME, str(VERSION))))
    finally:
        shutil.rmtree(repository, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
