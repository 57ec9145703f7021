"""The platform seam: how the platform-service steps (tuning, training, model upload, endpoint deploy, batch
prediction) run on each target. `PlatformOps` (base) is its contract and `inputs` the typed inputs of its steps;
`VertexOps` (vertex), `SelfHostedOps` (local) and `KubeflowOps` (kubeflow) implement it, each building only the
components it runs; `make_ops` picks the target's."""

from __future__ import annotations

from pipelines.config import Platform
from pipelines.targets.base import PlatformOps
from pipelines.targets.kubeflow import KubeflowOps
from pipelines.targets.selfhosted import SelfHostedOps
from pipelines.targets.vertex import VertexOps
from trainer.flags import TrainerSetup


def make_ops(target: str, platform: Platform, pipeline_name: str, trainer: TrainerSetup | None = None) -> PlatformOps:
    """The target's ops; `trainer` is what its trials and training train (the default builder when None)."""
    implementations: dict[str, type[VertexOps] | type[SelfHostedOps]] = {"vertex": VertexOps, "kubeflow": KubeflowOps}
    return implementations.get(target, SelfHostedOps)(platform, pipeline_name, trainer)
