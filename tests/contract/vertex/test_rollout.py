"""One clean Vertex AI endpoint (components/lib/vertex/rollout.py): what a full rollout, a canary, `promote` and
`rollback` ask of Vertex AI, asserted request by request at the GAPIC boundary (tests/doubles/gapic.py's RegistryDouble)."""

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.types import Endpoint, endpoint_service, model_service
from google.protobuf import field_mask_pb2
from kfp import dsl

from components.crown_vertex_model import crown_vertex_model
from components.finish_vertex_rollout import finish_vertex_rollout
from components.lib.vertex.rollout import (
    DeployPlan,
    Promotion,
    Rollback,
    Rollout,
    RolloutError,
    finish_rollout,
    plan_deploy,
    promote,
    rollback,
)
from components.plan_traffic_split import plan_traffic_split
from tests.doubles.gapic import RegistryDouble, numbered

ENDPOINT = "projects/my-project/locations/europe-west4/endpoints/777"
MODEL = "projects/my-project/locations/europe-west4/models/111"
ANSWERED_MODEL = numbered(MODEL)  # as Vertex names it in its answers: with the project's number
ALIASES = ["champion", "blue"]


@pytest.fixture(autouse=True)
def anonymous(monkeypatch):
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "other-project"))


def double(monkeypatch, deployed, split, aliases=None):
    return RegistryDouble(monkeypatch, ENDPOINT, MODEL, deployed, split, aliases or {"champion": "1", "default": "1"})


def get_endpoint(endpoint=ENDPOINT):
    return ("get_endpoint", endpoint_service.GetEndpointRequest(name=endpoint))


def undeploy(deployed_model_id, endpoint=ENDPOINT):
    return (
        "undeploy_model",
        endpoint_service.UndeployModelRequest(endpoint=endpoint, deployed_model_id=deployed_model_id),
    )


def merge(version, aliases=("champion", "blue", "default"), model=MODEL):
    return (
        "merge_version_aliases",
        model_service.MergeVersionAliasesRequest(name=f"{model}@{version}", version_aliases=list(aliases)),
    )


def champion(model=MODEL, alias="champion"):
    return ("get_model", model_service.GetModelRequest(name=f"{model}@{alias}"))


def traffic(split, endpoint=ENDPOINT):
    return (
        "update_endpoint",
        endpoint_service.UpdateEndpointRequest(
            endpoint=Endpoint(name=endpoint, traffic_split=split),
            update_mask=field_mask_pb2.FieldMask(paths=["traffic_split"]),
        ),
    )


def test_a_new_canary_takes_its_share_from_the_champion_and_replaces_the_earlier_canary(monkeypatch):
    # version 1 is the champion at 90 %, version 2 an earlier canary at 10 %; version 3 comes as a 10 % canary
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    plan = plan_deploy(ENDPOINT, f"{MODEL}@3", 10, "champion")
    assert plan == DeployPlan(
        traffic_split={"0": 10, "d1": 90}, deployed_model_id="", replaced=["d2"], previous_split={"d1": 90, "d2": 10}
    )
    assert vertex.calls == [get_endpoint(), champion()]
    # DeployModel with that split (d2 left out of it: 0 %), then the rollout's end undeploys the replaced canary
    vertex.deployed.append(("d3", "3", 300))
    vertex.split, vertex.calls = {"d3": 10, "d1": 90}, []
    result = finish_rollout(ENDPOINT, f"{MODEL}@3", 10, 1, ALIASES)
    assert vertex.calls == [get_endpoint(), champion(), undeploy("d2")]
    assert result == Rollout(deployed_model_id="d3", canary=True, undeployed=["d2"], kept=["d1"])
    assert [d[0] for d in vertex.deployed] == ["d1", "d3"] and vertex.aliases["champion"] == "1"


