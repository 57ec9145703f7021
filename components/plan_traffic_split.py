"""The traffic split of a Vertex AI deploy: a canary keeps the endpoint's current models serving the rest."""


def plan_traffic_split(endpoint_name: str, traffic_percentage: int) -> dict:
    """KFP step (Vertex): ModelDeployOp's `traffic_split` for a rollout of `traffic_percentage` % to the new model
    (`endpoint_name` "": a new endpoint, nothing else serves).

    Args:
        endpoint_name: The endpoint's resource name (empty: a new endpoint).
        traffic_percentage: The new model's share of the traffic in %.
    """
    from components.lib.vertex.registry import endpoint_traffic, traffic_split

    current = endpoint_traffic(endpoint_name) if endpoint_name else {}
    split = traffic_split(current, traffic_percentage)
    if traffic_percentage < 100 and split == {"0": 100}:
        print(f"nothing else serves on {endpoint_name or 'the new endpoint'}: the new model takes all traffic")
    print(f"current traffic {current}; new split {split}")
    return split
