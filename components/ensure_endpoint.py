"""The Vertex AI endpoint with a display name, created when there is none (`components.lib.vertex.create`)."""

from typing import NamedTuple


def ensure_endpoint(display_name: str, project: str, location: str, labels: dict, encryption_key: str) -> NamedTuple(
    "Outputs", [("resource_name", str), ("resource_uri", str)]
):
    """KFP step (Vertex, never cached): the endpoint with this display name; when there is none, one created with
    an ID derived from the name, so that two runs creating it at once end with one endpoint.

    Args:
        display_name: Display name of the endpoint.
        project: Google Cloud project.
        location: Region.
        labels: Labels of a new endpoint.
        encryption_key: CMEK key of a new endpoint (empty: Google-managed).
    """
    from collections import namedtuple

    from components.lib.vertex.create import ensure_endpoint
    from components.lib.vertex.registry import resource_uri

    name = ensure_endpoint(display_name, project, location, labels, encryption_key)
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri"])
    return Outputs(name, resource_uri(name))
