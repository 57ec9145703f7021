"""What runs behind a pod in the double.

- `ProcessPod`: the container as a local process, the way a kubelet would start it from the pod spec: the image's
  ENTRYPOINT (read from the project's Dockerfile, as the image was built) unless the container sets `command`, the
  container's env with `$(VAR)` references expanded, its volumes at host folders (a value that starts with a mount
  path is rewritten to the folder, the pod's own file system), its declared port given a free host port (the pod's
  own network namespace), and its `readinessProbe` polled as the kubelet polls it.
- `PodmanPod`: the container in the project's built image (`make images`) with podman: the same pod spec, the
  volumes bind-mounted, the pod's user and groups; the image tests' kubelet.
- `FakePod`: an in-process HTTP server answering KServe's v1 predict route with what a test scripts, for the steps'
  rollout logic without a TensorFlow process per revision.

Each reports `state()`: "pending", "ready" or "failed: <message>".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from dockerfile_parse import DockerfileParser

from tests.doubles.http import close_http, serve_http
from tests.doubles.k8s.server import send
from tests.helpers.processes import free_port

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def image_config(dockerfile: str) -> dict:
    """ENTRYPOINT, CMD, USER and ENV of the final stage of one of the project's Dockerfiles."""
    parser = DockerfileParser(str(ROOT / "containers" / dockerfile))
    config: dict = {"entrypoint": [], "cmd": [], "user": "0", "env": {}}
    for instruction in parser.structure:
        kind, value = instruction["instruction"], instruction["value"]
        if kind == "FROM":
            config = {"entrypoint": [], "cmd": [], "user": "0", "env": {}}
        elif kind in ("ENTRYPOINT", "CMD"):
            config[kind.lower()] = json.loads(value) if value.startswith("[") else ["sh", "-c", value]
        elif kind == "USER":
            config["user"] = value.split(":")[0]
        elif kind == "ENV":
            config["env"].update(dict(part.split("=", 1) for part in shlex.split(value)))
    return config


def expand(value: str, env: dict) -> str:
    """The kubelet's `$(VAR)` expansion in command, args and env values (`$$` is a literal `$`)."""
    return REFERENCE.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


