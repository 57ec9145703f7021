"""docs/reference/ is generated from the code by `python -m pipelines.reference`: each page is what the generator
writes from the code as it is, whatever the environment, and shows every command, option and config field."""

from __future__ import annotations

from typing import Annotated

import click
import pytest
from pydantic import BaseModel, Field

from pipelines import reference
from pipelines.cli import cli
from pipelines.config import BatchParameters, Config, PipelineParameters


def test_each_reference_page_is_what_the_generator_writes():
    stale = reference.stale()
    assert not stale, f"stale: {', '.join(f'docs/reference/{n}' for n in stale)}: run `python -m pipelines.reference`"


def test_check_names_each_stale_page(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "docs" / "reference"
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    monkeypatch.setattr(reference, "FOLDER", folder)
    assert reference.main([]) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(reference.PAGES)
    assert reference.main(["--check"]) == 0
    capsys.readouterr()
    (folder / "cli.md").write_text(reference.cli_page().replace("## `run`", "## `run` (edited)"))
    (folder / "configuration.md").unlink()
    assert reference.main(["--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "docs/reference/cli.md is stale: run python -m pipelines.reference",
        "docs/reference/configuration.md is stale: run python -m pipelines.reference",
    ]


def test_the_pages_do_not_depend_on_the_environment(monkeypatch):
    """The serving command's defaults read AIP_* variables when it runs; the page shows what it declares."""
    pages = {name: render() for name, render in reference.PAGES.items()}
    for name, value in {"AIP_HTTP_PORT": "9000", "AIP_HEALTH_ROUTE": "/h", "TFPIPE_PROFILE": "prod"}.items():
        monkeypatch.setenv(name, value)
    assert {name: render() for name, render in reference.PAGES.items()} == pages
    assert "| `--rest-port` | integer, ≥ 0, ≤ 65535 | 8501 or $AIP_HTTP_PORT | 0: any free port |" in pages["cli.md"]


def section_of(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_cli_page_shows_every_command_and_option():
    text = reference.cli_page()
    found = list(reference.commands(cli))
    assert {" ".join(path) for path, _ in found} >= {"run", "compile", "serve", "stop-serving", "schedule list"}
    for path, command in found:
        section = section_of(text, f"## `{' '.join(path)}`")
        assert f"```bash\npython -m pipelines {' '.join(path)} " in section
        for param in command.params:
            for name in param.opts if isinstance(param, click.Option) else [param.human_readable_name]:
                assert f"`{name}`" in section, f"{' '.join(path)}: {name} missing"
            if isinstance(param, click.Option) and param.help:
                assert reference.prose(param.help) in section


def test_a_synopsis_gives_the_required_options():
    text = reference.cli_page()
    assert "```bash\npython -m pipelines compile --target vertex|kubeflow --output FILE [OPTIONS]\n```" in text
    assert "```bash\npython -m pipelines schedule pause --target vertex|kubeflow NAME [OPTIONS]\n```" in text


def config_paths(model: type[BaseModel], path: str) -> list[str]:
    """Every field path of a model: nested models' fields too, a mapping's values at `.<name>`."""
    paths = []
    for name, info in model.model_fields.items():
        paths.append(f"{path}.{name}")
        inner = reference.unwrap(info.annotation)
        if reference.is_model(inner):
            paths += config_paths(inner, f"{path}.{name}")
    return paths


@pytest.mark.parametrize("section", ["platform", "study", "trainer"])
def test_the_configuration_page_shows_every_field(section):
    text = reference.config_page()
    for path in config_paths(reference.unwrap(Config.model_fields[section].annotation), section):
        parent, name = path.rsplit(".", 1)
        assert f"| `{name}` |" in section_of(text, f"## `{parent}`"), path


def test_the_parameters_page_shows_every_input_with_its_description():
    text = reference.parameters_page()
    for heading, model in (
        ("## Training pipeline parameters", PipelineParameters),
        ("## Batch prediction pipeline parameters", BatchParameters),
    ):
        section = section_of(text, heading)
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            row = next(line for line in section.splitlines() if line.startswith(f"| `{name}` |"))
            assert row.endswith(f"| {reference.prose(info.description)} |"), row


class Example(BaseModel):
    """An example section."""

    count: int = Field(1, ge=0, description="How many | which <kind>.")
    name: Annotated[str, Field(description="Its name.")] = ""
    plain: str = "x"
    choice: bool | None = None


def test_a_field_shows_its_description_wherever_it_is_given_and_none_is_empty():
    rows = reference.field_rows(reference.Section("example", Example, None), lambda path, model: model.__name__)
    assert rows == [
        ["`count`", "integer, ≥ 0", "`1`", "How many \\| which &lt;kind>."],
        ["`name`", "string", "`''`", "Its name."],
        ["`plain`", "string", "`x`", ""],
        ["`choice`", "boolean or null", "`null`", ""],
    ]
