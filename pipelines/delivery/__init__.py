"""Delivery: how the compiled pipelines reach each cloud target, through one `Delivery` per target (base):
`VertexDelivery` (Vertex AI Pipelines) and `KubeflowDelivery` (a Kubeflow Pipelines deployment); `delivery_for`
picks the target's."""

from __future__ import annotations

from pipelines.delivery.base import Delivery
from pipelines.delivery.kubeflow import KubeflowDelivery
from pipelines.delivery.vertex import VertexDelivery


def delivery_for(target: str) -> Delivery:
    """The delivery of `target` (vertex | kubeflow)."""
    deliveries: dict[str, type[VertexDelivery] | type[KubeflowDelivery]] = {
        "vertex": VertexDelivery,
        "kubeflow": KubeflowDelivery,
    }
    if target not in deliveries:
        raise ValueError(f"unknown target {target!r}; choose one of: {', '.join(deliveries)}")
    return deliveries[target]()
