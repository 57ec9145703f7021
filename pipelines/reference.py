"""The reference pages of docs/reference/, generated from the code: the CLI from its click commands
(`pipelines.cli.cli`, whose `serve` is `serving.command.serve`), the configuration from the config models' fields
(`pipelines.config.Config` and the models it nests), the pipeline parameters from their `Field(description=...)`, the Python API from the signatures and docstrings of
`pipelines.api.__all__`.

    python -m pipelines.reference            # write the pages
    python -m pipelines.reference --check    # exit 1 naming each page that is not what it would write

A field's description is its pydantic field info's (empty where it has none); a section's is its model's
docstring. The output depends on the code only, never on the environment: a default computed when a command runs
is shown as the command declares it (`show_default`).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import annotated_types
import click
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from pipelines.cli import cli
from pipelines.config import BatchParameters, Config, PipelineParameters

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs" / "reference"
PROG = "python -m pipelines"
PROFILES = "Named sets of the sections above, each deep-merged over the base sections when selected (`--profile NAME`)."
GENERATED = "Generated from the code by `python -m pipelines.reference`: do not edit it by hand."


# --- markdown ----------------------------------------------------------------------------------------------------


def prose(text: str | None) -> str:
    """A docstring or help text as markdown: paragraphs joined into lines, `<`, `|` and `*` escaped."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text or "").split("\f")[0])
    joined = "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    return joined.replace("<", "&lt;").replace("|", "\\|").replace("*", "\\*")


def cell(text: str) -> str:
    """Text for one table cell: on one line."""
    return " ".join(text.split())


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows)])


def code(text: str) -> str:
    return f"`{text}`"


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code marks and punctuation dropped, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def page(title: str, intro: str, sections: Sequence[str]) -> str:
    return "\n\n".join([f"# {title}", f"{GENERATED} {intro}", *sections]) + "\n"


