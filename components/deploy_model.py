"""Self-hosted endpoint deploy (local target): serve the published repository version on the local server and prove
it answers (`components.lib.deploy.tf_serving`). One server per repository and ports serves every model of the
repository (`serving.lifecycle`: fully detached, it outlives the step and the run); a later run finds it and the
server picks the new model or version up from the repository; with none running, the step starts one.
"""

from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output


def deploy_model(
    published: Input[Model],
    dataset: Input[Dataset],
    model_repository: str,
    model_name: str,
    serving_url: str,
    rest_port: int,
    grpc_port: int,
    ssl_config_file: str,
    ca_file: str,
    client_cert_file: str,
    version_policy: str,
    endpoint: Output[Artifact],
) -> NamedTuple("Outputs", [("rest_url", str), ("grpc_target", str), ("version", int)]):
    """KFP step (self-hosted): start (or reuse) the local server on the repository, wait for the new version,
    smoke-test it, roll back on failure. `serving_url` set: check that server instead of starting one.

    Args:
        published: The published repository version.
        dataset: The prepared data (examples for the smoke test).
        model_repository: The versioned model repository the server watches.
        model_name: The model's name in the repository and on the server.
        serving_url: URL of a TF Serving watching the repository (empty: start or reuse the local server).
        rest_port: The local server's REST port (0: any free port).
        grpc_port: The local server's gRPC port (0: any free port).
        ssl_config_file: TF Serving's SSLConfig file: a server this step starts serves over TLS (empty: plaintext).
        ca_file: The CA file of a TLS server's certificate, for the checks (empty: the system's CAs).
        client_cert_file: PEM file of a client certificate and key, for a server with client_verify.
        version_policy: How a server this step starts replaces versions: availability-preserving or
            resource-preserving (a running server with the other policy is refused).
    """
    from core.fast_exit import skip_exit_collection

    skip_exit_collection()
    import json
    from collections import namedtuple
    from typing import cast

    from components.lib.deploy.tf_serving import deploy
    from serving.models import Transition
    from serving.tls import ClientTls

    # KFP hands artifact metadata on through JSON/protobuf numbers: the version arrives as a float (3.0)
    version, path = int(published.metadata["version"]), published.metadata["path"]
    served = deploy(
        version,
        path,
        dataset.path,
        model_repository,
        model_name,
        serving_url,
        rest_port,
        grpc_port,
        ssl_config_file=ssl_config_file,
        tls=ClientTls(ca_file, client_cert_file),
        version_policy=cast(Transition, version_policy),  # PipelineParameters checked it; the server refuses others
    )
    endpoint.metadata.update(
        rest_url=served.rest_url, grpc_target=served.grpc_target, version=served.version, pid=served.pid
    )
    with open(endpoint.path, "w") as f:
        json.dump(served.as_json(), f, indent=2)
    if served.gap():
        print(served.gap())
    print(
        f"serving {model_name} version {version}: REST {served.rest_url}, gRPC {served.grpc_target or '-'}"
        + (f"; stop it with: {served.stop}" if served.stop else "")
    )
    Outputs = namedtuple("Outputs", ["rest_url", "grpc_target", "version"])
    return Outputs(served.rest_url, served.grpc_target, version)