def test_a_version_deployed_already_is_not_deployed_again(monkeypatch):
    # the canary's run again on unchanged data: the same version, deployed, at the share asked: nothing changes
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    plan = plan_deploy(ENDPOINT, f"{MODEL}@2", 10, "champion")
    assert plan == DeployPlan(
        traffic_split={"d2": 10, "d1": 90}, deployed_model_id="d2", replaced=[], previous_split={"d1": 90, "d2": 10}
    )
    vertex.calls = []
    result = finish_rollout(ENDPOINT, f"{MODEL}@2", 10, 1, ALIASES, plan.traffic_split)
    assert vertex.calls == [get_endpoint(), champion()]  # no traffic change, nothing undeployed, no alias moved
    assert result == Rollout(deployed_model_id="d2", canary=True, undeployed=[], kept=["d1"])
    # asked for all the traffic now: its split is set, the rest of a full rollout follows
    plan = plan_deploy(ENDPOINT, f"{MODEL}@2", 100, "champion")
    assert plan == DeployPlan(
        traffic_split={"d2": 100}, deployed_model_id="d2", replaced=[], previous_split={"d1": 90, "d2": 10}
    )
    vertex.calls = []
    result = finish_rollout(ENDPOINT, f"{MODEL}@2", 100, 0, ALIASES, plan.traffic_split)
    assert vertex.calls == [get_endpoint(), traffic({"d2": 100}), champion(), undeploy("d1"), merge("2")]
    assert result == Rollout(deployed_model_id="d2", canary=False, undeployed=["d1"], kept=[])


