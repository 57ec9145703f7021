"""A kubelet for the operator doubles: a pod spec (validated against Kubernetes 1.32's Pod schema) run as a local
process (`pods.ProcessPod`), its PersistentVolumeClaims at host folders, its emptyDirs at fresh ones.

The claim's owner matters as on a node: a fresh volume's root belongs to root (0755), and a container that runs as
another user (the image's USER, or the pod's `runAsUser`) can write to it only when the pod sets `fsGroup` (the
kubelet then gives the volume to that group) or the claim was handed to that user before. Such a container fails
here at once with `Permission denied`, as it would at its first write there.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass

from tests.k8s_double import schema
from tests.k8s_double.pods import ProcessPod, image_config


@dataclass
class Claim:
    path: str
    owner: int = 0  # uid owning the volume's root


class Kubelet:
    def __init__(self, claims: dict[str, Claim], images: dict[str, str]):
        """`images`: image names -> the project's Dockerfiles they are built from."""
        self.claims, self.images = claims, images

    def image(self, name: str) -> dict:
        if name not in self.images:
            raise LookupError(f'Failed to pull image "{name}": not in any registry the node can reach')
        return image_config(self.images[name])

    def start(self, pod: dict, container_name: str, extra_env: dict | None = None) -> ProcessPod:
        errors = schema.core_errors(pod)
        if errors:
            raise AssertionError(f"the pod {pod['metadata'].get('name')} is invalid: {'; '.join(errors)}")
        spec = pod["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == container_name]
        image = self.image(container["image"])
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
