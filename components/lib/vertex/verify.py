"""A Vertex AI deploy proved through the endpoint before the rollout finishes: the smoke examples the evaluation gate
saved (`components.lib.deploy.smoke`) sent to the endpoint's predict API, and the answers of the new deployed model
compared with the class ids its SavedModel gave them at the gate. A failure undeploys the new deployed model,
restoring the endpoint's split from before the deploy.

A public endpoint's `:predict` has no way to name the deployed model that answers (Explain's `deployed_model_id`
needs an explanation spec, the per-deployed-model `invoke` route a dedicated endpoint): the traffic split picks
it, and `PredictResponse.deployed_model_id` says which one answered. So a canary's check repeats a prediction
until the new deployed model has answered it, at most `predictions_needed(share)` times; other models' answers are
not checked.

Other runs deploy to the same endpoint meanwhile (a schedule's run beside a run on merge): the endpoint is read again
before anything is undeployed. A canary another run's deploy left at 0 % (or took off) while it was checked is not
rejected for not being picked: it no longer serves, and the rollout's end of one of the runs takes it off.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from components.lib.vertex.registry import location_of, proportional, service_client
from components.lib.vertex.rollout import deployed_models, find_deployed, take_off, undeploy_one

MISS_CHANCE = 1e-4  # the chance that a healthy canary is never picked by the traffic split within the predictions
MAX_PREDICTIONS = 1000  # per check: a 1 % canary is picked within them but with a chance of 4e-5


class DeployRejected(RuntimeError):
    """The new deployed model did not answer as the published model does; it was undeployed (one-line message)."""


class NotPicked(RuntimeError):
    """The traffic split never picked the deployed model within the predictions a check may send."""


@dataclass(frozen=True)
class Verification:
    """The new deployed model's verified answers: its id, the predictions sent, and the smoke record
    (`smoke.smoke_record`)."""

    deployed_model_id: str
    predictions: int
    smoke: dict

    def as_json(self) -> dict:
        return {"deployed_model_id": self.deployed_model_id, "predictions": self.predictions, "smoke": self.smoke}


def predictions_needed(share: int) -> int:
    """How many predictions reach a deployed model serving `share` % of the traffic at least once, but with a
    chance below MISS_CHANCE (at most MAX_PREDICTIONS)."""
    if share >= 100:
        return 1
    if share <= 0:
        return 0
    return min(MAX_PREDICTIONS, math.ceil(math.log(MISS_CHANCE) / math.log(1 - share / 100)))


def _request(check) -> dict:
    """The predict request of a smoke check: `serving_default` as the default signature, another one named in
    `parameters` (this project's serving container reads it there, as in batch prediction)."""
    request: dict = {"instances": check.instances()}
    if check.signature != "serving_default":
        request["parameters"] = {"signature_name": check.signature}
    return request


def answer_of(endpoint_name: str, deployed_model_id: str, share: int, check) -> tuple:
    """The smoke result of `check` as `deployed_model_id` answers it through the endpoint's predict API (repeated
    until the split picks it); NotPicked when it never answers, SmokeFailed when it answers wrong."""
    from google.protobuf import json_format

    client, request = service_client("prediction", location_of(endpoint_name)), _request(check)
    needed = predictions_needed(share)
    for sent in range(1, needed + 1):
        response = client.predict(endpoint=endpoint_name, **request, timeout=60)
        if response.deployed_model_id == deployed_model_id:
            body = json_format.MessageToDict(type(response).pb(response))
            return check.compare({"predictions": [_integral(p) for p in body.get("predictions", [])]}), sent
    raise NotPicked(
        f"the traffic split never picked {deployed_model_id} ({share} %) in {needed} predictions on {check.signature}"
    )


def _integral(prediction):
    """A prediction with its `class_id` as an int when it is one (the API's JSON numbers are doubles)."""
    if isinstance(prediction, dict) and isinstance(prediction.get("class_id"), float):
        if prediction["class_id"].is_integer():
            return {**prediction, "class_id": int(prediction["class_id"])}
    return prediction


def restored_split(previous: dict, remaining: Sequence[str]) -> dict[str, int]:
    """The split from before the deploy, over the deployed models still on the endpoint (rescaled to 100 when some
    of them went meanwhile)."""
    return proportional({k: int(v) for k, v in previous.items() if k in set(remaining)}, 100)


def verify_deploy(
    endpoint_name: str, model_version: str, checks: Callable[[], list], previous_split: dict, echo=print
) -> Verification:
    """Send each of `checks()` (smoke checks, made inside the guard: a model whose answers cannot be computed is
    rejected too) to the endpoint until `model_version`'s newest deployed model answered it; its class ids must
    equal the published model's. On any failure: undeploy that deployed model with the endpoint's split restored
    to `previous_split` (over its deployed models still there then), and raise DeployRejected; but a model never
    picked because another run's deploy left it at 0 % meanwhile is reported, not rejected (module docstring)."""
    from components.lib.deploy.smoke import smoke_record

    deployed, split = deployed_models(endpoint_name)
    new = find_deployed(deployed, model_version)
    share = int(split.get(new.id, 0))
    results, sent = [], 0
    try:
        for check in checks():
            result, tries = answer_of(endpoint_name, new.id, share, check)
            results.append(result)
            sent += tries
        if not results:
            raise ValueError("no smoke examples to send")
    except Exception as e:  # noqa: BLE001 (any failure of the check rejects the deploy)
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        deployed, split = deployed_models(endpoint_name)  # as other runs left it meanwhile
        share = int(split.get(new.id, 0)) if any(d.id == new.id for d in deployed) else -1
        if isinstance(e, NotPicked) and share <= 0:
            echo(
                f"{new.id} ({model_version}) serves no traffic any more: another run's deploy replaced it while it "
                f"was checked ({what}); not checked through the endpoint"
            )
            return Verification(new.id, sent, smoke_record(results) if results else {})
        try:
            if share < 0:
                raise RuntimeError(f"{new.id} is no longer on the endpoint (another run took it off)")
            restore = restored_split(previous_split, [d.id for d in deployed if d.id != new.id])
            left = _reject(endpoint_name, new.id, share, split, restore, echo)
        except Exception as undo:  # noqa: BLE001
            raise DeployRejected(
                f"deployed model {new.id} ({model_version}) failed its check through {endpoint_name}: {what}; "
                f"undeploying it failed too: {str(undo).splitlines()[0] if str(undo) else type(undo).__name__}"
            ) from e
        raise DeployRejected(
            f"deployed model {new.id} ({model_version}) failed its check through {endpoint_name}: {what}; "
            f"undeployed it, traffic {left or 'none (nothing else was deployed)'}"
        ) from e
    echo(
        f"{new.id} ({model_version}) answered {len(results)} check(s) as the published model does ({sent} predictions)"
    )
    return Verification(new.id, sent, smoke_record(results))


def _reject(endpoint_name: str, deployed_model_id: str, share: int, split: dict, restore: dict, echo) -> dict:
    """Undeploy the rejected deployed model in one UndeployModel carrying the restored split (when it had traffic and
    others may take it), else as `take_off` does."""
    if share and restore:
        undeploy_one(endpoint_name, deployed_model_id, restore)
        echo(f"undeployed {deployed_model_id} from {endpoint_name}; traffic {restore}")
        return restore
    return take_off(endpoint_name, [deployed_model_id], split, echo)