# --- the CLI -----------------------------------------------------------------------------------------------------


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under `group` with its path of names, in click's (alphabetical) order, a group before its
    sub-commands."""
    for name in group.list_commands(click.Context(group)):
        command = group.commands[name]
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def value_type(param: click.Parameter) -> str:
    """What an option or argument takes: a flag, a choice, a bounded number, a path, text; required, repeatable."""
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        text = "flag"
    elif isinstance(kind, click.Choice):
        text = "one of " + ", ".join(code(str(c)) for c in kind.choices)
    elif isinstance(kind, click.IntRange | click.FloatRange):
        name = "integer" if isinstance(kind, click.IntRange) else "number"
        bounds = [f"{'>' if kind.min_open else '≥'} {kind.min}"] if kind.min is not None else []
        bounds += [f"{'<' if kind.max_open else '≤'} {kind.max}"] if kind.max is not None else []
        text = ", ".join([name, *bounds])
    else:
        text = {"INT": "integer", "FLOAT": "number", "PATH": "path", "FILE": "file", "DIRECTORY": "folder"}.get(
            kind.name.upper(), "text"
        )
    if param.metavar:
        text = code(param.metavar)
    notes = [n for n, on in (("required", param.required), ("repeatable", param.multiple)) if on]
    return "; ".join([text, *notes])


def default_text(param: click.Parameter) -> str:
    """The default an option declares: its `show_default` text, else its value (nothing for none, false or empty)."""
    if isinstance(param, click.Option) and isinstance(param.show_default, str):
        return param.show_default
    default = param.default
    if isinstance(default, bool) or not isinstance(default, str | int | float) or default == "":
        return ""
    return code(str(default))


def option_names(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return code(param.human_readable_name)
    names = [*param.opts, *param.secondary_opts]
    return " / ".join(code(n) for n in names)


def usage(path: tuple[str, ...], command: click.Command) -> str:
    """The command's synopsis: its required options (a choice's values as `a|b`, else the value's placeholder), its
    arguments, then `[OPTIONS]`."""
    words = [PROG, *path]
    for param in command.params:
        if isinstance(param, click.Option) and param.required:
            kind = param.type
            value = (
                "|".join(map(str, kind.choices))
                if isinstance(kind, click.Choice)
                else param.make_metavar(click.Context(command))
            )
            words += [param.opts[0], value]
    words += [p.human_readable_name for p in command.params if isinstance(p, click.Argument)]
    words.append("[OPTIONS]")
    return " ".join(words)


def first_sentence(text: str | None) -> str:
    flat = prose(text)
    match = re.match(r"(.+?\.)(?=\s+[A-Z]|$)", flat)
    return match.group(1) if match else flat


def options_table(command: click.Command) -> str:
    rows = [
        [option_names(p), value_type(p), default_text(p), prose(getattr(p, "help", None))]
        for p in command.params
        if not (isinstance(p, click.Option) and p.hidden)
    ]
    return table(["option", "value", "default", "description"], rows)


def command_section(path: tuple[str, ...], command: click.Command) -> str:
    heading = f"## `{' '.join(path)}`"
    parts = [heading, prose(command.help), f"```bash\n{usage(path, command)}\n```"]
    if isinstance(command, click.Group):
        parts.append(
            "Sub-commands: "
            + ", ".join(
                f"[`{' '.join((*path, n))}`](#{anchor(' '.join((*path, n)))})"
                for n in command.list_commands(click.Context(command))
            )
            + "."
        )
    parts.append(options_table(command))
    return "\n\n".join(parts)


def cli_page() -> str:
    found = list(commands(cli))
    index = table(
        ["command", "what it does"],
        [[f"[`{' '.join(path)}`](#{anchor(' '.join(path))})", first_sentence(c.help)] for path, c in found],
    )
    top = "\n\n".join(
        [
            f"## `{PROG}`",
            f"```bash\n{PROG} [-v] COMMAND [OPTIONS]\n```",
            options_table(cli),
            index,
        ]
    )
    intro = (
        "Every command of `python -m pipelines` with its options, as `--help` shows them. `python -m serving` is the "
        '[`serve`](#serve) command on its own; `make run ARGS="..."` passes its options to [`run`](#run). Options '
        "shown in brackets in a description, e.g. `[platform.kfp_host]`, default to that config field or "
        "environment variable. The guides show the commands in use: [docs/README.md](../README.md)."
    )
    return page("CLI reference", intro, [top, *(command_section(path, c) for path, c in found)])


# --- the configuration -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """A table of the configuration page: a model's fields at a dotted path, with the defaults it holds there."""

    path: str
    model: type[BaseModel]
    default: BaseModel | None  # the value at this path in the default config (None: defaults of the model's class)


def unwrap(annotation: typing.Any) -> typing.Any:
    """The type inside `Annotated[...]`."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def is_model(annotation: typing.Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def union_members(annotation: typing.Any) -> tuple[typing.Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return ()


def type_text(annotation: typing.Any, link: Callable[[type[BaseModel]], str]) -> str:
    """A field's type in words: string, integer, number, boolean, one of `a`, `b`, list of ..., mapping of string to
    ..., a model as a link to its table; `or null` for an optional one."""
    annotation = unwrap(annotation)
    members = union_members(annotation)
    if members:
        models = [m for m in members if is_model(unwrap(m))]
        if models and len(models) == len([m for m in members if m is not type(None)]):
            return "one of " + ", ".join(link(unwrap(m)) for m in models)
        texts = [type_text(m, link) for m in members if m is not type(None)]
        return " or ".join(texts) + (" or null" if type(None) in members else "")
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(code(yaml_text(v)) for v in typing.get_args(annotation))
    if origin is list:
        return "list of " + type_text(typing.get_args(annotation)[0], link)
    if origin is dict:
        return "mapping of string to " + type_text(typing.get_args(annotation)[1], link)
    if is_model(annotation):
        return link(annotation)
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def constraints(info: FieldInfo) -> list[str]:
    """A field's bounds: ≥ 1, < 1, at least 1 item."""
    found = []
    for item in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if isinstance(item, getattr(annotated_types, attr.capitalize())):
                found.append(f"{sign} {getattr(item, attr)}")
        if isinstance(item, annotated_types.MinLen):
            found.append(f"at least {item.min_length}")
    return found


