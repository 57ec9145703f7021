"""Model versions of one served model: discovery in its folder, version policy, loading with warmup, graceful
transition and labels (TF Serving's AspiredVersionsManager behaviour); `serving.repository` polls them.

Two transitions, TF Serving's aspired-version policies. Availability-preserving (the default): a new version is
loaded and warmed up before it is published; the versions the version policy no longer wants are unloaded only
after that, and requests that already hold a version finish on it. Resource-preserving, for a model that does not
fit in memory twice: the versions no longer wanted are unloaded first, then the new one loads; in between a
request finds no version (`NotFound`, TF Serving's "Servable not found for request"), and a new version that fails
to load leaves the model unavailable. Rolling back = deleting the newest version directory: the previous one loads
again and takes over the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from core.warmup import WARMUP_FILE
from serving import codec
from serving.batching import Batcher, BatchingOptions

log = logging.getLogger("tfpipe.serving")

MAX_WARMUP_RECORDS = 1000
DEFAULT_SIGNATURE = "serving_default"


class NotFound(LookupError):
    """Unknown model, version, label or signature (HTTP 404, gRPC NOT_FOUND)."""


@dataclass
class VersionStatus:
    version: int
    state: str = "START"  # START, LOADING, AVAILABLE, UNLOADING, END (TF Serving's ModelVersionStatus.State)
    error_code: str = "OK"
    error_message: str = ""


Transition = Literal["availability-preserving", "resource-preserving"]


@dataclass(frozen=True)
class Policy:
    """Which versions to serve: the newest `latest` ones, `all`, or `specific` versions."""

    kind: Literal["latest", "all", "specific"] = "latest"
    latest: int = 1
    versions: tuple[int, ...] = ()

    def aspired(self, available: list[int]) -> set[int]:
        if self.kind == "all":
            return set(available)
        if self.kind == "specific":
            return set(available) & set(self.versions)
        return set(sorted(available)[-self.latest :])


def flat_call(fn):
    """`{input name: array} -> {output name: tensor}` for a loaded signature. A one-input signature is called through
    its flat function (`ConcreteFunction._call_flat` with its captured inputs), skipping the structured call's
    argument binding and spec casts, which `codec.check_arrays` has done; otherwise, or when TensorFlow has no such
    method, the structured call."""
    import tensorflow as tf

    args, kwargs = fn.structured_input_signature
    flat = getattr(fn, "_call_flat", None)
    if args or len(kwargs) != 1 or flat is None:
        return lambda arrays: fn(**{n: tf.constant(a) for n, a in arrays.items()})
    (name,) = kwargs
    return lambda arrays: flat([tf.constant(arrays[name])], fn.captured_inputs)


class Servable:
    """One loaded version: its signatures, their input specs and (optionally) batchers."""

    def __init__(self, version: int, path: str, batching: BatchingOptions | None):
        import tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2
        from tensorflow_serving.apis import get_model_metadata_pb2

        self.version, self.path = version, path
        self._model = tf.saved_model.load(path)
        self.signatures = dict(self._model.signatures)
        self.inputs = {name: codec.signature_inputs(fn) for name, fn in self.signatures.items()}
        proto = saved_model_pb2.SavedModel()
        with tf.io.gfile.GFile(f"{path}/saved_model.pb", "rb") as f:
            proto.ParseFromString(f.read())
        self.signature_defs = get_model_metadata_pb2.SignatureDefMap(signature_def=proto.meta_graphs[0].signature_def)
        self._batchers = {name: Batcher(self._runner(name), batching) for name in self.signatures} if batching else {}

    def _runner(self, signature: str):
        call = flat_call(self.signatures[signature])

        def run(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: v.numpy() for k, v in call(arrays).items()}

        return run

    def signature(self, name: str) -> dict[str, codec.TensorInfo]:
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise NotFound(
                f'Serving signature name: "{name}" not found in signature def (available: {sorted(self.signatures)})'
            )
        return self.inputs[name]

    def predict_future(
        self, arrays: dict[str, np.ndarray], signature: str = "", executor: Executor | None = None
    ) -> Future:
        """A Future of the outputs: queued for the batcher when batching is on, else submitted to `executor`, or
        computed inline without one (serving.dispatch chooses)."""
        name = signature or DEFAULT_SIGNATURE
        codec.check_arrays(arrays, self.signature(name))
        if name in self._batchers:
            return self._batchers[name].submit(arrays)
        if executor is not None:
            return executor.submit(self._runner(name), arrays)
        future: Future = Future()
        try:
            future.set_result(self._runner(name)(arrays))
        except Exception as e:  # noqa: BLE001 (delivered to the caller)
            future.set_exception(e)
        return future

    def predict(self, arrays: dict[str, np.ndarray], signature: str = "") -> dict[str, np.ndarray]:
        return self.predict_future(arrays, signature).result()

    def close(self) -> None:
        for batcher in self._batchers.values():
            batcher.close()


@dataclass
class ModelManager:
    """Serves the versions in `path` (`<repository>/<name>/<version>/`); `poll()` applies the policy once."""

    name: str
    path: str
    policy: Policy = Policy()
    labels: dict[str, int] = field(default_factory=dict)
    batching: BatchingOptions | None = None
    transition: Transition = "availability-preserving"
    _servables: dict[int, Servable] = field(default_factory=dict)
    _status: dict[int, VersionStatus] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def on_disk(self) -> dict[int, str]:
        """Loadable versions: {version: directory}; directory names may have leading zeros (`0002`)."""
        import tensorflow as tf

        root = self.path.rstrip("/")
        try:
            entries = [e.rstrip("/") for e in tf.io.gfile.listdir(root)]
        except tf.errors.NotFoundError:
            return {}
        return {
            int(e): f"{root}/{e}"
            for e in sorted(entries)
            if e.isdigit() and tf.io.gfile.exists(f"{root}/{e}/saved_model.pb")
        }

    def poll(self) -> None:
        """Apply the version policy with the transition: availability-preserving loads the versions it wants, then
        unloads the others (never serving nothing in between); resource-preserving unloads first, then loads."""
        found = self.on_disk()
        aspired = self.policy.aspired(list(found))
        failed = {v for v, s in self._status.items() if s.error_code != "OK"}  # not retried, as in TF Serving
        new = sorted(aspired - set(self._servables) - failed, reverse=True)  # the highest first, as in TF Serving
        if self.transition == "resource-preserving":
            for version in set(self._servables) - aspired:
                self._unload(version)
            for version in new:
                self._load(version, found[version])
            return
        for version in new:
            self._load(version, found[version])
        if not aspired & set(self._servables):
            return  # nothing new could load: keep serving what is loaded (a broken newest version never wins)
        for version in set(self._servables) - aspired:
            self._unload(version)

    def _load(self, version: int, path: str) -> None:
        status = self._status[version] = VersionStatus(version, "LOADING")
        started = time.time()
        try:
            servable = Servable(version, path, self.batching)
            warmed = warmup(servable)
        except Exception as e:  # noqa: BLE001 (recorded in the version's status, like TF Serving)
            status.error_message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log.error("failed to load %s version %d: %s", self.name, version, status.error_message)
            status.state, status.error_code = "END", "UNKNOWN"  # after the message and its line, as AVAILABLE
            return
        with self._lock:
            self._servables[version] = servable
        log.info(
            "loaded %s version %d in %.1fs (%d warmup requests)", self.name, version, time.time() - started, warmed
        )
        status.state = "AVAILABLE"  # after its line: a client that saw AVAILABLE finds it in the log

    def _unload(self, version: int) -> None:
        self._status[version].state = "UNLOADING"
        with self._lock:
            servable = self._servables.pop(version)
        servable.close()  # requests holding it finish; it is freed with their last reference
        self._status[version].state = "END"
        log.info("unloaded %s version %d", self.name, version)

    def unload(self) -> None:
        """Unload every version (the model is no longer served)."""
        for version in list(self._servables):
            self._unload(version)

    def ready(self) -> bool:
        return bool(self._servables)

    def loaded(self) -> frozenset[int]:
        """The versions loaded now."""
        return frozenset(self._servables)

    def resolve(self, version: int | None = None, label: str | None = None) -> Servable:
        """The servable a request names: a version, a label's version, or the newest loaded one."""
        with self._lock:
            if label is not None:
                version = self._labelled(label)
                if version not in self._servables:
                    raise NotFound(f"label '{label}' points at version {version}, which is not available")
            if version is not None:
                if version not in self._servables:
                    raise NotFound(f"Servable not found for request: Specific({self.name}, {version})")
                return self._servables[version]
            if not self._servables:
                raise NotFound(f"Servable not found for request: Latest({self.name})")
            return self._servables[max(self._servables)]

    def _labelled(self, label: str) -> int:
        if label not in self.labels:
            raise NotFound(f"Unrecognized servable version label: {label}")
        return self.labels[label]

    def status(self, version: int | None = None, label: str | None = None) -> list[VersionStatus]:
        if label is not None:
            version = self._labelled(label)
        if version is not None:
            if version not in self._status:
                raise NotFound(f"Could not find version {version} of model {self.name}")
            return [self._status[version]]
        if not self._status:
            raise NotFound(f"Could not find any versions of model {self.name}")
        return sorted(self._status.values(), key=lambda s: -s.version)


def warmup(servable: Servable) -> int:
    """Replay `assets.extra/tf_serving_warmup_requests` (PredictionLog TFRecords, predict logs only, ≤ 1000)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from serving import tensors

    path = f"{servable.path}/{WARMUP_FILE}"
    if not tf.io.gfile.exists(path):
        return 0
    count = 0
    for record in tf.data.TFRecordDataset(path).take(MAX_WARMUP_RECORDS):
        entry = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        if entry.WhichOneof("log_type") != "predict_log":
            raise ValueError(f"unsupported warmup record {entry.WhichOneof('log_type')}: only predict_log is supported")
        request = entry.predict_log.request
        servable.predict({k: tensors.to_array(v) for k, v in request.inputs.items()}, request.model_spec.signature_name)
        count += 1
    return count
