"""One clean Vertex AI endpoint: what a deploy of a model version does to the endpoint's other deployed models and to
the champion alias, and the `promote` / `rollback` of a canary. The endpoint holds the champion, at most one canary
and the `keep_previous` models a full rollout kept.

- The deploy's plan: a version already deployed is not deployed again (its traffic is set when it should change);
  a canary takes its share from the champion's deployed model, and the canary it replaces is undeployed once the
  new one serves (a later run of an unchanged model finds it deployed and changes nothing). Canaries are told from
  the models a full rollout kept by their deploy time: deployed after the champion's deployed model, not before;
  so a canary left at 0 % by two deploys at once is undeployed too.
- A full rollout (100 % of the traffic) undeploys the endpoint's other deployed models once the new one serves,
  but the `keep_previous` most recently deployed (left at 0 % for a quick rollback), and moves the champion aliases
  to the new version.
- A canary (< 100 %) leaves the other models serving their share and the aliases where they are. `promote` later
  gives it all the traffic, with a full rollout's clean-up; `rollback` gives the previous deployed model all the
  traffic, undeploys the newest and moves the aliases back if the newest held them.
Plain functions over the Vertex AI GAPIC clients, for the steps `finish_vertex_rollout` and `crown_vertex_model`
and the CLI.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from components.lib.vertex.registry import location_of, proportional, service_client
from core.retries import policy

DEFAULT_ALIAS = "default"  # Vertex's reserved alias of the version used when a model is named without a version
OPERATION_TIMEOUT = 1800  # seconds an undeploy may take


class RolloutError(RuntimeError):
    """The endpoint is not in a state the operation can act on (user-facing message)."""


@dataclass(frozen=True)
class DeployPlan:
    """A deploy of a version on the endpoint. `deployed_model_id` "": the version is not deployed yet (DeployModel
    with `traffic_split`, "0" naming the new deployed model); else the id of its deployed model (no DeployModel:
    the endpoint gets `traffic_split` when it differs). `replaced`: the canaries that stop serving (the rollout's
    end undeploys them). `previous_split`: the endpoint's split before the deploy (what a rejected deploy
    restores)."""

    traffic_split: dict[str, int]
    deployed_model_id: str
    replaced: list[str]
    previous_split: dict[str, int]


@dataclass(frozen=True)
class Rollout:
    """The end of a rollout: the new deployed model, whether it is a canary, the deployed models undeployed and
    those kept."""

    deployed_model_id: str
    canary: bool
    undeployed: list[str]
    kept: list[str]

    def as_json(self) -> dict:
        """The `finish_vertex_rollout` step's output, the fields in this order."""
        return asdict(self)


@dataclass(frozen=True)
class Promotion:
    """A promoted canary: its deployed model and version, and the deployed models undeployed."""

    deployed_model_id: str
    model_version: str
    undeployed: list[str]


@dataclass(frozen=True)
class Rollback:
    """The deployed model and version serving again, the deployed model undeployed, and whether the aliases moved
    back to that version."""

    deployed_model_id: str
    model_version: str
    undeployed: list[str]
    aliases_moved: bool


def version_name(deployed) -> str:
    """`projects/.../models/ID@VERSION` of a DeployedModel (Vertex gives its `model` without a version, and with the
    project's number, and the version in `model_version_id`)."""
    return f"{deployed.model.partition('@')[0]}@{deployed.model_version_id}"


def model_version_ids(resource_name: str) -> tuple[str, str, str]:
    """(location, model ID, version) of `projects/P/locations/L/models/ID[@VERSION]`: what identifies a version
    whether the project is named by its ID or by its number."""
    name, _, version = resource_name.partition("@")
    parts = name.split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or parts[4] != "models":
        raise ValueError(f"not a model resource name: {resource_name!r}")
    return parts[3], parts[5], version


def deployed_models(endpoint_name: str) -> tuple[list, dict[str, int]]:
    """The endpoint's deployed models, oldest deployment first, and its traffic split."""
    endpoint = service_client("endpoint", location_of(endpoint_name)).get_endpoint(name=endpoint_name, retry=policy())
    ordered = sorted(endpoint.deployed_models, key=lambda d: (_created(d), d.id))
    return ordered, dict(endpoint.traffic_split)


def set_traffic(endpoint_name: str, split: dict[str, int]) -> None:
    """Replace the endpoint's traffic split ({deployed model id: percent}; UpdateEndpoint on `traffic_split` only)."""
    from google.cloud.aiplatform_v1.types import Endpoint
    from google.protobuf import field_mask_pb2

    service_client("endpoint", location_of(endpoint_name)).update_endpoint(
        endpoint=Endpoint(name=endpoint_name, traffic_split=split),
        update_mask=field_mask_pb2.FieldMask(paths=["traffic_split"]),
        retry=policy(),
    )


