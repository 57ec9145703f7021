"""The champion aliases moved to the uploaded Vertex AI model version when no deploy happens."""

from kfp.dsl import Artifact, Input


def crown_vertex_model(model: Input[Artifact], aliases: list) -> str:
    """KFP step (Vertex, deploy disabled): move the champion aliases to the uploaded version.

    Args:
        model: The uploaded model version.
        aliases: Version aliases moved to it (the first marks the champion).
    """
    from components.lib.vertex.rollout import move_aliases

    move_aliases(model.metadata["resourceName"], list(aliases))
    return model.metadata["resourceName"]