def test_two_canaries_deployed_at_once_leave_one(monkeypatch, capsys):
    # two runs planned their canaries before either deployed: both split {"0": 10, champion: 90}, so the second
    # deploy (d3) left the first one (d2) at 0 %. The second run's end undeploys d2: deployed after the champion,
    # it is no model a rollout kept; the first run's end then finds its version replaced, which is no failure
    vertex = double(
        monkeypatch,
        [("d0", "0", 50), ("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)],
        {"d1": 90, "d3": 10},
    )
    second = finish_rollout(ENDPOINT, f"{MODEL}@3", 10, 1, ALIASES)
    assert vertex.calls == [get_endpoint(), champion(), undeploy("d2")]
    assert second == Rollout(deployed_model_id="d3", canary=True, undeployed=["d2"], kept=["d0", "d1"])
    vertex.calls = []
    first = finish_rollout(ENDPOINT, f"{MODEL}@2", 10, 1, ALIASES)
    assert vertex.calls == [get_endpoint()]
    assert first == Rollout(deployed_model_id="", canary=True, undeployed=[], kept=["d0", "d1", "d3"])
    assert f"{MODEL}@2 was deployed and then replaced by another run's deploy" in capsys.readouterr().out
    assert [d[0] for d in vertex.deployed] == ["d0", "d1", "d3"] and vertex.split == {"d1": 90, "d3": 10}


def test_the_champion_found_deployed_keeps_the_endpoint_as_it_is(monkeypatch):
    vertex = double(monkeypatch, [("d0", "0", 50), ("d1", "1", 100)], {"d1": 100})
    plan = plan_deploy(ENDPOINT, f"{MODEL}@1", 10, "champion")  # a canary's run whose model is the champion
    assert plan == DeployPlan(
        traffic_split={"d1": 100}, deployed_model_id="d1", replaced=[], previous_split={"d1": 100}
    )
    vertex.calls = []
    result = finish_rollout(ENDPOINT, f"{MODEL}@1", 10, 1, ALIASES, plan.traffic_split)
    assert vertex.calls == [get_endpoint(), champion(), merge("1")]  # aliases merged again (no change); d0 kept
    assert result == Rollout(deployed_model_id="d1", canary=False, undeployed=[], kept=["d0"])


def test_a_full_rollout_undeploys_the_canary_before_keeping_previous_models(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    plan = plan_deploy(ENDPOINT, f"{MODEL}@3", 100, "champion")
    assert plan == DeployPlan(
        traffic_split={"0": 100}, deployed_model_id="", replaced=["d2"], previous_split={"d1": 90, "d2": 10}
    )
    vertex.deployed.append(("d3", "3", 300))
    vertex.split, vertex.calls = {"d3": 100}, []
    result = finish_rollout(ENDPOINT, f"{MODEL}@3", 100, 1, ALIASES)
    assert vertex.calls == [get_endpoint(), champion(), undeploy("d2"), merge("3")]  # the champion is the one kept
    assert result == Rollout(deployed_model_id="d3", canary=False, undeployed=["d2"], kept=["d1"])


def test_without_the_champion_on_the_endpoint_a_canary_shares_with_every_model_serving(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 80, "d2": 20}, {"default": "1"})
    plan = plan_deploy(ENDPOINT, f"{MODEL}@3", 10, "champion")  # no version holds the alias
    assert plan == DeployPlan(
        traffic_split={"0": 10, "d1": 72, "d2": 18},
        deployed_model_id="",
        replaced=[],
        previous_split={"d1": 80, "d2": 20},
    )
    assert vertex.calls == [get_endpoint(), champion()]
    assert plan_deploy("", f"{MODEL}@3", 10, "champion") == DeployPlan({"0": 100}, "", [], {})  # a new endpoint
    assert len(vertex.calls) == 2  # ... is not read
    with pytest.raises(ValueError, match="traffic_percentage must be in 1..100"):
        plan_deploy(ENDPOINT, f"{MODEL}@3", 0, "champion")


def test_plan_traffic_split_reads_the_resource_name_of_its_model(monkeypatch, capsys):
    double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    model = dsl.Artifact(uri="https://x/v1/m", metadata={"resourceName": f"{MODEL}@2"})
    assert plan_traffic_split(model, ENDPOINT, 10, "champion") == ({"d2": 10, "d1": 90}, "d2", {"d1": 90, "d2": 10})
    assert f"{MODEL}@2 is deployed already as d2: no new deploy" in capsys.readouterr().out


def test_full_rollout_undeploys_the_previous_models_and_moves_the_aliases(monkeypatch):
    # version 3 was just deployed at 100 %; versions 1 and 2 stayed deployed at 0 %
    vertex = double(monkeypatch, [("d2", "2", 200), ("d1", "1", 100), ("d3", "3", 300)], {"d3": 100})
    result = finish_rollout(ENDPOINT, f"{MODEL}@3", 100, 0, ALIASES)
    # d2, deployed after the champion's d1, was a canary: undeployed first
    assert vertex.calls == [get_endpoint(), champion(), undeploy("d2"), undeploy("d1"), merge("3")]
    assert result == Rollout(deployed_model_id="d3", canary=False, undeployed=["d2", "d1"], kept=[])
    assert [d[0] for d in vertex.deployed] == ["d3"] and vertex.split == {"d3": 100}
    assert vertex.aliases == {"champion": "3", "blue": "3", "default": "3"}


def test_full_rollout_keeps_the_newest_previous_models(monkeypatch):
    # version 2 was the champion (version 1 the one before it): both are previous models, the newest is kept
    champion_2 = {"champion": "2", "default": "2"}
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d3": 100}, champion_2)
    result = finish_rollout(ENDPOINT, f"{MODEL}@3", 100, 1, ALIASES)
    assert vertex.calls == [get_endpoint(), champion(), undeploy("d1"), merge("3")]
    assert result.undeployed == ["d1"] and result.kept == ["d2"]


def test_a_canary_leaves_the_endpoint_and_the_aliases_alone(monkeypatch, capsys):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    result = finish_rollout(ENDPOINT, f"{MODEL}@2", 10, 0, ALIASES)
    assert vertex.calls == [get_endpoint(), champion()]  # nothing undeployed, no alias moved
    assert result == Rollout(deployed_model_id="d2", canary=True, undeployed=[], kept=["d1"])
    assert "canary: d2" in capsys.readouterr().out and vertex.aliases["champion"] == "1"


def test_a_canary_that_got_all_the_traffic_is_a_full_rollout(monkeypatch, capsys):
    # a 10 % canary where the only other model served 0 % (kept by an earlier rollout): the split gave it 100 %
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d2": 100})
    result = finish_rollout(ENDPOINT, f"{MODEL}@2", 10, 0, ALIASES)
    assert vertex.calls == [get_endpoint(), champion(), undeploy("d1"), merge("2")]
    assert result == Rollout(deployed_model_id="d2", canary=False, undeployed=["d1"], kept=[])
    assert "serves all the traffic (nothing else served): a full rollout" in capsys.readouterr().out
    assert vertex.aliases["champion"] == "2"


def test_finish_rollout_needs_the_version_it_found_deployed(monkeypatch):
    # the plan found version 2 deployed (as d2); it was undeployed before the rollout's end
    vertex = double(monkeypatch, [("d1", "1", 100)], {"d1": 100})
    with pytest.raises(RolloutError, match=f"{MODEL}@2 is not deployed on the endpoint"):
        finish_rollout(ENDPOINT, f"{MODEL}@2", 100, 0, ALIASES, {"d2": 100})
    assert vertex.calls == [get_endpoint()]


def test_promote_gives_the_canary_all_traffic_undeploys_the_rest_and_crowns_it(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    result = promote(ENDPOINT, 0, ALIASES)
    assert vertex.calls == [
        get_endpoint(),
        traffic({"d2": 100}),
        champion(ANSWERED_MODEL),
        undeploy("d1"),
        merge("2", model=ANSWERED_MODEL),
    ]
    assert result == Promotion(deployed_model_id="d2", model_version=f"{ANSWERED_MODEL}@2", undeployed=["d1"])
    assert vertex.split == {"d2": 100} and vertex.aliases["champion"] == "2"


def test_promote_a_named_deployed_model_keeping_one(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d1": 80, "d2": 10, "d3": 10})
    promote(ENDPOINT, 1, ALIASES, deployed_model_id="d2")
    # d3, the other canary, is undeployed; the champion's d1 is the previous model kept
    assert vertex.calls == [
        get_endpoint(),
        traffic({"d2": 100}),
        champion(ANSWERED_MODEL),
        undeploy("d3"),
        merge("2", model=ANSWERED_MODEL),
    ]
    with pytest.raises(RolloutError, match="no deployed model d9 on .*; deployed: d1, d2"):
        promote(ENDPOINT, 0, ALIASES, deployed_model_id="d9")


def test_rollback_of_a_canary(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    result = rollback(ENDPOINT, ALIASES)
    assert vertex.calls == [
        get_endpoint(),
        traffic({"d1": 100}),
        ("get_model", model_service.GetModelRequest(name=f"{ANSWERED_MODEL}@2")),
        undeploy("d2"),
    ]
    assert result == Rollback(
        deployed_model_id="d1", model_version=f"{ANSWERED_MODEL}@1", undeployed=["d2"], aliases_moved=False
    )
    assert vertex.aliases["champion"] == "1"


def test_rollback_of_a_full_rollout_moves_the_aliases_back(monkeypatch):
    # keep_previous=1 left version 1 deployed at 0 %; version 2 holds the aliases
    vertex = double(
        monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d2": 100}, {"champion": "2", "blue": "2", "default": "2"}
    )
    result = rollback(ENDPOINT, ALIASES)
    assert vertex.calls == [
        get_endpoint(),
        traffic({"d1": 100}),
        ("get_model", model_service.GetModelRequest(name=f"{ANSWERED_MODEL}@2")),
        undeploy("d2"),
        merge("1", model=ANSWERED_MODEL),
    ]
    assert result.aliases_moved and vertex.aliases == {"champion": "1", "blue": "1", "default": "1"}


def test_rollback_needs_a_previous_model(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100)], {"d1": 100})
    with pytest.raises(RolloutError, match="nothing to roll back to on .*: 1 deployed model"):
        rollback(ENDPOINT, ALIASES)
    assert vertex.calls == [get_endpoint()]  # traffic untouched


def test_kfp_steps_read_the_resource_names_of_their_artifacts(monkeypatch):
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d2": 100})
    endpoint = dsl.Artifact(
        uri=f"https://europe-west4-aiplatform.googleapis.com/v1/{ENDPOINT}", metadata={"resourceName": ENDPOINT}
    )
    model = dsl.Artifact(
        uri=f"https://europe-west4-aiplatform.googleapis.com/v1/{MODEL}@2", metadata={"resourceName": f"{MODEL}@2"}
    )
    assert finish_vertex_rollout(endpoint, model, 100, 0, ALIASES, {})["undeployed"] == ["d1"]
    assert crown_vertex_model(model, ["champion"]) == f"{MODEL}@2"
    assert vertex.calls[-1] == merge("2", ["champion", "default"])


def test_promote_and_rollback_commands(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from pipelines.cli import cli

    (tmp_path / "c.yaml").write_text(
        "platform:\n  project: my-project\n  location: europe-west4\n"
        "  endpoint_display_name: digits-endpoint\n  keep_previous: 1\n"
        "  model_version_aliases: [champion, blue]\n"
    )
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d1": 50, "d2": 40, "d3": 10})
    result = CliRunner().invoke(cli, ["promote", "--config", str(tmp_path / "c.yaml")])
    assert result.exit_code == 0, result.output
    # the endpoint by display name, then the promotion with the config's keep_previous and aliases
    assert vertex.calls[0] == (
        "list_endpoints",
        endpoint_service.ListEndpointsRequest(
            parent="projects/my-project/locations/europe-west4",
            filter='display_name="digits-endpoint"',
            order_by="create_time",
        ),
    )
    found = numbered(ENDPOINT)  # the listed endpoint's name, as Vertex answers it
    assert vertex.calls[1:] == [  # d2, another canary, undeployed; the champion's d1 kept (keep_previous: 1)
        get_endpoint(found),
        traffic({"d3": 100}, found),
        champion(ANSWERED_MODEL),
        undeploy("d2", found),
        merge("3", model=ANSWERED_MODEL),
    ]
    assert result.output.splitlines()[-1] == f"promoted {ANSWERED_MODEL}@3 (deployed model d3)"

    vertex.calls.clear()
    result = CliRunner().invoke(cli, ["rollback", "--config", str(tmp_path / "c.yaml"), "--endpoint", ENDPOINT])
    assert result.exit_code == 0, result.output
    assert vertex.calls == [
        get_endpoint(),
        traffic({"d1": 100}),
        ("get_model", model_service.GetModelRequest(name=f"{ANSWERED_MODEL}@3")),
        undeploy("d3"),
        merge("1", model=ANSWERED_MODEL),
    ]
    assert result.output.splitlines()[-1] == f"rolled back to {ANSWERED_MODEL}@1 (deployed model d1)"

    result = CliRunner().invoke(cli, ["rollback", "--config", str(tmp_path / "c.yaml"), "--endpoint", ENDPOINT])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: nothing to roll back to on {ENDPOINT}: 1 deployed model(s). A full rollout "
        "keeps platform.keep_previous earlier models deployed for this; redeploy a registry "
        "version to go back\n"
    )
    (tmp_path / "c.yaml").write_text("platform:\n  location: europe-west4\n")
    result = CliRunner().invoke(cli, ["promote", "--config", str(tmp_path / "c.yaml")])
    assert result.exit_code == 1 and "platform.project is required on Vertex AI" in result.output


# --- the deploy verified through the endpoint (components/lib/vertex/verify.py) -----------------------------------

PIXELS = [[0.0, 1.0], [2.0, 3.0]]


def smoke_checks():
    import numpy as np

    from components.lib.deploy.smoke import SmokeCheck

    return [
        SmokeCheck("serving_default", np.array(PIXELS), np.array([3, 5])),
        SmokeCheck("serving_image_bytes", np.array([b"a", b"b"], dtype=object), np.array([3, 5])),
    ]


def predict(instances=PIXELS, parameters=None, endpoint=ENDPOINT):
    """A PredictRequest as the GAPIC client builds it from flattened arguments (proto-plus takes no list of
    Values in the constructor)."""
    from google.cloud.aiplatform_v1.types import prediction_service

    request = prediction_service.PredictRequest(endpoint=endpoint)
    request.instances.extend(instances)
    if parameters is not None:
        request.parameters = parameters
    return ("predict", request)


def answering(*class_ids):
    return lambda instances, parameters: [{"class_id": c, "probabilities": [0.5, 0.5]} for c in class_ids]


def test_a_canary_is_verified_on_its_own_answers_through_the_endpoint(monkeypatch):
    from components.lib.vertex.verify import Verification, verify_deploy

    # d2 (version 2) was just deployed as a 10 % canary; the champion d1 answers some predictions first
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    vertex.picks = ["d1", "d1", "d2", "d1", "d2"]
    vertex.answers = {"d1": answering(9, 9), "d2": answering(3, 5)}  # the champion's answers are not checked
    result = verify_deploy(ENDPOINT, f"{MODEL}@2", smoke_checks, {"d1": 100})
    image_bytes = dict(
        instances=[{"b64": "YQ=="}, {"b64": "Yg=="}], parameters={"signature_name": "serving_image_bytes"}
    )
    assert vertex.calls == [
        get_endpoint(),
        predict(),
        predict(),
        predict(),
        predict(**image_bytes),
        predict(**image_bytes),
    ]
    assert result == Verification(
        deployed_model_id="d2",
        predictions=5,
        smoke={
            "examples": 2,
            "class_ids": [3, 5],
            "signature_name": "serving_default",
            "signatures": ["serving_default", "serving_image_bytes"],
        },
    )
    assert vertex.split == {"d1": 90, "d2": 10} and [d[0] for d in vertex.deployed] == ["d1", "d2"]


def test_a_deployed_model_answering_wrong_is_undeployed_and_the_split_before_restored(monkeypatch):
    from components.lib.vertex.verify import DeployRejected, verify_deploy

    # d3 came as a 10 % canary replacing the canary d2 (left at 0 % until the rollout's end); it answers wrong
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d1": 90, "d3": 10})
    vertex.picks, vertex.answers = ["d3"], {"d3": answering(3, 4)}
    with pytest.raises(DeployRejected) as rejected:
        verify_deploy(ENDPOINT, f"{MODEL}@3", smoke_checks, {"d1": 90, "d2": 10})
    assert str(rejected.value) == (
        f"deployed model d3 ({MODEL}@3) failed its check through {ENDPOINT}: smoke prediction on serving_default "
        "disagrees with the published model: [3 4] vs [3 5]; undeployed it, traffic {'d1': 90, 'd2': 10}"
    )
    assert vertex.calls == [
        get_endpoint(),
        predict(),
        get_endpoint(),  # read again before undeploying: another run may have changed it meanwhile
        (
            "undeploy_model",
            endpoint_service.UndeployModelRequest(
                endpoint=ENDPOINT, deployed_model_id="d3", traffic_split={"d1": 90, "d2": 10}
            ),
        ),
    ]
    assert vertex.split == {"d1": 90, "d2": 10} and [d[0] for d in vertex.deployed] == ["d1", "d2"]


def test_a_canary_the_split_never_picks_is_rejected_after_enough_predictions(monkeypatch):
    from components.lib.vertex.verify import DeployRejected, predictions_needed, verify_deploy

    assert [predictions_needed(s) for s in (100, 50, 10, 1, 0)] == [1, 14, 88, 917, 0]
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 50, "d2": 50})
    vertex.picks, vertex.answers = ["d1"] * 14, {"d1": answering(3, 5)}
    with pytest.raises(DeployRejected, match="the traffic split never picked d2 \\(50 %\\) in 14 predictions"):
        verify_deploy(ENDPOINT, f"{MODEL}@2", smoke_checks, {"d1": 100})
    assert vertex.calls[1:] == [predict()] * 14 + [
        get_endpoint(),
        (
            "undeploy_model",
            endpoint_service.UndeployModelRequest(endpoint=ENDPOINT, deployed_model_id="d2", traffic_split={"d1": 100}),
        ),
    ]


def test_a_canary_another_runs_deploy_replaced_while_it_was_checked_is_not_rejected(monkeypatch):
    """Two runs at once: d2 (this run's 10 % canary) is being checked when the other run's canary d3 lands with a
    split that leaves d2 out. d2 is never picked again; it is reported, nothing is undeployed (the rollout's end
    takes the replaced canary off), and d3 keeps its share."""
    from components.lib.vertex.verify import Verification, verify_deploy

    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})

    def other_run_deploys(instances, parameters):
        if len(vertex.deployed) == 2:
            vertex.deployed.append(("d3", "3", 300))
            vertex.split = {"d1": 90, "d3": 10}
        return [{"class_id": 9, "probabilities": [0.5, 0.5]}] * len(instances)

    vertex.picks, vertex.answers = ["d1"] * 88, {"d1": other_run_deploys}
    lines = []
    result = verify_deploy(ENDPOINT, f"{MODEL}@2", smoke_checks, {"d1": 100}, echo=lines.append)
    assert result == Verification("d2", 0, {})
    assert vertex.calls == [get_endpoint(), *[predict()] * 88, get_endpoint()]
    assert lines == [
        f"d2 ({MODEL}@2) serves no traffic any more: another run's deploy "
        "replaced it while it was checked (the traffic split never picked d2 (10 %) in 88 predictions on "
        "serving_default); not checked through the endpoint"
    ]
    assert vertex.split == {"d1": 90, "d3": 10} and [d[0] for d in vertex.deployed] == ["d1", "d2", "d3"]


