"""The end of a Vertex AI rollout (`components.lib.vertex.rollout`): undeploy the canaries that serve no more and the
previous models, move the aliases."""

from kfp.dsl import Artifact, Input


def finish_vertex_rollout(
    endpoint: Input[Artifact],
    model: Input[Artifact],
    traffic_percentage: int,
    keep_previous: int,
    aliases: list,
    traffic_split: dict,
) -> dict:
    """KFP step (Vertex, after the deploy succeeded, or with the version found deployed): undeploy the canaries that
    serve no more; at 100 % undeploy the endpoint's other models too (but the `keep_previous` newest) and move the
    champion aliases to the new version; a canary leaves the champion and the aliases.

    Args:
        endpoint: The endpoint the version is deployed on.
        model: The model version (uploaded, or found registered).
        traffic_percentage: The version's share of the traffic in % (100: a full rollout).
        keep_previous: Previous deployed models kept (at 0 %) after a full rollout.
        aliases: Version aliases moved to the new version (the first marks the champion).
        traffic_split: The split to set when the version was deployed already (empty: the deploy set it).
    """
    from components.lib.vertex.rollout import finish_rollout

    return finish_rollout(
        endpoint.metadata["resourceName"],
        model.metadata["resourceName"],
        traffic_percentage,
        keep_previous,
        list(aliases),
        dict(traffic_split),
    ).as_json()
