"""The platform seam (`pipelines.targets`): each target builds only the components it runs, and `make_ops` picks the
target's implementation. That every implementation takes each step's typed inputs as the pipelines pass them is
mypy's check (`make lint`)."""

import pytest

from pipelines.config import Platform
from pipelines.targets import KubeflowOps, SelfHostedOps, VertexOps, make_ops


def test_vertex_builds_no_self_hosted_component():
    ops = make_ops("vertex", Platform(), "tfpipe-training")
    assert isinstance(ops, VertexOps) and not isinstance(ops, SelfHostedOps)
    components = {name for name, value in vars(ops).items() if hasattr(value, "component_spec")}
    assert components == {
        "_fingerprint",
        "_prepare",
        "_evaluate",
        "_check_champion",
        "_quantize",
        "_plan",
        "_claim_dir",
        "_deploy",
        "_import",
        "_defaults",
        "_merge",
        "_best",
        "_champion",
        "_find_model",
        "_ensure_endpoint",
        "_create_model",
        "_split",
        "_plan_batch",
        "_finish",
        "_verify",
        "_crown",
    }
    assert ops._champion.component_spec.name == "find-registry-champion"


@pytest.mark.parametrize("target, ops", [("vertex", VertexOps), ("kubeflow", KubeflowOps), ("local", SelfHostedOps)])
def test_make_ops_picks_the_targets_implementation(target, ops):
    made = make_ops(target, Platform(), "tfpipe-batch-prediction")
    assert type(made) is ops and made.pipeline_name == "tfpipe-batch-prediction"