def undeploy_one(endpoint_name: str, deployed_model_id: str, traffic_split: dict[str, int] | None = None) -> None:
    """UndeployModel, waited for; `traffic_split`: the endpoint's split afterwards, for a model that serves traffic
    (Vertex refuses to undeploy one without it)."""
    service_client("endpoint", location_of(endpoint_name)).undeploy_model(
        endpoint=endpoint_name,
        deployed_model_id=deployed_model_id,
        traffic_split=traffic_split or {},
        retry=policy(idempotent=False),
    ).result(timeout=OPERATION_TIMEOUT, retry=policy())


def undeploy(endpoint_name: str, deployed_model_ids: list[str], echo=print) -> None:
    """Undeploy deployed models that serve no traffic, one after the other, waiting for each."""
    for deployed_model_id in deployed_model_ids:
        undeploy_one(endpoint_name, deployed_model_id)
        echo(f"undeployed {deployed_model_id} from {endpoint_name}")


def move_aliases(model_version: str, aliases: list[str], echo=print) -> None:
    """Give `model_version` (`projects/.../models/ID@VERSION`) the aliases and make it the model's default version
    (an alias names one version of a model: merging moves it from the version that held it)."""
    wanted = [*aliases, DEFAULT_ALIAS] if DEFAULT_ALIAS not in aliases else list(aliases)
    service_client("model", location_of(model_version)).merge_version_aliases(
        name=model_version, version_aliases=wanted, retry=policy()
    )
    echo(f"aliases {', '.join(wanted)} -> {model_version}")


def _retired(others: list, keep_previous: int) -> list:
    """Of the other deployed models (oldest first), those to undeploy: all but the `keep_previous` newest."""
    return others[: max(len(others) - keep_previous, 0)]


def _deployed(deployed: list, model_version: str) -> list:
    wanted = model_version_ids(model_version)
    return [d for d in deployed if model_version_ids(version_name(d)) == wanted]


def find_deployed(deployed: list, model_version: str):
    """The newest deployed model of `model_version` among `deployed`; RolloutError when none."""
    matches = _deployed(deployed, model_version)
    if not matches:
        raise RolloutError(f"{model_version} is not deployed on the endpoint")
    return matches[-1]


def _champion_ids(deployed: list, model_version: str, alias: str) -> set[str]:
    """Ids of the deployed models serving the version of `model_version`'s registry model that holds `alias`."""
    from google.api_core.exceptions import NotFound

    if not alias:
        return set()
    location, model_id, _ = model_version_ids(model_version)
    try:
        champion = service_client("model", location).get_model(
            name=f"{model_version.partition('@')[0]}@{alias}", retry=policy()
        )
    except NotFound:
        return set()
    wanted = (location, model_id, champion.version_id)
    return {d.id for d in deployed if model_version_ids(version_name(d)) == wanted}


def _created(deployed) -> float:
    return deployed.create_time.timestamp() if deployed.create_time else 0


def _stale_canaries(deployed: list, champion: set[str], keep: str, split: dict) -> list:
    """The deployed models at 0 % deployed after the champion's (canaries a later deploy replaced; a model an
    earlier full rollout kept was deployed before the champion), `keep` left out; none without the champion."""
    if not champion:
        return []
    since = max(_created(d) for d in deployed if d.id in champion)
    return [
        d
        for d in deployed
        if d.id != keep and d.id not in champion and _created(d) > since and not int(split.get(d.id, 0))
    ]


def plan_deploy(endpoint_name: str, model_version: str, traffic_percentage: int, alias: str) -> DeployPlan:
    """The deploy of `model_version` with `traffic_percentage` % on the endpoint (`endpoint_name` "": a new one).
    A canary's share comes from the deployed models of the version holding `alias` (the champion), and the other
    models serving (earlier canaries) are replaced; without the champion on the endpoint, from every model serving,
    in proportion. A full rollout replaces the earlier canaries too. A version already deployed keeps its deployed
    model; if it holds `alias`, the split stays as it is."""
    from components.lib.vertex.registry import traffic_split

    if not 1 <= traffic_percentage <= 100:
        raise ValueError(f"traffic_percentage must be in 1..100, got {traffic_percentage}")
    if not endpoint_name:
        return DeployPlan({"0": 100}, "", [], {})
    deployed, current = deployed_models(endpoint_name)
    before = {k: int(v) for k, v in current.items()}
    same = _deployed(deployed, model_version)
    new_id = same[-1].id if same else "0"
    champion = _champion_ids(deployed, model_version, alias)
    if new_id in champion:
        return DeployPlan(dict(before), new_id, [], before)
    serving = {k: int(v) for k, v in current.items() if int(v) > 0 and k != new_id}
    kept = {k: v for k, v in serving.items() if k in champion} or serving
    split = {(new_id if k == "0" else k): v for k, v in traffic_split(kept, traffic_percentage).items()}
    replaced = sorted(set(serving) - set(kept))
    return DeployPlan(split, "" if new_id == "0" else new_id, replaced, before)