def plain(value: typing.Any) -> typing.Any:
    """A value as plain data: a model as its fields that differ from their defaults, and its tag (a field whose type
    is a one-value Literal, such as a study parameter's `type`) always."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return {
            name: plain(getattr(value, name))
            for name, info in fields.items()
            if is_tag(info) or getattr(value, name) != info.get_default(call_default_factory=True)
        }
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return to_jsonable_python(value)


def is_tag(info: FieldInfo) -> bool:
    annotation = unwrap(info.annotation)
    return typing.get_origin(annotation) is typing.Literal and len(typing.get_args(annotation)) == 1


def yaml_text(value: typing.Any) -> str:
    """A value as YAML, on one line (what a config file takes)."""
    text = yaml.safe_dump(plain(value), default_flow_style=True, width=10**6, sort_keys=False, allow_unicode=True)
    return text.strip().removesuffix("...").strip()


def field_default(section: Section, name: str, info: FieldInfo) -> str:
    if is_model(unwrap(info.annotation)):
        return "see its table"
    if section.default is not None:
        return code(yaml_text(getattr(section.default, name)))
    if info.is_required():
        return "required"
    return code(yaml_text(info.get_default(call_default_factory=True)))


def sections(path: str, model: type[BaseModel], default: BaseModel | None) -> Iterator[Section]:
    """The section at `path` and the ones it nests: a model field at `path.name`, the models of a mapping's values
    at `path.name.<key>`, of a list's items at `path.name[]` (each kind of a union its own section)."""
    yield Section(path, model, default)
    for name, info in model.model_fields.items():
        annotation = unwrap(info.annotation)
        inner = f"{path}.{name}"
        if is_model(annotation):
            yield from sections(inner, annotation, getattr(default, name) if default is not None else None)
            continue
        origin = typing.get_origin(annotation)
        if origin not in (list, dict):
            continue
        item = unwrap(typing.get_args(annotation)[-1])
        suffix = "[]" if origin is list else ".<name>"
        for kind in union_members(item) or (item,):
            if is_model(unwrap(kind)):
                yield from sections(inner + suffix, unwrap(kind), None)


def section_heading(section: Section, kinds: int) -> str:
    kind = section.model.model_fields.get("type")
    if kinds > 1 and kind is not None:
        return f"`{section.path}` (`type: {typing.get_args(unwrap(kind.annotation))[0]}`)"
    return f"`{section.path}`"


Link = Callable[[str, type[BaseModel]], str]  # (a field's path, a model it holds) -> the model's name, linked


def field_rows(section: Section, link: Link) -> list[list[str]]:
    """A section's table rows: each field's name, type (with its bounds), default and description."""
    return [
        [
            code(name),
            ", ".join([type_text(info.annotation, partial(link, f"{section.path}.{name}")), *constraints(info)]),
            field_default(section, name, info),
            prose(info.description),
        ]
        for name, info in section.model.model_fields.items()
    ]


PIPELINE_SECTIONS = {
    "parameters": "pipeline-parameters.md#training-pipeline-parameters",
    "batch": "pipeline-parameters.md#batch-prediction-pipeline-parameters",
}


