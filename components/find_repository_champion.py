"""The champion the evaluation gate compares with, looked up by a never-cached step (it changes between runs).

- self-hosted (kubeflow, local): the newest version of the model repository (what the deploy step serves);
- Vertex AI (`find_registry_champion`): the Model Registry version of the model with the configured display name
  that holds the champion alias.
Both steps answer the same three outputs: the champion's SavedModel (`path`, "" when there is none), a name for
messages, and the artifact URI it was trained into (`model_uri`: equal to the candidate's when a cached training
produced the champion itself).
"""

from typing import NamedTuple


def find_repository_champion(model_repository: str, model_name: str) -> NamedTuple(
    "Outputs", [("path", str), ("name", str), ("model_uri", str)]
):
    """KFP step (self-hosted): the model repository's newest version.

    Args:
        model_repository: The versioned model repository.
        model_name: The model's name in the repository.
    """
    from collections import namedtuple

    from components.lib.deploy.model_repository import champion
    from core import names

    names.model_name(model_name)  # run parameters can be set without the CLI (the KFP UI, a recurring run)
    if model_repository:
        names.location(model_repository, "model_repository")
    found = champion(model_repository, model_name)
    Outputs = namedtuple("Outputs", ["path", "name", "model_uri"])
    if found is None:
        print(f"no champion: {model_name!r} has no version in {model_repository or '(no repository)'}")
        return Outputs("", "", "")
    print(f"champion: {model_name} version {found.number} at {found.path}")
    return Outputs(found.path, f"champion v{found.number}", found.metadata.get("source_model_uri", ""))
