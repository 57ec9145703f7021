"""The deploy of a registry model version on a Vertex AI endpoint: Google Cloud Pipeline Components' own deploy
launcher (DeployModel, then its operation polled to the end, `gcp_resources` written), with the DeployedModel this
pipeline sets in full. GCPC 2.22's `ModelDeployOp` builds the same request but leaves its
`deployed_model_display_name` input out of it; this step runs the launcher from the components image, which holds
GCPC."""

from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint, VertexModel
from kfp import dsl
from kfp.dsl import ConcatPlaceholder, Input, OutputPath

LAUNCHER = "google_cloud_pipeline_components.container.v1.endpoint.deploy_model.launcher"


def deploy_vertex_model(image: str):
    """The deploy step (a container component: GCPC's launcher, no Python function of this project's), run from
    `image` (the components image)."""

    @dsl.container_component
    def deploy_vertex_model(
        model: Input[VertexModel],
        endpoint: Input[VertexEndpoint],
        gcp_resources: OutputPath(str),
        deployed_model_display_name: str,
        traffic_split: dict,
        machine_type: str,
        min_replica_count: int,
        max_replica_count: int,
        accelerator_type: str,
        accelerator_count: int,
        service_account: str,
    ):
        """KFP step (Vertex): deploy `model` on `endpoint` on dedicated resources with `traffic_split` ("0": the new
        deployed model), as `deployed_model_display_name`, its container running as `service_account` (empty
        values are left out of the request, as GCPC leaves them).

        Args:
            model: The registry model version to deploy (`resourceName` MODEL@VERSION).
            endpoint: The endpoint to deploy it on.
            deployed_model_display_name: The deployed model's display name.
            traffic_split: The endpoint's traffic split once deployed ("0": the new deployed model).
            machine_type: Machine type of each replica.
            min_replica_count: Replicas always deployed (at least 1).
            max_replica_count: Replicas the deployment may scale to.
            accelerator_type: Accelerator of each replica (empty: none).
            accelerator_count: Accelerators per replica.
            service_account: The service account the serving container runs as.
        """
        return dsl.ContainerSpec(
            image=image,
            command=["python3", "-u", "-m", LAUNCHER],
            args=[
                "--type",
                "DeployModel",
                "--payload",
                ConcatPlaceholder(
                    [
                        '{"endpoint": "',
                        endpoint.metadata["resourceName"],
                        '", "traffic_split": ',
                        traffic_split,
                        ', "deployed_model": {"model": "',
                        model.metadata["resourceName"],
                        '", "display_name": "',
                        deployed_model_display_name,
                        '", "dedicated_resources": {"machine_spec": {"machine_type": "',
                        machine_type,
                        '", "accelerator_type": "',
                        accelerator_type,
                        '", "accelerator_count": ',
                        accelerator_count,
                        '}, "min_replica_count": ',
                        min_replica_count,
                        ', "max_replica_count": ',
                        max_replica_count,
                        '}, "service_account": "',
                        service_account,
                        '"}}',
                    ]
                ),
                "--project",
                "",
                "--location",
                "",
                "--gcp_resources",
                gcp_resources,
            ],
        )

    return deploy_vertex_model
