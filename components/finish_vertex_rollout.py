"""The end of a Vertex AI rollout (`components.lib.vertex.rollout`): undeploy the previous models, move the aliases."""

from kfp.dsl import Artifact, Input


def finish_vertex_rollout(
    endpoint: Input[Artifact],
    model: Input[Artifact],
    traffic_percentage: int,
    keep_previous: int,
    aliases: list,
) -> dict:
    """KFP step (Vertex, after the deploy succeeded): at 100 % undeploy the endpoint's other models (but the
    `keep_previous` newest) and move the champion aliases to the new version; a canary changes nothing.

    Args:
        endpoint: The endpoint the new version was deployed on.
        model: The uploaded model version.
        traffic_percentage: The new version's share of the traffic in % (100: a full rollout).
        keep_previous: Previous deployed models kept (at 0 %) after a full rollout.
        aliases: Version aliases moved to the new version (the first marks the champion).
    """
    from components.lib.vertex.rollout import finish_rollout

    return finish_rollout(
        endpoint.metadata["resourceName"],
        model.metadata["resourceName"],
        traffic_percentage,
        keep_previous,
        list(aliases),
    ).as_json()
