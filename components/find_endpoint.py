"""The Vertex AI endpoint with a display name (the deploy reuses it)."""

from typing import NamedTuple


def find_endpoint(display_name: str, project: str, location: str) -> NamedTuple(
    "Outputs", [("resource_name", str), ("resource_uri", str)]
):
    """KFP step (Vertex): the endpoint with this display name ("" when there is none).

    Args:
        display_name: Display name of the endpoint.
        project: Google Cloud project.
        location: Region.
    """
    from collections import namedtuple

    from components.lib.vertex.registry import find_resource, resource_uri

    name = find_resource("endpoint", display_name, project, location)
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri"])
    return Outputs(name, resource_uri(name))
