"""The public names of pipelines.api (`__all__`) and their signatures are on docs/reference/python-api.md, and the
reference check fails when one of them disappears or changes without the page being regenerated."""

import inspect

from pipelines import api, reference


def test_every_public_name_is_on_the_reference_page_with_its_signature():
    page = (reference.FOLDER / "python-api.md").read_text()
    headings = [line.removeprefix("### `").removesuffix("`") for line in page.splitlines() if line.startswith("### ")]
    assert sorted(headings) == sorted(api.__all__)
    for name in api.__all__:
        obj = getattr(api, name)
        if inspect.isfunction(obj):
            assert reference.signature_text(name, obj) in page, name
    assert "def submit(\n    target: str,\n    config: Config | str | Path | None,\n" in page


def test_a_changed_signature_or_a_removed_name_makes_the_page_stale(monkeypatch):
    assert "python-api.md" not in reference.stale()

    def compile(target: str, config, output: str, pipeline: str = "training", *, strict: bool = False):  # noqa: A001
        """Compile."""

    monkeypatch.setattr(api, "compile", compile)
    assert "python-api.md" in reference.stale()
    monkeypatch.undo()
    monkeypatch.setattr(api, "__all__", [n for n in api.__all__ if n != "rollback"])
    assert "python-api.md" in reference.stale()
