"""The models one server serves, as TF Serving's model config does: every model folder of a repository (or only the
names given), or a ModelServerConfig text file. Polled with the versions: a model published (or configured) later
is added, one removed or named in the skip file (`stop-serving --model-name`) is unloaded. Each model has its own
ModelManager (version policy, labels, hot swap); requests for one never wait on another's loading.

Model names follow core.names.model_name (one path segment): a repository's folders with other names are
not served, names given or configured otherwise are refused, and a request for such a name is refused before any
look-up (InvalidName, a ValueError: 400 / INVALID_ARGUMENT)."""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass, field
from typing import Protocol

from core import names as rules
from serving.batching import BatchingOptions
from serving.models import ModelManager, NotFound, Policy, Servable, Transition, VersionStatus

log = logging.getLogger("tfpipe.serving")


@dataclass(frozen=True)
class ModelConfig:
    """One model: its name, its folder of versions (TF Serving's base_path), version policy and labels."""

    name: str
    path: str
    policy: Policy = Policy()
    labels: dict[str, int] = field(default_factory=dict)


class ModelSource(Protocol):
    def configs(self) -> dict[str, ModelConfig]: ...


def model_names(repository: str) -> list[str]:
    """The model folders of a repository (`<repository>/<name>/`) whose names are model names (hidden ones such as
    `.staging` left out)."""
    import tensorflow as tf

    base = repository.rstrip("/")
    try:
        entries = tf.io.gfile.listdir(base)
    except tf.errors.NotFoundError:
        return []
    return sorted(
        e.rstrip("/")
        for e in entries
        if rules.MODEL_NAME.fullmatch(e.rstrip("/"))
        and (e.endswith("/") or tf.io.gfile.isdir(f"{base}/{e}"))  # GCS marks folders
    )


@dataclass(frozen=True)
class Repository:
    """Every model folder of `path` (discovered at each poll), or only `names`; all with one policy and labels."""

    path: str
    names: tuple[str, ...] = ()
    policy: Policy = Policy()
    labels: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        for name in self.names:
            rules.model_name(name, "--model-name")

    def configs(self) -> dict[str, ModelConfig]:
        base = self.path.rstrip("/")
        return {n: ModelConfig(n, f"{base}/{n}", self.policy, self.labels) for n in self.names or model_names(base)}

    def __str__(self) -> str:
        return f"{', '.join(self.names)} from {self.path}" if self.names else f"every model in {self.path}"


@dataclass(frozen=True)
class ModelConfigFile:
    """TF Serving's `--model_config_file`: a ModelServerConfig text proto (`model_config_list { config { name,
    base_path, model_platform, model_version_policy, version_labels } }`), read again at every poll."""

    path: str

    def configs(self) -> dict[str, ModelConfig]:
        import tensorflow as tf
        from google.protobuf import text_format
        from tensorflow_serving.config import model_server_config_pb2

        with tf.io.gfile.GFile(self.path) as f:
            config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
        if config.WhichOneof("config") != "model_config_list":
            raise ValueError("give the models as model_config_list { config { ... } }")
        models: dict[str, ModelConfig] = {}
        for c in config.model_config_list.config:
            where = f"model {c.name!r}"
            if not c.name or not c.base_path or c.name in models:
                raise ValueError(f"{where}: every config needs a name of its own and a base_path")
            rules.model_name(c.name, f"{where}: name")
            if c.model_platform not in ("", "tensorflow"):
                raise ValueError(f"{where}: model_platform {c.model_platform!r} is not served (only tensorflow)")
            models[c.name] = ModelConfig(
                c.name, c.base_path, _policy(c.model_version_policy, where), dict(c.version_labels)
            )
        return models

    def __str__(self) -> str:
        return f"the models of {self.path}"


def _policy(proto, where: str) -> Policy:
    """A FileSystemStoragePathSourceConfig.ServableVersionPolicy as a Policy (none: the latest version)."""
    choice = proto.WhichOneof("policy_choice")
    if choice == "all":
        return Policy("all")
    if choice == "specific":
        if not proto.specific.versions:
            raise ValueError(f"{where}: the specific version policy needs versions")
        return Policy("specific", versions=tuple(proto.specific.versions))
    return Policy("latest", proto.latest.num_versions or 1) if choice == "latest" else Policy()


