"""A kubelet for the operator doubles: a pod spec (validated against Kubernetes 1.32's Pod schema) run as a local
process (`pods.ProcessPod`), its PersistentVolumeClaims at host folders, its emptyDirs at fresh ones.

The claim's owner matters as on a node: a fresh volume's root belongs to root (0755), and a container that runs as
another user (the image's USER, or the pod's `runAsUser`) can write to it only when the pod sets `fsGroup` (the
kubelet then gives the volume to that group) or the claim was handed to that user before. Such a container fails
here at once with `Permission denied`, as it would at its first write there.

With `runtime="podman"` the containers are the built images (`pods.PodmanPod`), and the owners are real: the claim's
folder is bind-mounted as it is, `fsGroup` gives it to that group as the kubelet does (group-owned, group-writable,
set-group-id folders) and adds the group to the container's, and an emptyDir is writable by every user.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.doubles.k8s import schema
from tests.doubles.k8s.pods import PodmanPod, ProcessPod, image_config


@dataclass
class Claim:
    path: str
    owner: int = 0  # uid owning the volume's root


def give_to_group(folder: str, gid: int) -> None:
    """The kubelet's fsGroup ownership change (OnRootMismatch: only when the volume's root is not the group's yet)."""
    if os.stat(folder).st_gid == gid:
        return
    for path in [Path(folder), *Path(folder).rglob("*")]:
        os.chown(path, -1, gid, follow_symlinks=False)
        if not path.is_symlink():
            os.chmod(path, path.stat().st_mode | 0o060 | (0o2010 if path.is_dir() else 0))


class Kubelet:
    def __init__(self, claims: dict[str, Claim], images: dict[str, str], runtime: str = "process"):
        """`images`: image names -> the project's Dockerfiles they are built from (`runtime="process"`), or the
        built images' local names (`runtime="podman"`)."""
        self.claims, self.images, self.runtime = claims, images, runtime

    def image(self, name: str) -> str:
        """What image `name` is here (a Dockerfile or a built image's name), or the pull fails."""
        if name not in self.images:
            raise LookupError(f'Failed to pull image "{name}": not in any registry the node can reach')
        return self.images[name]

    def start(self, pod: dict, container_name: str, extra_env: dict | None = None) -> ProcessPod | PodmanPod:
        errors = schema.core_errors(pod)
        if errors:
            raise AssertionError(f"the pod {pod['metadata'].get('name')} is invalid: {'; '.join(errors)}")
        spec = pod["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == container_name]
        if self.runtime == "podman":
            return self._podman(spec, container, extra_env)
        image = image_config(self.image(container["image"]))
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts, blocked = {}, []
        security = spec.get("securityContext") or {}
        user = int((container.get("securityContext") or {}).get("runAsUser", security.get("runAsUser", image["user"])))
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "persistentVolumeClaim" in volume:
                claim = self.claims[volume["persistentVolumeClaim"]["claimName"]]
                folder = claim.path + (f"/{mount['subPath']}" if mount.get("subPath") else "")
                writable = user in (0, claim.owner) or "fsGroup" in security or mount.get("readOnly")
                if not writable:
                    blocked.append(mount["mountPath"])
            else:
                folder = tempfile.mkdtemp(prefix="k8s-double-volume-")
            mounts[mount["mountPath"]] = folder
        if blocked:
            message = (
                f"PermissionError: [Errno 13] Permission denied: '{blocked[0]}' (uid {user} on a volume owned by "
                "root, and the pod sets no fsGroup)"
            )
            container = {
                **container,
                "command": [sys.executable, "-c", f"import sys; sys.exit({message!r})"],
                "args": [],
            }
        return ProcessPod(container, image, mounts, extra_env)

    def _podman(self, spec: dict, container: dict, extra_env: dict | None) -> PodmanPod:
        if container["image"] not in self.images:
            raise LookupError(f'Failed to pull image "{container["image"]}": not in any registry the node can reach')
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        security = spec.get("securityContext") or {}
        mounts, read_only = {}, set()
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if mount.get("readOnly"):
                read_only.add(mount["mountPath"])
            if "persistentVolumeClaim" in volume:
                folder = self.claims[volume["persistentVolumeClaim"]["claimName"]].path
                if "fsGroup" in security:
                    give_to_group(folder, security["fsGroup"])
                folder += f"/{mount['subPath']}" if mount.get("subPath") else ""
            else:
                folder = tempfile.mkdtemp(prefix="k8s-double-volume-")
                os.chmod(folder, 0o777)
            mounts[mount["mountPath"]] = folder
        user = (container.get("securityContext") or {}).get("runAsUser", security.get("runAsUser"))
        return PodmanPod(
            container,
            self.image(container["image"]),
            mounts,
            extra_env,
            read_only=read_only,
            user="" if user is None else str(user),
            groups=(security["fsGroup"],) if "fsGroup" in security else (),
        )
