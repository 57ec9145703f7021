"""The dependency direction between the packages: the steps, the trainer, the networks and the server never import
the pipelines (the CLI, the DAG and the platform seam import them), so their images do not ship `pipelines/`."""

import ast

import pytest

from tests.helpers.imports import ROOT, imported_modules, module_name, needed_files

INDEPENDENT = ["components", "models", "serving", "trainer"]
MODULES = sorted(path for package in INDEPENDENT for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_does_not_import_pipelines(path):
    imports = sorted(name for name in imported_modules(path) if name.split(".")[0] == "pipelines")
    assert not imports, f"{path.relative_to(ROOT)} imports {imports}"


def test_the_import_reader_sees_every_kind_of_import():
    """Imports inside functions, `from package import module`, and `python -m` commands all count."""
    run_batch_prediction = imported_modules(ROOT / "components" / "run_batch_prediction.py")
    assert {
        "serving.codec",
        "core.storage",
        "components.lib.deploy.model_repository",
        "components.lib.batch.signatures",
    } <= run_batch_prediction
    assert "serving" in imported_modules(ROOT / "serving" / "lifecycle.py")  # python -m serving
    assert "components.lib.study.trial_runner" in imported_modules(
        ROOT / "components" / "lib" / "study" / "runner_pool.py"
    )
    assert "pipelines.cli" in imported_modules(ROOT / "pipelines" / "__main__.py")


def test_the_server_needs_only_the_bottom_package_its_storage_name_rules_cpu_count_and_warmup_records():
    files = {module_name(path) for path in needed_files(["serving.vertex_container", "serving.command"])}
    assert {name for name in files if not name.startswith("serving")} == {
        "core",
        "core.cpus",
        "core.import_hooks",
        "core.lean_tensorflow",
        "core.names",
        "core.retries",
        "core.storage",
        "core.warmup",
    }


STEP_MODULES = sorted(p for p in (ROOT / "components").glob("*.py") if p.name != "__init__.py")


def component_calls() -> list[tuple[str, str]]:
    """(module, function) of every step the platform seam builds: `component(module.function, ...)`, and the
    container steps' `module.module(image)`."""
    trees = [ast.parse(path.read_text()) for path in sorted((ROOT / "pipelines" / "targets").glob("*.py"))]
    steps = []
    for call in (node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Call)):
        if getattr(call.func, "id", "") == "component":
            steps.append((call.args[0].value.id, call.args[0].attr))
        elif isinstance(call.func, ast.Attribute) and getattr(call.func.value, "id", "") == call.func.attr:
            steps.append((call.func.attr, call.func.attr))
    return steps


def test_every_step_of_the_seam_lives_in_the_module_named_like_it():
    calls = component_calls()
    assert len(calls) >= 25
    assert [(module, function) for module, function in calls if module != function] == []
    assert {function for _, function in calls} == {p.stem for p in STEP_MODULES}


@pytest.mark.parametrize("path", STEP_MODULES, ids=lambda p: p.name)
def test_a_step_module_defines_its_step(path):
    tree = ast.parse(path.read_text())
    assert path.stem in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