def finish_rollout(
    endpoint_name: str,
    model_version: str,
    traffic_percentage: int,
    keep_previous: int,
    aliases: list[str],
    traffic_split: dict[str, int] | None = None,
    echo=print,
) -> Rollout:
    """After `model_version` was deployed with `traffic_percentage` % (or found deployed: the endpoint then gets
    `traffic_split` when it differs; deployed and since replaced by another run's deploy: nothing): undeploy the
    canaries that serve no more (deployed after the champion held by
    the first of `aliases`); when the version serves all the traffic (100 %, or a canary on an endpoint where nothing
    else served), undeploy the others too (but the `keep_previous` newest) and move the aliases to it; while others
    serve too (a canary), leave them and the aliases."""
    deployed, split = deployed_models(endpoint_name)
    if not traffic_split and not _deployed(deployed, model_version):
        echo(f"{model_version} was deployed and then replaced by another run's deploy: nothing left to finish")
        return Rollout("", canary=True, undeployed=[], kept=[d.id for d in deployed])
    new = find_deployed(deployed, model_version)
    if traffic_split and {k: v for k, v in traffic_split.items() if v} != {k: v for k, v in split.items() if v}:
        set_traffic(endpoint_name, dict(traffic_split))
        echo(f"{new.id} ({model_version}) was deployed already: traffic {split} -> {dict(traffic_split)}")
        split = dict(traffic_split)
    champion = _champion_ids(deployed, model_version, aliases[0] if aliases else "")
    gone = _stale_canaries(deployed, champion, new.id, split)
    undeploy(endpoint_name, [d.id for d in gone], echo)
    others = [d for d in deployed if d.id != new.id and d not in gone]
    if int(split.get(new.id, 0)) < 100:
        echo(
            f"canary: {new.id} ({model_version}) serves {split.get(new.id, 0)} %; the others keep theirs "
            f"({', '.join(f'{d.id}: {split.get(d.id, 0)} %' for d in others) or 'none'}). Promote it with "
            "`python -m pipelines promote` or roll it back with `... rollback`"
        )
        return Rollout(new.id, canary=True, undeployed=[d.id for d in gone], kept=[d.id for d in others])
    if traffic_percentage < 100:
        echo(f"{new.id} ({model_version}) serves all the traffic (nothing else served): a full rollout")
    retired = _retired(others, keep_previous)
    undeploy(endpoint_name, [d.id for d in retired], echo)
    move_aliases(model_version, aliases, echo)
    return Rollout(
        new.id,
        canary=False,
        undeployed=[d.id for d in [*gone, *retired]],
        kept=[d.id for d in others if d not in retired],
    )


def promote(
    endpoint_name: str, keep_previous: int, aliases: list[str], deployed_model_id: str = "", echo=print
) -> Promotion:
    """Give the canary (`deployed_model_id`, default the most recently deployed model) all the traffic, undeploy
    the other canaries and the others but the `keep_previous` newest, move the aliases to its version."""
    deployed, split = deployed_models(endpoint_name)
    if not deployed:
        raise RolloutError(f"nothing is deployed on {endpoint_name}")
    matches = [d for d in deployed if d.id == deployed_model_id] if deployed_model_id else deployed[-1:]
    if not matches:
        raise RolloutError(
            f"no deployed model {deployed_model_id} on {endpoint_name}; deployed: " + ", ".join(d.id for d in deployed)
        )
    canary = matches[0]
    set_traffic(endpoint_name, {canary.id: 100})
    echo(f"{canary.id} ({version_name(canary)}) now serves 100 % (was {split.get(canary.id, 0)} %)")
    champion = _champion_ids(deployed, version_name(canary), aliases[0] if aliases else "")
    gone = _stale_canaries(deployed, champion, canary.id, {canary.id: 100})
    others = [d for d in deployed if d.id != canary.id and d not in gone]
    retired = [*gone, *_retired(others, keep_previous)]
    undeploy(endpoint_name, [d.id for d in retired], echo)
    move_aliases(version_name(canary), aliases, echo)
    return Promotion(canary.id, version_name(canary), undeployed=[d.id for d in retired])


