"""The error budget of a Vertex AI batch prediction job, read from its counts."""

from typing import NamedTuple


def check_batch_prediction_job(gcp_resources: str, max_error_fraction: float) -> NamedTuple(
    "Outputs", [("succeeded", int), ("failed", int)]
):
    """KFP step (Vertex), after `ModelBatchPredictOp` (a Vertex job succeeds whatever its instances do): read the
    job's success and error counts and fail when more than `max_error_fraction` of the instances failed.

    Args:
        gcp_resources: The batch prediction job's resource record (GCPC's `gcp_resources`).
        max_error_fraction: The step fails when a larger share of the instances failed.
    """
    from collections import namedtuple

    from components.lib.batch.budget import check_error_budget
    from components.lib.vertex.registry import batch_job_counts

    name, succeeded, failed = batch_job_counts(gcp_resources)
    print(f"{name}: {check_error_budget(succeeded, failed, max_error_fraction, f' (job {name})')}")
    Outputs = namedtuple("Outputs", ["succeeded", "failed"])
    return Outputs(succeeded, failed)