def test_a_rejected_canary_restores_the_split_over_the_models_deployed_when_it_is_undeployed(monkeypatch):
    """Two runs at once: while d3 is checked, the other run takes its own canary d2 off (it was in the split before
    d3's deploy). d3 answers wrong: the split before its deploy is restored over the models still deployed then,
    not over those of when the check began (Vertex refuses a split naming a model gone)."""
    from components.lib.vertex.verify import DeployRejected, verify_deploy

    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d1": 90, "d3": 10})

    def other_run_undeploys_then_wrong(instances, parameters):
        vertex.deployed = [d for d in vertex.deployed if d[0] != "d2"]
        return [{"class_id": 4, "probabilities": [0.5, 0.5]}] * len(instances)

    vertex.picks, vertex.answers = ["d3"], {"d3": other_run_undeploys_then_wrong}
    with pytest.raises(DeployRejected) as rejected:
        verify_deploy(ENDPOINT, f"{MODEL}@3", smoke_checks, {"d1": 90, "d2": 10})
    assert str(rejected.value).endswith("undeployed it, traffic {'d1': 100}")
    assert vertex.calls[-1] == (
        "undeploy_model",
        endpoint_service.UndeployModelRequest(endpoint=ENDPOINT, deployed_model_id="d3", traffic_split={"d1": 100}),
    )
    assert vertex.split == {"d1": 100} and [d[0] for d in vertex.deployed] == ["d1"]


