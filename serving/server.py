"""The model server: REST (Starlette on uvicorn, on an event loop) and gRPC (gRPC's thread-pool server) over the
served models."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from dataclasses import dataclass, field

import uvicorn

from core.cpus import available_cpus
from serving import grpc_service, ports, rest
from serving.dispatch import Dispatcher
from serving.repository import ServedModels
from serving.tls import SslConfig, server_context

log = logging.getLogger("tfpipe.serving")


def run(main):
    """`asyncio.run(main)` on uvloop when it is installed (it is, with uvicorn[standard]): its transports write in C,
    where asyncio's default loop writes each response in Python."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def set_tensorflow_threads(intra_op: int = 0, inter_op: int = 0, spin_wait: bool | None = None) -> None:
    """TensorFlow's thread pools (TF Serving's --tensorflow_intra_op_parallelism / --tensorflow_inter_op_parallelism;
    0: TensorFlow's default, one thread per CPU). Before any model loads. Small models answer single requests faster
    on one thread each: a pool's hand-offs cost more than the kernels (see bench.serving, `model_call_ms`).
    `spin_wait`: whether a pool's idle threads spin before they sleep (TensorFlow's default; None: only above 2
    usable CPUs, `default_spin_wait`)."""
    import tensorflow as tf

    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    if spin_wait is None:
        spin_wait = default_spin_wait(available_cpus())
    if not spin_wait:
        from tensorflow.core.protobuf import config_pb2
        from tensorflow.python.eager import context

        # ConfigProto.experimental.disable_thread_spinning, read when the eager runtime starts (no public setter)
        config = config_pb2.ConfigProto()
        config.CopyFrom(context.context()._config or config)
        config.experimental.disable_thread_spinning = True
        context.context()._config = config


def default_spin_wait(cpus: int) -> bool:
    """Whether TensorFlow's idle pool threads spin on `cpus` usable CPUs: not up to 2, where a spinning thread takes
    the CPU that the request path and the other requests need (see bench.serving: ours, default threads, 16
    clients)."""
    return cpus > 2


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    rest_port: int = 8501  # 0: any free port
    grpc_port: int = 8500  # 0: any free port; -1: no gRPC
    max_request_bytes: int = 1_500_000
    health_route: str = "/health"
    predict_route: str = "/predict"
    deployed_model_id: str = ""
    ready_file: str = ""  # JSON with the pid, bound addresses and aspired-version policy, written once serving
    request_threads: int = 0  # REST model calls, serving.dispatch: 0 one per usable CPU, 1 all on the event loop
    grpc_threads: int = 0  # gRPC worker threads; 0: two per usable CPU, at least the batch size when batching
    ssl: SslConfig | None = None  # TLS on both APIs (serving.tls); None: plaintext


@dataclass
class ModelServer:
    models: ServedModels
    options: ServerOptions = field(default_factory=ServerOptions)
    rest_port: int = 0
    grpc_port: int = 0
    _uvicorn: uvicorn.Server | None = None
    _started: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: BaseException | None = None

    @property
    def rest_url(self) -> str:
        return f"{'https' if self.options.ssl else 'http'}://{self.options.host}:{self.rest_port}"

    @property
    def grpc_target(self) -> str:
        return f"{self.options.host}:{self.grpc_port}" if self.grpc_port > 0 else ""

    async def serve(self) -> None:
        """Check the ports, load the models, start both servers, serve until stopped (SIGINT/SIGTERM or `stop()`)."""
        o = self.options
        ports.check_ports(o.host, o.rest_port, o.grpc_port)
        await asyncio.to_thread(self.models.start)
        dispatcher = Dispatcher(o.request_threads)
        grpc_server = None
        if o.grpc_port >= 0:
            grpc_server, self.grpc_port = grpc_service.create_server(
                self.models, o.host, o.grpc_port, self.grpc_worker_threads(), o.ssl
            )
            grpc_server.start()
        app = rest.create_app(
            self.models, dispatcher, o.max_request_bytes, o.health_route, o.predict_route, o.deployed_model_id
        )
        context = server_context(o.ssl) if o.ssl else None
        config = uvicorn.Config(
            app,
            ssl_context_factory=(lambda _config, _default: context) if context else None,
            host=o.host,
            port=o.rest_port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=10,
        )
        self._uvicorn = uvicorn.Server(config)
        serving = asyncio.create_task(self._uvicorn.serve())
        while not self._uvicorn.started and not serving.done():
            await asyncio.sleep(0.01)
        try:
            if self._uvicorn.started:
                self.rest_port = self._uvicorn.servers[0].sockets[0].getsockname()[1]
                self._announce()
            await serving
        finally:
            if grpc_server:
                await asyncio.to_thread(lambda: grpc_server.stop(grace=5).wait())
            await asyncio.to_thread(dispatcher.close)
            await asyncio.to_thread(self.models.stop)
            self._started.set()

    def grpc_worker_threads(self) -> int:
        """`grpc_threads`, or two per usable CPU; with batching, enough for a full batch (a thread waits while its
        request is in a batch)."""
        if self.options.grpc_threads:
            return self.options.grpc_threads
        batching = self.models.batching
        return max(2 * available_cpus(), batching.max_batch_size if batching else 0)

    def _announce(self) -> None:
        info = {
            "pid": os.getpid(),
            "rest_url": self.rest_url,
            "grpc_target": self.grpc_target,
            "aspired_version_policy": self.models.transition,
        }
        tls = "off" if not self.options.ssl else "mutual" if self.options.ssl.client_verify else "on"
        log.info(
            "serving %s: REST %s, gRPC %s, TLS %s", self.models.source, self.rest_url, self.grpc_target or "off", tls
        )
        if self.options.ready_file:
            tmp = f"{self.options.ready_file}.tmp"
            with open(tmp, "w") as f:
                json.dump(info, f)
            os.replace(tmp, self.options.ready_file)
        self._started.set()

    def start(self, timeout: float = 120) -> ModelServer:
        """Serve from a background thread (tests, benchmarks); returns once both ports are bound."""

        def serve_in_thread():
            try:
                run(self.serve())
            except BaseException as e:  # noqa: BLE001 (re-raised in start())
                self._error = e
                self._started.set()

        self._thread = threading.Thread(target=serve_in_thread, daemon=True, name="model-server")
        self._thread.start()
        if not self._started.wait(timeout) or self._error or not self.rest_port:
            raise RuntimeError(f"the model server did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._uvicorn:
            self._uvicorn.should_exit = True
        if self._thread:
            self._thread.join(timeout=30)
