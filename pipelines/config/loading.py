"""Loading the configuration: a YAML file with `parameters:` (training pipeline), `batch:` (batch prediction
pipeline), `platform:`, `study:` and `trainer:` sections, plus optional named `profiles:` deep-merged over them, then
the environment and the command line's overrides, validated at once.

Precedence, highest first: CLI (`--set section.field=value`, then the dedicated options) > environment
(`TFPIPE_<SECTION>__<FIELD>[__<SUBFIELD>]`) > the selected profile (`--profile NAME` or `TFPIPE_PROFILE`) > the
file's base sections > defaults.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from components.lib.study.spec import DEFAULT_STUDY
from pipelines.config.errors import ConfigError
from pipelines.config.sections import SECTIONS, Config

ENV_PREFIX = "TFPIPE_"
PROFILE_ENV = "TFPIPE_PROFILE"


@dataclass(frozen=True)
class Override:
    """One value set at a dotted path (`platform.schedule.cron`), and where it came from."""

    path: tuple[str, ...]
    value: Any
    source: str  # TFPIPE_PLATFORM__TRAINER_IMAGE, --set platform.trainer_image, ...


def _parse_value(text: str):
    """An override's value: YAML for mappings and lists (`{team: ml}`, `[a, b]`), else the string itself (pydantic
    converts strings to the field's type: `5` to an int, `true` to a bool), so `1234567` stays a string for str
    fields such as image tags and commits."""
    if text.strip()[:1] in ("{", "["):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(value, (dict, list)):
            return value
    return text


def parse_set(assignment: str) -> Override:
    """`--set section.field[.subfield]=value`."""
    key, sep, value = assignment.partition("=")
    path = tuple(part.strip() for part in key.strip().split("."))
    if sep and all(path) and path[0] not in SECTIONS:
        raise ConfigError(f"--set {assignment}: {path[0]!r} is not a section; use one of: {', '.join(SECTIONS)}")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"--set {assignment}: expected SECTION.FIELD=VALUE, e.g. platform.trainer_image=IMAGE")
    return Override(path, _parse_value(value), f"--set {key.strip()}")


def assignment(key: str, value: Any, origin: str) -> Override:
    """`value` (as given, not parsed) for the dotted `key` (`section.field[.subfield]`), from `origin`."""
    path = tuple(key.split("."))
    if len(path) < 2 or not all(path) or path[0] not in SECTIONS:
        raise ConfigError(f"{origin} {key!r}: expected SECTION.FIELD with SECTION one of: {', '.join(SECTIONS)}")
    return Override(path, value, origin)


def env_overrides(environ: Mapping[str, str]) -> list[Override]:
    """`TFPIPE_<SECTION>__<FIELD>[__<SUBFIELD>]=value` variables (names are case-insensitive after the prefix).
    Read here, not with pydantic-settings: they rank between the profile and `--set`, and an error names the
    variable its value came from."""
    found = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == PROFILE_ENV:
            continue
        section, sep, field = name[len(ENV_PREFIX) :].partition("__")
        if section.lower() not in SECTIONS:
            typo = next((s for s in SECTIONS if section.lower().startswith(s + "_")), None)
            if typo:
                raise ConfigError(
                    f"{name}: separate the section and the field with two underscores, like "
                    f"{ENV_PREFIX}{typo.upper()}__{section[len(typo) + 1 :]}"
                )
            continue  # another tfpipe variable (TFPIPE_SERVING_STATE, ...)
        parts = field.split("__")
        if not sep or not all(parts):
            raise ConfigError(f"{name}: name a field after the section, like {ENV_PREFIX}{section.upper()}__FIELD")
        found.append(Override((section.lower(), *(p.lower() for p in parts)), _parse_value(environ[name]), name))
    return found


def _merge(base: dict, over: Mapping, path: tuple, sources: dict, source: str) -> None:
    """Deep-merge `over` into `base` (mappings merge key by key; anything else replaces)."""
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value, path + (key,), sources, source)
        else:
            base[key] = copy.deepcopy(value)
            sources[path + (key,)] = source


def _assign(raw: dict, override: Override, sources: dict) -> None:
    node = raw
    for i, key in enumerate(override.path[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{override.source}: {'.'.join(override.path[: i + 1])} is not a mapping")
        node = child
    node[override.path[-1]] = copy.deepcopy(override.value)
    sources[override.path] = override.source


def _describe(error: ValidationError, sources: Mapping[tuple, str] | None = None, prefix: str = "") -> str:
    """Every error as `section.field: message`, with where an overriding value came from."""
    messages = []
    for e in error.errors():
        loc = tuple(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] != "value_error" and isinstance(e.get("input"), (str, int, float, bool)):
            message += f" (got {e['input']!r})"
        source = next(
            ((sources or {}).get(loc[:n]) for n in range(len(loc), 0, -1) if (sources or {}).get(loc[:n])), None
        )
        if source:
            message += f" (from {source})"
        messages.append(f"{prefix}{'.'.join(loc) or 'config'}: {message}")
    return "; ".join(messages)


def _read(path: str | Path | None) -> dict:
    if not path:
        return {}
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping with 'parameters', 'platform', ... sections")
    return raw


def _base(raw: Mapping) -> dict:
    """The file's sections, the study seeded with the default study (a partial study section keeps its search
    space)."""
    base = {k: copy.deepcopy(v) for k, v in raw.items() if k != "profiles"}
    for section in SECTIONS:
        if base.get(section) is None:
            base.pop(section, None)
        elif not isinstance(base[section], dict):
            raise ConfigError(f"invalid configuration: {section}: must be a mapping")
    study = DEFAULT_STUDY.model_dump()
    _merge(study, base.get("study") or {}, ("study",), {}, "")
    base["study"] = study
    return base


def _profiles(raw: Mapping) -> dict:
    profiles = raw.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise ConfigError("invalid configuration: profiles: must map profile names to sections")
    for name, body in profiles.items():
        if not isinstance(body, dict):
            raise ConfigError(f"invalid configuration: profiles.{name}: must be a mapping of sections")
        for key, value in body.items():
            if key not in SECTIONS:
                raise ConfigError(
                    f"invalid configuration: profiles.{name}.{key}: not a section; use one of: {', '.join(SECTIONS)}"
                )
            if value is not None and not isinstance(value, dict):
                raise ConfigError(f"invalid configuration: profiles.{name}.{key}: must be a mapping")
    return profiles


def profile_names(path: str | Path | None) -> list[str]:
    return sorted(_profiles(_read(path)))


def load_config(
    path: str | Path | None = None,
    overrides: dict | None = None,
    batch_overrides: dict | None = None,
    *,
    profile: str | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
    origin: str = "the command line",
) -> Config:
    """Read `path` (YAML) if given; deep-merge the selected profile (`profile`, else `$TFPIPE_PROFILE`) over its
    sections; apply the `TFPIPE_<SECTION>__<FIELD>` variables of `environ` (default: os.environ), then the
    `sets` (`section.field=value`), then the dotted `values` (`{"section.field": value}`), parameter `overrides` and
    batch-pipeline `batch_overrides` (None values ignored; an error names `origin` as where they came from);
    validate. Every other profile of the file is validated too."""
    environ = os.environ if environ is None else environ
    raw = _read(path)
    profiles = _profiles(raw)
    profile = profile if profile is not None else environ.get(PROFILE_ENV, "")
    config = _base(raw)
    sources: dict[tuple, str] = {}
    if profile:
        if not path:
            raise ConfigError(f"profile {profile!r}: profiles are defined in a config file; pass --config FILE")
        if profile not in profiles:
            available = ", ".join(sorted(profiles)) or "none"
            raise ConfigError(f"unknown profile {profile!r}: config file {path} defines profiles: {available}")
        _merge(config, {k: v for k, v in profiles[profile].items() if v is not None}, (), sources, f"profile {profile}")
    given = [assignment(key, value, origin) for key, value in (values or {}).items() if value is not None]
    for override in env_overrides(environ) + [parse_set(item) for item in sets] + given:
        _assign(config, override, sources)
    for section, fields in (("parameters", overrides), ("batch", batch_overrides)):
        for key, value in (fields or {}).items():
            if value is not None:
                _assign(config, Override((section, key), value, origin), sources)
    try:
        result = Config.model_validate(config)
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {_describe(e, sources)}") from None
    if result.trainer.found():  # else compile, run and rehearse refuse the builder (TrainerSettings.check_builder)
        result = result.model_copy(update={"trainer": result.trainer.check_hyperparameters(result.study)})
    for name, body in profiles.items():  # a broken profile fails every load, not only the day it is used
        if name != profile:
            other = _base(raw)
            _merge(other, {k: v for k, v in body.items() if v is not None}, (), {}, "")
            try:
                Config.model_validate(other)
            except ValidationError as e:
                raise ConfigError(f"invalid configuration: {_describe(e, prefix=f'profiles.{name}.')}") from None
    return result
