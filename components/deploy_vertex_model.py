"""The deploy of a registry model version on a Vertex AI endpoint: Google Cloud Pipeline Components' own deploy
launcher (DeployModel, then its operation polled to the end, `gcp_resources` written), with the DeployedModel this
pipeline sets in full. GCPC 2.22's `ModelDeployOp` builds the same request but leaves its
`deployed_model_display_name` input out of it; this step runs the launcher from the components image, which holds
GCPC."""

from google_cloud_pipeline_components.types.artifact_types import VertexEndpoint, VertexModel
from kfp import dsl
from kfp.dsl import ConcatPlaceholder, Input, OutputPath

LAUNCHER = "google_cloud_pipeline_components.container.v1.endpoint.deploy_model.launcher"


def deploy_vertex_model_op(image: str):
    """The deploy step, run from `image` (the components image)."""

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
        values are left out of the request, as GCPC leaves them)."""
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