def read_names(path: str) -> set[str]:
    """The model names in a skip file, one a line (none when it does not exist)."""
    try:
        with open(path) as f:
            return {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        return set()


def settle_heap() -> None:
    """Collect garbage once (a full pass), then keep every object alive now out of the cyclic garbage collector's
    passes (`gc.freeze`): a loaded TensorFlow model leaves a great many long-lived objects on the heap, which every
    collection that parsing a request's JSON triggers would otherwise walk. Objects frozen here that become garbage
    later (an unloaded version) are collected at the next settle."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@dataclass
class ServedModels:
    """The served models by name; `poll()` once, or `start()` a polling thread."""

    source: ModelSource
    poll_seconds: float = 1.0
    batching: BatchingOptions | None = None
    skip_file: str = ""  # names not to serve, one a line, read at every poll
    transition: Transition = "availability-preserving"  # every model's (serving.models)
    _managers: dict[str, ModelManager] = field(default_factory=dict)  # replaced, never changed: read without a lock
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _changed: bool = False  # the last poll loaded or unloaded a version: the next settles the heap

    def poll(self) -> None:
        """Unload the models no longer wanted, add the new ones (loaded before they take requests), and poll every
        model's versions. A failing source raises; a failing model is logged and the others go on. The poll after one
        that loaded or unloaded a version settles the heap (`settle_heap`): requests still holding an unloaded
        version have finished by then."""
        before = self._loaded()
        try:
            self._poll()
        finally:
            if self._changed:
                settle_heap()
            self._changed = self._loaded() != before

    def _loaded(self) -> set[tuple[str, int]]:
        return {(name, version) for name, m in self._managers.items() for version in m.loaded()}

    def _poll(self) -> None:
        skipped = read_names(self.skip_file) if self.skip_file else set()
        wanted = {n: c for n, c in self.source.configs().items() if n not in skipped}
        for name in self._managers.keys() - wanted.keys():
            self._remove(name)
        for name, config in wanted.items():
            try:
                self._update(config)
            except Exception:  # noqa: BLE001 (a transient file-system error must not stop the other models)
                log.exception("polling model %s failed", name)

    def _update(self, config: ModelConfig) -> None:
        current = self._managers.get(config.name)
        if current is not None and current.path == config.path:
            current.policy, current.labels = config.policy, dict(config.labels)
            current.poll()
            return
        manager = ModelManager(
            config.name, config.path, config.policy, dict(config.labels), self.batching, self.transition
        )
        manager.poll()
        self._managers = {**self._managers, config.name: manager}
        log.info("serving model %s from %s", config.name, config.path)
        if current is not None:
            current.unload()

    def _remove(self, name: str) -> None:
        manager = self._managers[name]
        self._managers = {n: m for n, m in self._managers.items() if n != name}
        manager.unload()  # requests holding a version finish on it
        log.info("stopped serving model %s", name)

    def start(self) -> None:
        self.poll()
        settle_heap()
        self._changed = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="model-poller")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 (a transient error, or a config file being edited: try again)
                log.exception("polling %s failed", self.source)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        for name in list(self._managers):
            self._remove(name)

    def names(self) -> list[str]:
        return sorted(self._managers)

    def ready(self) -> bool:
        """Every model has a version loaded (Vertex's health check)."""
        return bool(self._managers) and all(m.ready() for m in self._managers.values())

    def resolve(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        manager = self._managers.get(rules.model_name(name, "model name"))
        if manager is None:
            wanted = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise NotFound(f"Servable not found for request: {wanted}")
        return manager.resolve(version, label)

    def status(self, name: str, version: int | None = None, label: str | None = None) -> list[VersionStatus]:
        manager = self._managers.get(rules.model_name(name, "model name"))
        if manager is None:
            raise NotFound(f"Could not find any versions of model {name}")
        return manager.status(version, label)
