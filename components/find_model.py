"""The Vertex AI Model Registry model with a display name (the upload makes a new version of it)."""

from typing import NamedTuple


def find_model(display_name: str, project: str, location: str) -> NamedTuple(
    "Outputs", [("resource_name", str), ("resource_uri", str)]
):
    """KFP step (Vertex): the registry model with this display name ("" when there is none).

    Args:
        display_name: Display name of the registry model.
        project: Google Cloud project.
        location: Region.
    """
    from collections import namedtuple

    from components.lib.vertex.registry import find_resource, resource_uri

    name = find_resource("model", display_name, project, location)
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri"])
    return Outputs(name, resource_uri(name))
