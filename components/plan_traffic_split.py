"""The plan of a Vertex AI deploy (`components.lib.vertex.rollout.plan_deploy`): the traffic split, whether the
version is deployed already, and the split before it."""

from typing import NamedTuple

from kfp.dsl import Artifact, Input


def plan_traffic_split(model: Input[Artifact], endpoint_name: str, traffic_percentage: int, alias: str) -> NamedTuple(
    "Outputs", [("traffic_split", dict), ("deployed_model_id", str), ("previous_split", dict)]
):
    """KFP step (Vertex): the deploy of `model` with `traffic_percentage` % on the endpoint (`endpoint_name` "": a
    new endpoint, nothing else serves): the split (a canary's share taken from the champion's deployed model),
    the id of the version's deployed model when it is deployed already ("": deploy it), the endpoint's split before
    the deploy (what a rejected deploy restores).

    Args:
        model: The registry model version to deploy (`resourceName` MODEL@VERSION).
        endpoint_name: The endpoint's resource name (empty: a new endpoint).
        traffic_percentage: The version's share of the traffic in %.
        alias: The version alias that marks the champion.
    """
    from collections import namedtuple

    from components.lib.vertex.rollout import plan_deploy

    plan = plan_deploy(endpoint_name, model.metadata["resourceName"], traffic_percentage, alias)
    if plan.deployed_model_id:
        print(f"{model.metadata['resourceName']} is deployed already as {plan.deployed_model_id}: no new deploy")
    elif traffic_percentage < 100 and plan.traffic_split == {"0": 100}:
        print(f"nothing else serves on {endpoint_name or 'the new endpoint'}: the new model takes all traffic")
    print(f"traffic split {plan.traffic_split}; canaries replaced: {', '.join(plan.replaced) or 'none'}")
    Outputs = namedtuple("Outputs", ["traffic_split", "deployed_model_id", "previous_split"])
    return Outputs(plan.traffic_split, plan.deployed_model_id, plan.previous_split)
