"""docs/guides/python.md runs as written: its configuration, compile and submit blocks here (the local run and the
rehearsal: tests/e2e/test_python_guide.py). Without Google Cloud credentials, the submit block raises the API's
CredentialsError with the CLI's line."""

import os
import re

import pytest
import yaml

from tests.helpers.python_guide import blocks

LOGIN = (
    "run 'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
)


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """No Application Default Credentials anywhere, no TFPIPE_ variables; the guide's files under tmp_path."""
    for name in [n for n in os.environ if n.startswith(("GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_", "TFPIPE_"))]:
        monkeypatch.delenv(name)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "home"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.chdir(tmp_path)


def test_the_guide_has_the_blocks_its_tests_run():
    assert [(b.e2e, re.findall(r"api\.(\w+)\(", b.code)) for b in blocks()] == [
        (False, ["load_config"]),
        (True, ["run_locally"]),
        (True, ["rehearse"]),
        (False, ["load_config", "compile", "compile"]),
        (False, ["submit"]),
    ]


def test_the_guides_python_compiles_for_both_clouds_and_submit_asks_for_credentials(no_credentials, tmp_path):
    from pipelines import api

    fast = [b for b in blocks() if not b.e2e]
    namespace: dict = {}
    for block in fast[:-1]:
        block.run(namespace)
    assert (namespace["config"].parameters.epochs, namespace["config"].parameters.tune) == (2, False)
    for target, compiled in (("vertex", namespace["vertex"]), ("kubeflow", namespace["kubeflow"])):
        assert compiled.path == f"templates/training-{target}.yaml"
        spec = next(yaml.safe_load_all((tmp_path / compiled.path).read_text()))
        assert sorted(compiled.parameters) == sorted(spec["root"]["inputDefinitions"]["parameters"])
    assert namespace["vertex"].warning.startswith("warning: images by tag, not digest: ")
    with pytest.raises(api.CredentialsError) as raised:
        fast[-1].run(namespace)
    assert str(raised.value) == f"no usable Google Cloud credentials (Your default credentials were not found): {LOGIN}"
    assert "run" not in namespace
