"""Every declared dependency is imported by the project's code, or says here why it is declared anyway."""

import ast
import importlib.metadata
import tomllib

import pytest
from packaging.requirements import Requirement

from tests.helpers.imports import PACKAGES, ROOT

# Declared without an import of their own, and why.
NOT_IMPORTED = {
    "jaxlib": "pinned with jax for google-vizier (see pyproject.toml)",
    "scikit-learn": "its bundled data files are the built-in data sets, read without importing it (sources.py)",
}
DEPENDENCIES = [
    Requirement(r).name for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
]


def imported_names() -> set[str]:
    """Every module name the code imports, with `from a import b` counted as both `a` and `a.b`."""
    names = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def provided_modules(distribution: str) -> set[str]:
    """The dotted names of the modules and packages an installed distribution ships."""
    modules = set()
    for file in importlib.metadata.distribution(distribution).files or []:
        parts = file.parts
        if file.suffix == ".py" and not parts[0].endswith((".dist-info", ".data")):
            modules.add(".".join(parts[:-1] if file.stem == "__init__" else (*parts[:-1], file.stem)))
    return modules


IMPORTED = imported_names()


@pytest.mark.parametrize("distribution", DEPENDENCIES)
def test_declared_dependency_is_used(distribution):
    if distribution in NOT_IMPORTED:
        assert not provided_modules(distribution) & IMPORTED, f"{distribution} is imported: drop its exemption"
        return
    assert provided_modules(distribution) & IMPORTED, (
        f"nothing imports {distribution}: use it, drop it from pyproject.toml (then `make lock`), or say why here"
    )


def test_the_check_tells_a_used_dependency_from_an_unused_one():
    assert "google.cloud.storage" in provided_modules("google-cloud-storage") & IMPORTED
    assert "kfp.kubernetes" in provided_modules("kfp-kubernetes") & IMPORTED
    assert not provided_modules("tenacity") & IMPORTED  # installed (google-genai requires it), not imported
