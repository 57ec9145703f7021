"""The config's field types that follow a name rule of core.names: a refused value fails validation at its field,
with the rule's message (`RULE (got VALUE)`, or a Google Cloud rule's `VALUE RULE`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from core import names


def _named(rule, value, optional: bool = False, **options):
    """`value` if it follows `rule` (core.names), or is "" and `optional`; else the rule's message as the ValueError
    pydantic reports at the field (whose location names the parameter)."""
    if optional and not value:
        return value
    try:
        return rule(value, "value", **options)
    except names.InvalidName as e:
        raise ValueError(e.detail) from None


def _rule(rule, optional: bool = True, **options) -> AfterValidator:
    return AfterValidator(lambda value: _named(rule, value, optional, **options))


def _without_trailing_slash(value: str) -> str:
    """An http(s) URL without its trailing slashes (the clients join paths to it)."""
    return value.rstrip("/") if value.startswith("http") else value


# the names and locations of the config and the pipeline inputs (docs/guides/configuration.md, "Validation"); the optional ones may be
# "" (not set)
ModelName = Annotated[str, _rule(names.model_name, optional=False)]
Location = Annotated[str, _rule(names.location)]
DataSource = Annotated[str, _rule(names.location, optional=False, prefixes=("builtin:",))]
Instances = Annotated[str, _rule(names.instances)]
OutputPrefix = Annotated[str, _rule(names.output_location)]
Url = Annotated[str, _rule(names.url)]
DisplayName = Annotated[str, _rule(names.display_name, optional=False)]
OptionalDisplayName = Annotated[str, _rule(names.display_name)]
KubernetesName = Annotated[str, _rule(names.dns_label)]
KubernetesSubdomain = Annotated[str, _rule(names.dns_subdomain)]
InferenceService = Annotated[str, _rule(names.inference_service)]
VertexExperiment = Annotated[str, _rule(names.vertex_experiment)]
# Google Cloud's
Region = Annotated[str, _rule(names.region, optional=False)]
ProjectId = Annotated[str, _rule(names.project_id)]
ServiceAccount = Annotated[str, _rule(names.service_account)]
Network = Annotated[str, _rule(names.network)]
Uri = Annotated[str, _rule(names.uri), AfterValidator(_without_trailing_slash)]
ImageUri = Annotated[str, _rule(names.image_uri, optional=False)]
Labels = Annotated[dict[str, str], _rule(names.labels, optional=False)]