def config_page() -> str:
    defaults = Config()
    found: list[Section] = []
    for name, info in Config.model_fields.items():
        if name not in PIPELINE_SECTIONS:
            found += sections(name, unwrap(info.annotation), getattr(defaults, name))
    counts = {s.path: sum(t.path == s.path for t in found) for s in found}
    headings = {(s.path, s.model): section_heading(s, counts[s.path]) for s in found}

    def link(path: str, model: type[BaseModel]) -> str:
        """The model's section at `path` or below it (a mapping's `<name>`, a list's `[]`)."""
        target = next(h for (p, m), h in headings.items() if m is model and p.startswith(path))
        return f"[{model.__name__}](#{anchor(target)})"

    top = []
    for name, info in Config.model_fields.items():
        model = unwrap(info.annotation)
        target = PIPELINE_SECTIONS.get(name) or f"#{anchor(headings[(name, model)])}"
        top.append([code(name), f"[{model.__name__}]({target})", first_sentence(model.__doc__)])
    top.append([code("profiles"), "mapping of profile name to sections", PROFILES])
    parts = ["## The config file", table(["key", "type", "description"], top)]
    for section in found:
        parts += [
            f"## {headings[(section.path, section.model)]}",
            *([prose(section.model.__doc__)] if section.model.__doc__ else []),
            table(["field", "type", "default", "description"], field_rows(section, link)),
        ]
    intro = (
        "Every section and field of the config file (`--config FILE`) with its type, its default and its "
        "description; `<name>` in a path stands for any key of a mapping, `[]` for each item of a list. Profiles, "
        "environment variables, `--set` overrides and the rules that names follow: "
        "[the configuration guide](../guides/configuration.md)."
    )
    return page("Configuration reference", intro, parts)


# --- the pipeline parameters -------------------------------------------------------------------------------------


def parameters_section(title: str, model: type[BaseModel], section: str, pipeline: str) -> str:
    run = cli.commands["run"]
    options = {p.name: p for p in run.params if isinstance(p, click.Option)}
    rows = [
        [
            code(name),
            ", ".join([type_text(info.annotation, lambda model: model.__name__), *constraints(info)]),
            code(yaml_text(info.get_default(call_default_factory=True))),
            option_names(options[name]) if name in options else "",
            prose(info.description),
        ]
        for name, info in model.model_fields.items()
    ]
    intro = (
        f"The inputs of `{pipeline}`: the config's `{section}` section gives their defaults (compiled into the "
        f"pipeline's YAML), `--param NAME=VALUE` sets one for a run (`submit`, `schedule`, `rehearse`), and `run` "
        f"takes the options shown."
    )
    return "\n\n".join(
        [
            f"## {title}",
            prose(model.__doc__),
            intro,
            table(["input", "type", "default", "`run` option", "description"], rows),
        ]
    )


def parameters_page() -> str:
    intro = (
        "The pipelines' inputs with their types, defaults and descriptions: what the Vertex AI and Kubeflow consoles "
        "show for each input of a compiled pipeline."
    )
    return page(
        "Pipeline parameters",
        intro,
        [
            parameters_section("Training pipeline parameters", PipelineParameters, "parameters", "tfpipe-training"),
            parameters_section(
                "Batch prediction pipeline parameters", BatchParameters, "batch", "tfpipe-batch-prediction"
            ),
        ],
    )


# --- the Python API ----------------------------------------------------------------------------------------------


def parameter_text(param: inspect.Parameter) -> str:
    """A parameter as declared: `name: annotation = default` (annotations as written, unquoted)."""
    stars = "*" if param.kind is param.VAR_POSITIONAL else "**" if param.kind is param.VAR_KEYWORD else ""
    text = stars + param.name
    if param.annotation is not param.empty:
        annotation = param.annotation
        text += f": {annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)}"
    if param.default is not param.empty:
        default = f'"{param.default}"' if isinstance(param.default, str) else repr(param.default)
        text += f" = {default}" if param.annotation is not param.empty else f"={default}"
    return text