class Pod:
    """What every pod of the kubelet double has: its home folder and log, its volumes (mount paths -> host folders),
    its declared ports at free host ports (the pod's own network namespace), its readiness probe, and its state."""

    def __init__(self, container: dict, mounts: dict[str, str]):
        self.home = Path(tempfile.mkdtemp(prefix="k8s-double-pod-"))
        self.log_path = self.home / "log"
        self.mounts = dict(mounts)
        ports = [p["containerPort"] for p in container.get("ports") or []]
        self.ports = {port: free_port() for port in ports}
        self.probe = container.get("readinessProbe")
        self.probed = "pending"
        self.stopping = threading.Event()
        self.process: subprocess.Popen

    def host_port(self, value: str) -> str:
        """A declared container port is the pod's host port."""
        for container_port, host_port in self.ports.items():
            if value == str(container_port):
                value = str(host_port)
        return value

    def host_path(self, value: str) -> str:
        """`value` as this machine sees it: each mount path in it (a whole path, or a path in a shell command line)
        is the mounted folder; a declared container port is the pod's host port."""
        for mount, folder in sorted(self.mounts.items(), key=lambda m: -len(m[0])):
            pattern = rf"(?<![\w/.-]){re.escape(mount.rstrip('/'))}(?=/|$|\s|[\"'])"
            value = re.sub(pattern, lambda _, folder=folder: folder, value)
        return self.host_port(value)

    def start_probe(self) -> None:
        threading.Thread(target=self._probe, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", next(iter(self.ports.values()))

    def _probe(self):
        """The kubelet's readiness probe, every 0.2 s until it passes (here: outside the API server's lock)."""
        import requests

        probe = (self.probe or {}).get("httpGet")
        while not self.stopping.is_set() and self.process.poll() is None:
            if probe is None:
                self.probed = "ready"
                return
            try:
                response = requests.get(
                    f"http://127.0.0.1:{self.ports.get(probe['port'], probe['port'])}{probe.get('path', '/')}",
                    timeout=2,
                    proxies={"http": None},
                )
                if 200 <= response.status_code < 400:
                    self.probed = "ready"
                    return
            except requests.RequestException:
                pass
            self.stopping.wait(0.2)

    def state(self) -> str:
        if self.process.poll() is not None and self.probed != "ready":
            return f"failed: container exited with code {self.process.returncode}: {self.log()[-400:]}"
        return self.probed

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stop(self):
        self.stopping.set()
        self.terminate()
        shutil.rmtree(self.home, ignore_errors=True)


def container_env(container: dict, extra_env: dict | None) -> dict:
    env: dict = {}
    for item in container.get("env") or []:
        env[item["name"]] = expand(item.get("value", ""), env)
    return {**env, **(extra_env or {})}


class ProcessPod(Pod):
    def __init__(self, container: dict, image: dict, mounts: dict[str, str], extra_env: dict | None = None):
        """`mounts`: the container's mount paths -> host folders."""
        super().__init__(container, mounts)
        env = {k: self.host_path(v) for k, v in container_env(container, extra_env).items()}
        command = container.get("command") or image["entrypoint"]
        args = container.get("args") if container.get("command") or container.get("args") else image["cmd"]
        argv = [self.host_path(expand(a, env)) for a in [*command, *(args or [])]]
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the image's python is this environment's
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIP_", "HTTP_PROXY", "http_proxy"))}
        self.process = subprocess.Popen(
            argv,
            env={**base, **image["env"], "PATH": path, "PYTHONPATH": str(ROOT), "HOME": str(self.home), **env},
            cwd=self.home,
            stdout=open(self.log_path, "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.start_probe()


class PodmanPod(Pod):
    """The container in the built image (`make images`) with podman, its volumes bind-mounted at their mount paths,
    as the pod's user and groups; on this machine's network, its declared ports at free host ports."""

    def __init__(
        self,
        container: dict,
        image_name: str,
        mounts: dict[str, str],
        extra_env: dict | None = None,
        read_only: set[str] = frozenset(),  # type: ignore[assignment]
        user: str = "",
        groups: tuple[int, ...] = (),
    ):
        from tests.helpers.podman import Container

        super().__init__(container, mounts)
        env = {k: self.host_port(v) for k, v in container_env(container, extra_env).items()}
        args = [self.host_port(expand(a, env)) for a in container.get("args") or []]
        command = [expand(a, env) for a in container.get("command") or []] or None
        self.container = Container(
            image_name,
            args,
            entrypoint=command,
            env=env,
            volumes={folder: path + (":ro" if path in read_only else "") for path, folder in mounts.items()},
            user=user,
            groups=groups,
            log_path=str(self.log_path),
        )
        self.process = self.container.process
        self.start_probe()

    def terminate(self) -> None:
        self.container.stop()


class FakePod:
    """Answers `POST /v1/models/<name>:predict` with `{"predictions": [{"class_id": c}, ...]}`, the class ids
    `classify(instances)` gives; `mode`: "ok", "wrong" (every class id + 1), "error" (HTTP 500), "refuse" (closes
    every connection), "fail" (the revision never becomes ready: its container exits)."""

    def __init__(self, classify, mode: str = "ok", ready_after: float = 0.0):
        self.mode, self.classify, self.requests = mode, classify, []
        self.started = time.monotonic() + ready_after
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                pod.requests.append((self.path, body))
                if pod.mode == "refuse":
                    self.close_connection = True
                    self.connection.close()
                    return
                if pod.mode == "error":
                    status, answer = 500, {"error": "the model server failed"}
                elif not re.fullmatch(r"/v1/models/[^/]+:predict", self.path):
                    status, answer = 404, {"error": f"Not found: {self.path}"}
                else:
                    shift = 1 if pod.mode == "wrong" else 0
                    status = 200
                    answer = {"predictions": [{"class_id": c + shift} for c in pod.classify(body["instances"])]}
                send(self, status, answer)

        self.server = serve_http(Handler)

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.server.server_address[1]

    def state(self) -> str:
        if self.mode == "fail":
            return "failed: container exited with code 1: the model server failed to load the model"
        return "ready" if time.monotonic() >= self.started else "pending"

    def stop(self):
        close_http(self.server)
