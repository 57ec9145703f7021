"""Kubeflow deploy with `serving: url`: check the TF Serving at the URL (`components.lib.deploy.tf_serving`)."""

from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output


def deploy_model_at_url(
    published: Input[Model],
    dataset: Input[Dataset],
    model_repository: str,
    model_name: str,
    serving_url: str,
    endpoint: Output[Artifact],
) -> NamedTuple("Outputs", [("rest_url", str), ("grpc_target", str), ("version", int)]):
    """KFP step (kubeflow, serving: url): check the TF Serving at `serving_url`, which watches the model repository:
    wait for the new version, smoke-test it, roll it back on failure. A pod starts no server of its own (it would
    die with the pod), so an empty `serving_url` fails at once.

    Args:
        published: The published repository version.
        dataset: The prepared data (examples for the smoke test).
        model_repository: The versioned model repository the server watches.
        model_name: The model's name in the repository and on the server.
        serving_url: URL of the TF Serving watching the repository.
    """
    import json
    from collections import namedtuple

    from components.lib.deploy.tf_serving import DeployError, deploy

    if not serving_url:
        raise DeployError(
            "platform.kubeflow.serving is url but the serving_url parameter is empty: give the URL of "
            "a TF Serving watching model_repository, or use serving: kserve or none"
        )
    version, path = int(published.metadata["version"]), published.metadata["path"]
    served = deploy(version, path, dataset.path, model_repository, model_name, serving_url)
    endpoint.metadata.update(rest_url=served.rest_url, version=served.version)
    with open(endpoint.path, "w") as f:
        json.dump(served.as_json(), f, indent=2)
    print(f"serving {model_name} version {version} at {served.rest_url}")
    Outputs = namedtuple("Outputs", ["rest_url", "grpc_target", "version"])
    return Outputs(served.rest_url, "", version)
