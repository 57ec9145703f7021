"""Every lightweight step of every compiled pipeline runs as the source KFP embeds in its spec (the function alone,
after `from kfp.dsl import *` and `from typing import *`), not as the module it was written in: that source must
define the function and every global name the function uses must exist there (names of the module, such as a
NamedTuple alias or a helper, do not). Catches on every target what only a Vertex run would otherwise find."""

import builtins
import dis

import pytest

from pipelines.config import Platform
from tests.helpers.compiled import compiled_docs


def compiled_specs():
    platform = Platform(accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1)
    for target in ("vertex", "kubeflow", "local"):
        for pipeline in ("training", "batch_prediction"):
            yield compiled_docs(target, pipeline, platform)[0]


def embedded_steps():
    steps = {}
    for spec in compiled_specs():
        for executor in spec["deploymentSpec"]["executors"].values():
            container = executor.get("container", {})
            if "ephemeral_component.py" in " ".join(container.get("command", [])):
                function = container["args"][container["args"].index("--function_to_execute") + 1]
                steps[function] = container["command"][-1]
    return steps


STEPS = embedded_steps()


def global_names(code) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= global_names(const)
    return names


def test_the_compiled_pipelines_embed_every_step():
    assert {
        "find_repository_champion",
        "find_registry_champion",
        "fingerprint_data",
        "prepare_data",
        "evaluate_model",
        "finish_vertex_rollout",
        "verify_vertex_deploy",
        "crown_vertex_model",
        "plan_vertex_training",
        "plan_batch_prediction",
        "publish_model",
        "deploy_model",
    } <= set(STEPS)


@pytest.mark.parametrize("function", sorted(STEPS))
def test_embedded_step_source_resolves_every_name(function):
    namespace = {"__name__": "ephemeral_component"}
    exec(compile(STEPS[function], "ephemeral_component.py", "exec"), namespace)  # annotations evaluated here
    step = namespace[function]
    missing = {n for n in global_names(step.__code__) if n not in namespace and not hasattr(builtins, n)}
    assert not missing, f"{function} uses names its embedded source does not define: {sorted(missing)}"
