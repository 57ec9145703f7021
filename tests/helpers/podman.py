"""The project's images run with podman, as `make images` built them (containers/images.sh: the same podman
settings and storage). Containers share the host's network (`--network host`): a free host port stands in for a
pod's or a replica's own address."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG = os.environ.get("TFPIPE_IMAGE_TAG", "dev")
ENVIRON = {**os.environ, "CONTAINERS_CONF": str(ROOT / "containers" / "podman.conf")}


def image(name: str) -> str:
    """The local tag of one of the project's images: components, trainer, serving, trainer-gpu or serving-gpu."""
    return f"localhost/tfpipe/{name}:{TAG}"


PODMAN = ["podman", "--storage-driver", "overlay"]


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PODMAN, *args],
        env=ENVIRON,
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def missing_images(names) -> list[str]:
    return [image(n) for n in names if podman("image", "exists", image(n), check=False).returncode != 0]


class Container:
    """One `podman run` in the foreground: the container's output goes to `log_path`."""

    def __init__(
        self,
        image_name: str,
        args: list[str] = (),  # type: ignore[assignment]
        *,
        entrypoint: list[str] | None = None,
        env: dict[str, str] | None = None,
        volumes: dict[str, str] | None = None,
        user: str = "",
        groups: tuple[int, ...] = (),
        log_path: str | None = None,
    ):
        """`volumes`: host folder -> container path (`:ro` appended for a read-only mount)."""
        self.name = f"tfpipe-test-{uuid.uuid4().hex[:12]}"
        self.log_path = log_path or tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")[1]
        command = [*PODMAN, "run", "--rm", "--network", "host", "--name", self.name]
        for key, value in (env or {}).items():
            command += ["--env", f"{key}={value}"]
        for host, inside in (volumes or {}).items():
            command += ["--volume", f"{host}:{inside}"]
        if user:
            command += ["--user", user]
        for group in groups:
            command += ["--group-add", str(group)]
        if entrypoint is not None:
            command += ["--entrypoint", json.dumps(entrypoint)]
        command += [image_name, *args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, env=ENVIRON, stdout=log, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 600) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, grace: int = 20) -> None:
        """As the kubelet or Vertex stops a container: SIGTERM, then SIGKILL after `grace` seconds."""
        if self.process.poll() is None:
            podman("stop", "--time", str(grace), self.name, check=False, timeout=grace + 60)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run(image_name: str, args: list[str] = (), timeout: float = 600, **options) -> tuple[int, str]:  # type: ignore[assignment]
    """Run a container to its end; its exit code and output."""
    container = Container(image_name, list(args), **options)
    code = container.wait(timeout)
    return code, container.log()


IMPORT_ALL = """
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
"""


def failed_imports(name: str, modules: list[str]) -> dict[str, str]:
    """The modules of `modules` that fail to import in the image `name`, as the image's user: their errors."""
    code, out = run(image(name), ["-c", IMPORT_ALL, *modules], entrypoint=["python"])
    assert code == 0, out
    return json.loads(out.strip().splitlines()[-1])
