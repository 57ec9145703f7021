"""The first version of the registry model, uploaded with an ID derived from its display name
(`components.lib.vertex.create`)."""

from typing import NamedTuple


def create_model(
    display_name: str,
    artifact_uri: str,
    container_spec: dict,
    project: str,
    location: str,
    labels: dict,
    encryption_key: str,
    pipeline_job_id: str,
) -> NamedTuple("Outputs", [("resource_name", str), ("resource_uri", str)]):
    """KFP step (Vertex, never cached; when no model has the display name): upload the trained model as the first
    version of a new registry model, with an ID derived from the name, so that two runs creating it at once end
    with one model (the second run's upload becomes a version of it, or the version holding its artifacts).

    Args:
        display_name: Display name of the registry model.
        artifact_uri: The trained model's SavedModel folder.
        container_spec: The serving container (Vertex's ModelContainerSpec fields).
        project: Google Cloud project.
        location: Region.
        labels: The version's labels.
        encryption_key: CMEK key of the model (empty: Google-managed).
        pipeline_job_id: The run's pipeline job ID (the version links to the run, as GCPC's upload links it).
    """
    from collections import namedtuple

    from components.lib.vertex.create import create_model
    from components.lib.vertex.registry import resource_uri

    model = {
        "artifact_uri": artifact_uri,
        "container_spec": container_spec,
        "pipeline_job": f"projects/{project}/locations/{location}/pipelineJobs/{pipeline_job_id}",
    }
    name = create_model(display_name, model, project, location, labels, encryption_key)
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri"])
    return Outputs(name, resource_uri(name))