def signature_text(name: str, func: Callable[..., typing.Any], keyword: str = "def") -> str:
    """`def name(...) -> ...: ...` as the code declares it (`*` before the keyword-only parameters), one parameter a
    line when it does not fit on one."""
    sig = inspect.signature(func)
    params: list[str] = []
    for param in sig.parameters.values():
        if param.name == "self":
            continue
        if param.kind is param.KEYWORD_ONLY and not any(p.startswith("*") for p in params):
            params.append("*")
        params.append(parameter_text(param))
    returns = "" if sig.return_annotation is inspect.Signature.empty else f" -> {sig.return_annotation}"
    line = f"{keyword} {name}({', '.join(params)}){returns}: ..."
    if len(line) <= 100:
        return line
    return f"{keyword} {name}(\n" + "".join(f"    {p},\n" for p in params) + f"){returns}: ..."


def class_text(name: str, cls: type) -> str:
    """A class as its code declares it: its bases, its public fields and their types, its public properties and
    methods (formatted as `ruff format` formats the page's code blocks)."""
    import dataclasses

    bases = ", ".join(b.__name__ for b in cls.__bases__ if b is not object)
    lines = [f"class {name}({bases}):" if bases else f"class {name}:"]
    if dataclasses.is_dataclass(cls):
        lines += [f"    {f.name}: {f.type}" for f in dataclasses.fields(cls) if not f.name.startswith("_")]
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        if isinstance(value, property) and value.fget:
            returns = inspect.signature(value.fget).return_annotation
            lines.append(f"    {attr}: {returns}  # property")
        elif inspect.isfunction(value):
            lines += [""] if len(lines) > 1 else []
            lines.append("    " + signature_text(attr, value).replace("\n", "\n    "))
    return "\n".join(lines) if len(lines) > 1 else f"{lines[0]} ..."


def api_entry(name: str, obj: typing.Any) -> str:
    if isinstance(obj, type) and issubclass(obj, BaseModel):
        return f"### `{name}`\n\nThe validated configuration: see [the configuration](configuration.md)."
    text = class_text(name, obj) if isinstance(obj, type) else signature_text(name, obj)
    return f"### `{name}`\n\n```python\n{text}\n```\n\n{prose(obj.__doc__)}".rstrip()


def api_page() -> str:
    """Every public name of pipelines.api (its `__all__`): the functions, then the results and the exceptions."""
    from pipelines import api

    objects = {name: getattr(api, name) for name in api.__all__}
    functions = [api_entry(n, o) for n, o in objects.items() if not isinstance(o, type)]
    errors = [api_entry(n, o) for n, o in objects.items() if isinstance(o, type) and issubclass(o, Exception)]
    results = [api_entry(n, o) for n, o in objects.items() if isinstance(o, type) and not issubclass(o, Exception)]
    intro = (
        f"{first_sentence(api.__doc__)} The guide: [From Python](../guides/python.md). A name or a "
        "signature that changes here without this page being regenerated fails `python -m pipelines.reference "
        "--check`."
    )
    return page(
        "Python API reference",
        intro,
        ["## Functions", *functions, "## Results", *results, "## Exceptions", *errors],
    )


# --- the pages ---------------------------------------------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page,
    "configuration.md": config_page,
    "pipeline-parameters.md": parameters_page,
    "python-api.md": api_page,
}


def stale() -> list[str]:
    """The pages that are missing from docs/reference/ or differ from what the generator writes."""
    return [
        name
        for name, render in PAGES.items()
        if not (FOLDER / name).is_file() or (FOLDER / name).read_text() != render()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.reference", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 naming each page that is not what it would write")
    args = p.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{(FOLDER / name).relative_to(ROOT)} is stale: run python -m pipelines.reference", file=sys.stderr)
        return 1 if names else 0
    FOLDER.mkdir(parents=True, exist_ok=True)
    for name, render in PAGES.items():
        (FOLDER / name).write_text(render(), encoding="utf-8", newline="\n")
        print(f"wrote {(FOLDER / name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
