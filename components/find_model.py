"""The Vertex AI Model Registry model with a display name (the upload makes a new version of it), its version
holding the trained model's artifacts when they were uploaded before (then nothing is uploaded), and the labels a
new version gets."""

from typing import NamedTuple


def find_model(
    display_name: str, artifact_uri: str, project: str, location: str, labels: dict, source_commit: str
) -> NamedTuple(
    "Outputs",
    [("resource_name", str), ("resource_uri", str), ("version_name", str), ("version_uri", str), ("labels", dict)],
):
    """KFP step (Vertex): the registry model with this display name ("" when there is none), its newest version
    whose artifacts are `artifact_uri` ("" when none is), and the labels of a version uploaded now: `labels` and
    `source_commit` (left out when empty; a label value, else the step fails before any upload).

    Args:
        display_name: Display name of the registry model.
        artifact_uri: The trained model's SavedModel folder.
        project: Google Cloud project.
        location: Region.
        labels: The run's labels of every Vertex AI resource.
        source_commit: The commit that produced the model (empty: none).
    """
    from collections import namedtuple

    from components.lib.vertex.registry import find_resource, registered_version, resource_uri, version_labels

    uploaded = version_labels(labels, source_commit)
    name = find_resource("model", display_name, project, location)
    version = registered_version(name, artifact_uri) if name else ""
    if version:
        print(f"{artifact_uri} is registered already as {version}: no new upload")
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri", "version_name", "version_uri", "labels"])
    return Outputs(name, resource_uri(name), version, resource_uri(version), uploaded)
