"""A strict Kubernetes API double for the kubeflow engine steps (see server.py)."""

from tests.k8s_double.server import KubeAPI, Refused, merge_patch

__all__ = ["KubeAPI", "Refused", "merge_patch"]
