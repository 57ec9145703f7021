"""The champion the evaluation gate compares with on Vertex AI: the Model Registry version of the model with the
configured display name that holds the champion alias (`find_repository_champion`'s outputs)."""

from typing import NamedTuple


def find_registry_champion(display_name: str, alias: str, project: str, location: str) -> NamedTuple(
    "Outputs", [("path", str), ("name", str), ("model_uri", str)]
):
    """KFP step (Vertex): the registry model's version holding `alias`.

    Args:
        display_name: Display name of the Model Registry model.
        alias: The version alias that marks the champion.
        project: Google Cloud project of the registry.
        location: Region of the registry.
    """
    from collections import namedtuple

    from components.lib.vertex.registry import champion_version

    name, artifact_uri = champion_version(display_name, alias, project, location)
    Outputs = namedtuple("Outputs", ["path", "name", "model_uri"])
    if not name:
        print(f"no champion: no version of {display_name!r} holds the alias {alias!r}")
        return Outputs("", "", "")
    print(f"champion: {name} ({alias}) at {artifact_uri}")
    return Outputs(artifact_uri, f"champion {name}", artifact_uri)