def rollback(endpoint_name: str, aliases: list[str], echo=print) -> Rollback:
    """Give the previous deployed model (the one deployed before the newest) all the traffic and undeploy the
    newest; if the newest held the champion alias, move the aliases back to the previous model's version."""
    deployed, split = deployed_models(endpoint_name)
    if len(deployed) < 2:
        raise RolloutError(
            f"nothing to roll back to on {endpoint_name}: {len(deployed)} deployed model(s). A full "
            "rollout keeps platform.keep_previous earlier models deployed for this; redeploy a "
            "registry version to go back"
        )
    newest, previous = deployed[-1], deployed[-2]
    set_traffic(endpoint_name, {previous.id: 100})
    echo(f"{previous.id} ({version_name(previous)}) now serves 100 %")
    held_alias = False
    if aliases:
        model = service_client("model", location_of(endpoint_name)).get_model(name=version_name(newest), retry=policy())
        held_alias = aliases[0] in model.version_aliases
    undeploy(endpoint_name, [newest.id], echo)
    if held_alias:
        move_aliases(version_name(previous), aliases, echo)
    return Rollback(previous.id, version_name(previous), undeployed=[newest.id], aliases_moved=held_alias)


@dataclass(frozen=True)
class Removal:
    """A deployed model taken off the endpoint, its version, and the split the endpoint serves afterwards."""

    deployed_model_id: str
    model_version: str
    traffic_split: dict[str, int]


@dataclass(frozen=True)
class Deletion:
    """A deleted endpoint and the deployed models undeployed before it."""

    endpoint_name: str
    undeployed: list[str]


def take_off(endpoint_name: str, deployed_model_ids: Sequence[str], split: dict, echo=print) -> dict[str, int]:
    """Undeploy `deployed_model_ids` from an endpoint whose split is `split`, their traffic given to the other
    models serving, in proportion; when none serves, the endpoint's split is emptied first (it then answers no
    prediction), since Vertex refuses to undeploy a model that serves traffic. Returns the split left."""
    split = {k: int(v) for k, v in split.items() if int(v)}
    for deployed_model_id in deployed_model_ids:
        share = split.pop(deployed_model_id, 0)
        split = proportional(split, 100)
        if share and not split:
            set_traffic(endpoint_name, {})
        undeploy_one(endpoint_name, deployed_model_id, split if share else None)
        echo(f"undeployed {deployed_model_id} from {endpoint_name}" + (f"; traffic {split}" if share else ""))
    return split


def undeploy_model(endpoint_name: str, deployed_model_id: str, force: bool = False, echo=print) -> Removal:
    """Take `deployed_model_id` off the endpoint, its traffic given to the models still serving in proportion to
    their shares. The last model serving traffic is refused unless `force` (the endpoint then serves nothing).
    The version aliases stay where they are."""
    deployed, split = deployed_models(endpoint_name)
    matches = [d for d in deployed if d.id == deployed_model_id]
    if not matches:
        raise RolloutError(
            f"no deployed model {deployed_model_id} on {endpoint_name}; deployed: "
            + (", ".join(d.id for d in deployed) or "none")
        )
    others = {k: int(v) for k, v in split.items() if k != deployed_model_id and int(v)}
    if int(split.get(deployed_model_id, 0)) and not others and not force:
        raise RolloutError(
            f"{deployed_model_id} ({version_name(matches[0])}) is the only model serving traffic on {endpoint_name}: "
            "--force takes it off anyway (the endpoint then answers no prediction); delete-endpoint removes the "
            "endpoint and every model on it"
        )
    left = take_off(endpoint_name, [deployed_model_id], dict(split), echo)
    return Removal(deployed_model_id, version_name(matches[0]), left)


def delete_endpoint(endpoint_name: str, force: bool = False, echo=print) -> Deletion:
    """Undeploy every model of the endpoint (those without traffic first), then delete it (Vertex refuses to delete
    an endpoint with deployed models). An endpoint serving traffic is refused unless `force`."""
    deployed, split = deployed_models(endpoint_name)
    serving = {k: int(v) for k, v in split.items() if int(v)}
    if serving and not force:
        shares = ", ".join(f"{k}: {v} %" for k, v in sorted(serving.items()))
        raise RolloutError(
            f"{endpoint_name} serves traffic ({shares}): --force undeploys its models and deletes it anyway"
        )
    order = sorted((d.id for d in deployed), key=lambda i: (serving.get(i, 0), i))
    take_off(endpoint_name, order, split, echo)
    service_client("endpoint", location_of(endpoint_name)).delete_endpoint(name=endpoint_name).result(
        timeout=OPERATION_TIMEOUT
    )
    echo(f"deleted {endpoint_name}")
    return Deletion(endpoint_name, order)
