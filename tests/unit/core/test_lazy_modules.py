"""core.lazy_modules: a package's `from M import N` of a module M it lists in `__lazy_modules__` binds N on first use;
the rest of its `__init__` runs as written; aiplatform_v1 in a step's process loads only the service it uses."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PACKAGE = {
    "__init__.py": """
        from . import eager
        __lazy_modules__ = {"lazypkg.services.alpha", "lazypkg.services.beta"}
        from .services.alpha import AlphaClient
        from lazypkg.services.beta import BetaClient as Beta, beta_helper
        from .eager import EAGER
        LOADED_AT_IMPORT = sorted(name for name in __import__("sys").modules if name.startswith("lazypkg."))
        __all__ = ("AlphaClient", "Beta", "beta_helper", "EAGER")
        """,
    "eager.py": "EAGER = 'eager'\n",
    "services/__init__.py": "",
    "services/alpha.py": "class AlphaClient:\n    pass\n",
    "services/beta.py": "class BetaClient:\n    pass\n\ndef beta_helper():\n    return 'beta'\n",
}

CODE = """
import sys
from core import lazy_modules
lazy_modules.PACKAGES = ("lazypkg",)
lazy_modules.install()
lazy_modules.install()
import lazypkg
print(lazypkg.LOADED_AT_IMPORT, lazypkg.EAGER)
print("lazypkg.services.beta" in sys.modules, lazypkg.Beta.__name__, lazypkg.beta_helper())
print("lazypkg.services.alpha" in sys.modules, sorted(set(lazypkg.__all__) - set(dir(lazypkg))))
from lazypkg import AlphaClient
from lazypkg.services.alpha import AlphaClient as Same
print(AlphaClient is Same, "lazypkg.services.alpha" in sys.modules)
try:
    lazypkg.Missing
except AttributeError as e:
    print(e)
print(sum(isinstance(f, lazy_modules._LazyModules) for f in sys.meta_path))
"""


def run(code: str, path: str = "") -> list[str]:
    env = {"PYTHONPATH": path, "PATH": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_listed_imports_bind_on_first_use_and_the_rest_runs_as_written(tmp_path):
    for name, text in PACKAGE.items():
        (tmp_path / "lazypkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lazypkg" / name).write_text(textwrap.dedent(text))
    assert run(CODE, f"{tmp_path}:{ROOT}") == [
        "['lazypkg.eager'] eager",
        "False BetaClient beta",
        "False []",
        "True True",
        "module 'lazypkg' has no attribute 'Missing'",
        "1",
    ]


def test_a_step_process_loads_only_the_aiplatform_service_it_calls():
    lines = run(
        """
import sys
import components
from google.cloud import aiplatform_v1
from google.cloud.aiplatform_v1.types import model
loaded = lambda: sorted({n.split(".")[4] for n in sys.modules if n.startswith("google.cloud.aiplatform_v1.services.")})
print(loaded())
client = aiplatform_v1.ModelServiceClient
print(loaded(), aiplatform_v1.Model is model.Model, client.__module__)
"""
    )
    assert lines == [
        "[]",
        "['model_service'] True google.cloud.aiplatform_v1.services.model_service.client",
    ]
