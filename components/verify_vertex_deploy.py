"""The check of a Vertex AI deploy through the endpoint (`components.lib.vertex.verify`): the evaluation gate's smoke
checks predicted by the new deployed model; on failure it is undeployed and the endpoint's split restored."""

from kfp.dsl import Artifact, Input


def verify_vertex_deploy(
    endpoint: Input[Artifact],
    model: Input[Artifact],
    smoke_checks: Input[Artifact],
    previous_split: dict,
    default_signature_only: bool,
) -> dict:
    """KFP step (Vertex, after the deploy, before the rollout's end): send the smoke checks' examples (the test
    split's first) to the endpoint's predict API until the new deployed model has answered each signature's; its
    class ids must equal those the evaluation gate saved for the candidate. The version deployed is that candidate:
    the registration uploads its SavedModel or finds the version already holding it (the same artifact URI). On
    failure undeploy it, restore `previous_split` and fail with one line. Needs neither TensorFlow nor the model.

    Args:
        endpoint: The endpoint the version was deployed on.
        model: The model version deployed (`resourceName` MODEL@VERSION).
        smoke_checks: The evaluated candidate's smoke checks (`smoke.write_checks`).
        previous_split: The endpoint's traffic split before the deploy (restored on failure).
        default_signature_only: Check serving_default only (a prebuilt serving image takes no signature name).
    """
    from components.lib.deploy.smoke import read_checks
    from components.lib.vertex.verify import verify_deploy

    def checks() -> list:
        found = read_checks(smoke_checks.path)
        return [c for c in found if c.signature == "serving_default"] if default_signature_only else found

    version = model.metadata["resourceName"]
    return verify_deploy(endpoint.metadata["resourceName"], version, checks, dict(previous_split)).as_json()
