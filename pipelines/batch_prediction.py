"""The batch prediction pipeline, defined once for every target: predictions for a set of instances from a
registered model version. The prediction step goes through the seam in `pipelines.targets`: a Vertex batch
prediction job (`ModelBatchPredictOp`) on a Model Registry version on Vertex, the local batch predictor on a
model repository version on kubeflow and local.
"""

from pipelines import targets
from pipelines.config import PIPELINE_NAMES, TARGETS, BatchParameters, Platform, described_by
from pipelines.dag import pipeline
from pipelines.targets.inputs import BatchPredictInputs, InstanceOptions, Repository

PIPELINE_NAME = PIPELINE_NAMES["batch_prediction"]
_D = BatchParameters()  # defaults of the typed pipeline inputs


def build_batch_pipeline(target: str, platform: Platform | None = None):
    """Return the `@dsl.pipeline` function of the batch prediction DAG for `target` (vertex | kubeflow | local)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    ops = targets.make_ops(target, platform or Platform(), PIPELINE_NAME)

    @pipeline(name=PIPELINE_NAME, description="Batch predictions from a registered model version.")
    @described_by(BatchParameters)
    def batch_prediction_pipeline(
        instances: str,
        instances_format: str = _D.instances_format,
        model: str = _D.model,
        model_repository: str = _D.model_repository,
        model_name: str = _D.model_name,
        batch_size: int = _D.batch_size,
        key_field: str = _D.key_field,
        included_fields: list = _D.included_fields,
        excluded_fields: list = _D.excluded_fields,
        instance_type: str = _D.instance_type,
        max_error_fraction: float = _D.max_error_fraction,
        signature_name: str = _D.signature_name,
        output_prefix: str = _D.output_prefix,
    ):
        """The batch prediction DAG (inputs: `BatchParameters`)."""
        ops.batch_predict(
            BatchPredictInputs(
                instances=instances,
                model=model,
                repository=Repository(model_repository=model_repository, model_name=model_name),
                batch_size=batch_size,
                options=InstanceOptions(
                    instances_format=instances_format,
                    key_field=key_field,
                    included_fields=included_fields,
                    excluded_fields=excluded_fields,
                    instance_type=instance_type,
                    signature_name=signature_name,
                ),
                max_error_fraction=max_error_fraction,
                output_prefix=output_prefix,
            )
        )

    return batch_prediction_pipeline