def test_a_first_deploy_whose_model_cannot_be_checked_leaves_an_empty_endpoint(monkeypatch):
    from components.lib.deploy.smoke import SmokeFailed
    from components.lib.vertex.verify import DeployRejected, verify_deploy

    vertex = double(monkeypatch, [("d1", "1", 100)], {"d1": 100})  # a new endpoint: nothing served before

    def checks():
        raise SmokeFailed("the model's serving_default has no class_id output (['y'])")

    with pytest.raises(DeployRejected) as rejected:
        verify_deploy(ENDPOINT, f"{MODEL}@1", checks, {})
    assert str(rejected.value).endswith(
        "no class_id output (['y']); undeployed it, traffic none (nothing else was deployed)"
    )
    # Vertex refuses to undeploy a model with traffic: the split is emptied first
    assert vertex.calls == [get_endpoint(), get_endpoint(), traffic({}), undeploy("d1")]
    assert vertex.deployed == [] and vertex.split == {}


def test_the_verify_step_checks_the_deployed_model_against_the_gates_smoke_checks(
    monkeypatch, trained_model, digits_data, tmp_path
):
    """The KFP step on the smoke checks the evaluation gate saved for the candidate: the test split's examples and
    the candidate's class ids, sent without reading the registered version or its SavedModel."""
    import base64

    from components.evaluate_model import evaluate
    from components.lib.deploy.smoke import read_checks
    from components.lib.vertex.verify import DeployRejected
    from components.verify_vertex_deploy import verify_vertex_deploy
    from tests.helpers.model_answers import model_outputs, split_examples

    model_dir = str(trained_model / "model")
    smoke_checks = dsl.Artifact(uri=str(tmp_path / "smoke_checks"))
    smoke_checks.path = str(tmp_path / "smoke_checks")
    evaluate(model_dir, str(digits_data), 0.5, smoke_checks=smoke_checks.path)
    examples = split_examples(str(digits_data), 8)
    class_ids = [int(c) for c in model_outputs(model_dir, examples)["class_id"]]
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200)], {"d1": 90, "d2": 10})
    vertex.picks, vertex.answers = ["d2"], {"d2": answering(*class_ids)}
    endpoint = dsl.Artifact(uri="https://x/v1/e", metadata={"resourceName": ENDPOINT})
    model = dsl.Artifact(uri="https://x/v1/m", metadata={"resourceName": f"{MODEL}@2"})
    result = verify_vertex_deploy(endpoint, model, smoke_checks, {"d1": 100}, True)
    assert result["smoke"]["class_ids"] == class_ids and result["deployed_model_id"] == "d2"
    assert vertex.calls == [get_endpoint(), predict(examples.tolist())]

    # this project's serving image: the PNG bytes too, named by the signature in `parameters`
    vertex.calls.clear()
    vertex.picks = ["d2", "d2"]
    result = verify_vertex_deploy(endpoint, model, smoke_checks, {"d1": 100}, False)
    assert result["smoke"]["signatures"] == ["serving_default", "serving_image_bytes"]
    pngs = [{"b64": base64.b64encode(png).decode()} for png in read_checks(smoke_checks.path)[1].examples]
    assert vertex.calls[2] == predict(pngs, {"signature_name": "serving_image_bytes"})

    vertex.picks, vertex.answers = ["d2"], {"d2": answering(*[(c + 1) % 10 for c in class_ids])}
    with pytest.raises(DeployRejected, match="disagrees with the published model"):
        verify_vertex_deploy(endpoint, model, smoke_checks, {"d1": 100}, True)
    assert vertex.split == {"d1": 100} and [d[0] for d in vertex.deployed] == ["d1"]


