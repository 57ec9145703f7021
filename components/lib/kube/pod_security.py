"""The security contexts of every pod the kubeflow engine steps create, as Pod Security Standards' `restricted`
profile (Kubernetes 1.32) requires them: a non-root user (the images' `IMAGE_UID`, numeric, so that the kubelet
can check it), the runtime's default seccomp profile, no privilege escalation, every capability dropped; and
`fsGroup` so that the shared volume is writable by that user without root (`OnRootMismatch`: the kubelet gives a
volume to the group once, not at every pod start)."""

from components.lib.kube.api import IMAGE_UID, VOLUME_SECURITY


def pod_context() -> dict:
    """A pod's `securityContext` (the API's field names)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        **VOLUME_SECURITY,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_context() -> dict:
    """Each container's `securityContext` (the API's field names)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
