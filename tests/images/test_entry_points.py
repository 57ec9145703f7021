"""Each image holds what its entry points import: every first-party module they reach, and every other module
those import anywhere (inside functions too), imported in the image as its user."""

from __future__ import annotations

import pytest

from components.deploy_vertex_model import LAUNCHER
from tests.helpers.imports import ENTRY_MODULES, external_modules, module_name, needed_files
from tests.helpers.podman import failed_imports

# what the compiled pipelines run from an image by name (`python -m`), not reached through an import
RUN_BY_NAME = {"components.Dockerfile": {LAUNCHER}}


@pytest.mark.parametrize("dockerfile", sorted(ENTRY_MODULES))
def test_every_module_the_entry_points_reach_imports_in_the_image(dockerfile):
    files = needed_files(ENTRY_MODULES[dockerfile])
    modules = sorted({module_name(f) for f in files} | external_modules(files) | RUN_BY_NAME.get(dockerfile, set()))
    assert len(modules) > 10
    assert failed_imports(dockerfile.split(".")[0], modules) == {}


def test_the_images_leave_out_what_they_do_not_run():
    """The check sees a missing package: the server's image has none of the pipeline's tools, and of this project
    only the server and the bottom package (no steps, pipelines or trainer)."""
    others = ["components", "pipelines", "trainer"]
    tools = ["kfp", "google.cloud.aiplatform", "jax", "pytest"]
    failed = failed_imports("serving", [*tools, *others, "core.storage", "serving.vertex_container"])
    assert sorted(failed) == sorted([*tools, *others])
    assert all(message.startswith("ModuleNotFoundError") for message in failed.values())
