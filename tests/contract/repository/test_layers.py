"""`make lint`'s layer contracts (import-linter, pyproject.toml): a module importing a layer above its own, or a step
importing another step, fails the lint; the tree as it is passes."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("core", "trainer", "serving", "components", "pipelines", "bench")
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the packages and pyproject.toml, to add one import to."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=root, env={"PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300
    )


def with_import(root: Path, module: str, line: str):
    path = root / (module.replace(".", "/") + ".py")
    original = path.read_text()
    path.write_text(original + f"\n{line}\n")
    try:
        return lint(root)
    finally:
        path.write_text(original)


def test_the_tree_keeps_every_contract(tree):
    done = lint(tree)
    assert done.returncode == 0, done.stdout
    assert "Contracts: 3 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    "module, line, broken",
    [
        ("serving.server", "import components.lib.deploy.tf_serving  # noqa", "serving.server -> components.lib"),
        ("core.storage", "from trainer import data  # noqa", "core.storage -> trainer.data"),
        ("trainer.task", "import serving.codec  # noqa", "trainer.task -> serving.codec"),
        ("components.lib.evaluation", "import pipelines.config  # noqa", "components.lib.evaluation -> pipelines"),
    ],
)
def test_a_module_importing_a_layer_above_it_fails(tree, module, line, broken):
    done = with_import(tree, module, line)
    assert done.returncode == 1
    assert "Contracts: 2 kept, 1 broken." in done.stdout
    assert broken in done.stdout.replace("\n", "")


def test_a_step_importing_another_step_fails(tree):
    done = with_import(tree, "components.check_champion", "from components.evaluate_model import decide  # noqa")
    assert done.returncode == 1
    assert "Steps: no step of components/ imports another step BROKEN" in done.stdout
    assert "components.check_champion -> components.evaluate_model" in done.stdout.replace("\n", "")


def test_a_shared_module_importing_a_step_fails(tree):
    done = with_import(tree, "components.lib.evaluation", "from components.evaluate_model import decide  # noqa")
    assert done.returncode == 1
    assert "components.lib.evaluation -> components.evaluate_model" in done.stdout.replace("\n", "")
