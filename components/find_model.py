"""The Vertex AI Model Registry model with a display name (the upload makes a new version of it), and its version
holding the trained model's artifacts when they were uploaded before (then nothing is uploaded)."""

from typing import NamedTuple


def find_model(display_name: str, artifact_uri: str, project: str, location: str) -> NamedTuple(
    "Outputs", [("resource_name", str), ("resource_uri", str), ("version_name", str), ("version_uri", str)]
):
    """KFP step (Vertex): the registry model with this display name ("" when there is none) and its newest version
    whose artifacts are `artifact_uri` ("" when none is).

    Args:
        display_name: Display name of the registry model.
        artifact_uri: The trained model's SavedModel folder.
        project: Google Cloud project.
        location: Region.
    """
    from collections import namedtuple

    from components.lib.vertex.registry import find_resource, registered_version, resource_uri

    name = find_resource("model", display_name, project, location)
    version = registered_version(name, artifact_uri) if name else ""
    if version:
        print(f"{artifact_uri} is registered already as {version}: no new upload")
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri", "version_name", "version_uri"])
    return Outputs(name, resource_uri(name), version, resource_uri(version))
