"""The platform seam's contract (`pipelines.targets.PlatformOps`): every target implements each of its steps, and
each builds only the components it runs."""

import inspect

import pytest

from pipelines.config import Platform
from pipelines.targets import KubeflowOps, PlatformOps, SelfHostedOps, VertexOps, make_ops

STEPS = [name for name, member in vars(PlatformOps).items() if inspect.isfunction(member) and name[0] != "_"]


def test_the_seam_has_every_step_of_both_pipelines():
    assert STEPS == [
        "prepare_data",
        "find_champion",
        "check_champion",
        "tune",
        "train",
        "evaluate",
        "register",
        "deploy",
        "quantize_model",
        "batch_predict",
    ]


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("ops", [SelfHostedOps, VertexOps, KubeflowOps], ids=lambda c: c.__name__)
def test_every_target_takes_each_step_as_the_pipelines_call_it(ops, step):
    keywords = [
        p.name for p in inspect.signature(getattr(PlatformOps, step)).parameters.values() if p.kind == p.KEYWORD_ONLY
    ]
    inspect.signature(getattr(ops, step)).bind(None, **dict.fromkeys(keywords))


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
        "_deploy",
        "_import",
        "_defaults",
        "_merge",
        "_best",
        "_champion",
        "_find_model",
        "_find_endpoint",
        "_split",
        "_plan_batch",
        "_finish",
        "_crown",
    }
    assert ops._champion.component_spec.name == "find-registry-champion"


@pytest.mark.parametrize("target, ops", [("vertex", VertexOps), ("kubeflow", KubeflowOps), ("local", SelfHostedOps)])
def test_make_ops_picks_the_targets_implementation(target, ops):
    made = make_ops(target, Platform(), "tfpipe-batch-prediction")
    assert type(made) is ops and made.pipeline_name == "tfpipe-batch-prediction"