def test_the_verify_step_runs_without_tensorflow(trained_model, digits_data, tmp_path):
    """The step reads the gate's smoke checks with numpy alone: TensorFlow is never imported."""
    import json
    import subprocess
    import sys

    from components.evaluate_model import evaluate

    path = str(tmp_path / "smoke_checks")
    evaluate(str(trained_model / "model"), str(digits_data), 0.5, smoke_checks=path)
    script = f"""
import json, sys
from kfp import dsl
from components.lib.vertex import verify
from components.verify_vertex_deploy import verify_vertex_deploy

def verify_deploy(endpoint_name, model_version, checks, previous_split):
    sent = [(c.signature, len(c.instances()), c.class_ids.tolist()) for c in checks()]
    return verify.Verification("d2", len(sent), {{"sent": sent}})

verify.verify_deploy = verify_deploy
smoke_checks = dsl.Artifact(uri={path!r})
smoke_checks.path = {path!r}
endpoint = dsl.Artifact(uri="e", metadata={{"resourceName": {ENDPOINT!r}}})
model = dsl.Artifact(uri="m", metadata={{"resourceName": {MODEL + "@2"!r}}})
result = verify_vertex_deploy(endpoint, model, smoke_checks, {{}}, False)
print(json.dumps({{"result": result, "tensorflow": "tensorflow" in sys.modules}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["tensorflow"] is False
    assert [s[:2] for s in answer["result"]["smoke"]["sent"]] == [["serving_default", 8], ["serving_image_bytes", 8]]


# --- taking models and endpoints away (undeploy, delete-endpoint) --------------------------------------------------


def test_undeploy_and_delete_endpoint_commands(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from pipelines.cli import cli

    config = str(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("platform:\n  project: my-project\n  location: europe-west4\n")
    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d1": 50, "d2": 40, "d3": 10})

    def run(*args):
        vertex.calls.clear()
        return CliRunner().invoke(cli, [*args, "--config", config, "--endpoint", ENDPOINT])

    result = run("undeploy", "--deployed-model-id", "d2")
    assert result.exit_code == 0, result.output
    # d2's 40 % goes to the others in proportion to theirs, in the UndeployModel itself
    assert vertex.calls == [
        get_endpoint(),
        (
            "undeploy_model",
            endpoint_service.UndeployModelRequest(
                endpoint=ENDPOINT, deployed_model_id="d2", traffic_split={"d1": 83, "d3": 17}
            ),
        ),
    ]
    assert result.output.splitlines()[-1] == (
        f"undeployed {ANSWERED_MODEL}@2 (deployed model d2); traffic: d1: 83 %, d3: 17 %"
    )
    result = run("undeploy", "--deployed-model-id", "d9")
    assert result.exit_code == 1 and result.output == f"Error: no deployed model d9 on {ENDPOINT}; deployed: d1, d3\n"

    result = run("delete-endpoint")
    assert result.exit_code == 1 and vertex.calls == [get_endpoint()]
    assert result.output == (
        f"Error: {ENDPOINT} serves traffic (d1: 83 %, d3: 17 %): --force undeploys its models and deletes it anyway\n"
    )
    assert run("undeploy", "--deployed-model-id", "d1").exit_code == 0 and vertex.split == {"d3": 100}
    result = run("undeploy", "--deployed-model-id", "d3")
    assert result.exit_code == 1 and vertex.calls == [get_endpoint()]
    assert result.output.startswith(f"Error: d3 ({ANSWERED_MODEL}@3) is the only model serving traffic on {ENDPOINT}")
    assert run("undeploy", "--deployed-model-id", "d3", "--force").exit_code == 0
    assert vertex.calls == [get_endpoint(), traffic({}), undeploy("d3")] and vertex.deployed == []

    result = run("delete-endpoint")
    assert result.exit_code == 0, result.output
    assert vertex.calls == [get_endpoint(), ("delete_endpoint", endpoint_service.DeleteEndpointRequest(name=ENDPOINT))]
    assert vertex.deleted and result.output.splitlines()[-1] == (
        f"deleted {ENDPOINT} (deployed models undeployed: none)"
    )


def test_delete_endpoint_undeploys_every_model_first(monkeypatch):
    from components.lib.vertex.rollout import Deletion, delete_endpoint

    vertex = double(monkeypatch, [("d1", "1", 100), ("d2", "2", 200), ("d3", "3", 300)], {"d1": 90, "d3": 10})
    with pytest.raises(RolloutError, match="serves traffic"):
        delete_endpoint(ENDPOINT)
    vertex.calls.clear()
    assert delete_endpoint(ENDPOINT, force=True) == Deletion(ENDPOINT, undeployed=["d2", "d3", "d1"])
    # the model without traffic first, then the smaller share (its traffic to d1), then the last (split emptied)
    assert vertex.calls == [
        get_endpoint(),
        undeploy("d2"),
        (
            "undeploy_model",
            endpoint_service.UndeployModelRequest(endpoint=ENDPOINT, deployed_model_id="d3", traffic_split={"d1": 100}),
        ),
        traffic({}),
        undeploy("d1"),
        ("delete_endpoint", endpoint_service.DeleteEndpointRequest(name=ENDPOINT)),
    ]
    assert vertex.deleted and vertex.deployed == []
