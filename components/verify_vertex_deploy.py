"""The check of a Vertex AI deploy through the endpoint (`components.lib.vertex.verify`): the deploy steps' smoke
examples predicted by the new deployed model; on failure it is undeployed and the endpoint's split restored."""

from kfp.dsl import Artifact, Dataset, Input


def verify_vertex_deploy(
    endpoint: Input[Artifact],
    model: Input[Artifact],
    dataset: Input[Dataset],
    previous_split: dict,
    default_signature_only: bool,
) -> dict:
    """KFP step (Vertex, after the deploy, before the rollout's end): send the test split's first examples to the
    endpoint's predict API until the new deployed model has answered each signature's; its class ids must equal
    the registered SavedModel's. On failure undeploy it, restore `previous_split` and fail with one line.

    Args:
        endpoint: The endpoint the version was deployed on.
        model: The model version deployed (`resourceName` MODEL@VERSION).
        dataset: The prepared data (the test split's examples).
        previous_split: The endpoint's traffic split before the deploy (restored on failure).
        default_signature_only: Check serving_default only (a prebuilt serving image takes no signature name).
    """
    from components.lib.deploy.smoke import reference_checks
    from components.lib.vertex.verify import verify_deploy, version_artifacts
    from core import storage

    version = model.metadata["resourceName"]

    def checks() -> list:
        with storage.staged(version_artifacts(version)) as local:
            found = reference_checks(local, dataset.path)
        return [c for c in found if c.signature == "serving_default"] if default_signature_only else found

    return verify_deploy(endpoint.metadata["resourceName"], version, checks, dict(previous_split)).as_json()
