"""The ModelService on the registry (registry.py): list models and a model's versions, get and alias model versions
over gRPC, upload over gRPC (this project's first upload, with a model ID) and REST (GCPC's upload launcher). Lists are filtered by display name, ordered and paged as
Vertex does."""

from __future__ import annotations

from google.cloud.aiplatform_v1.types import model as model_pb, model_service as model_service_pb
from google.longrunning import operations_pb2

from pipelines.rehearsal.api import messages
from pipelines.rehearsal.api.context import Context
from pipelines.rehearsal.api.operations import Operations
from pipelines.rehearsal.registry import ApiError

_MODEL_FIELDS = (
    "name",
    "display_name",
    "version_id",
    "version_aliases",
    "artifact_uri",
    "labels",
    "container_spec",
    "encryption_spec",
    "description",
)


def _model(version: dict) -> model_pb.Model:
    """A registry version (registry.version) as Vertex's Model: the model's creation time and the version's."""
    return model_pb.Model(
        **{k: version[k] for k in _MODEL_FIELDS if k in version},
        create_time=messages.timestamp(version.get("model_create_time", version["create_time"])),
        version_create_time=messages.timestamp(version["create_time"]),
    )


class ModelService:
    # method → (the permission it needs, the request field naming the resource it is checked on)
    PERMISSIONS = {
        "ListModels": ("aiplatform.models.list", "parent"),
        "ListModelVersions": ("aiplatform.models.list", "name"),
        "GetModel": ("aiplatform.models.get", "name"),
        "UploadModel": ("aiplatform.models.upload", "parent"),
        "MergeVersionAliases": ("aiplatform.models.update", "name"),
    }

    def __init__(self, context: Context, operations: Operations):
        self.context, self.registry, self.operations = context, context.registry, operations

    def rpcs(self) -> dict:
        """The service's gRPC methods: name → (request class, response class, handler)."""
        return {
            "ListModels": (model_service_pb.ListModelsRequest, model_service_pb.ListModelsResponse, self.list_models),
            "ListModelVersions": (
                model_service_pb.ListModelVersionsRequest,
                model_service_pb.ListModelVersionsResponse,
                self.list_model_versions,
            ),
            "GetModel": (model_service_pb.GetModelRequest, model_pb.Model, self.get_model),
            "UploadModel": (
                model_service_pb.UploadModelRequest,
                operations_pb2.Operation,
                lambda request: self.upload_model(request.parent, request),
            ),
            "MergeVersionAliases": (
                model_service_pb.MergeVersionAliasesRequest,
                model_pb.Model,
                self.merge_version_aliases,
            ),
        }

    def list_models(self, request: model_service_pb.ListModelsRequest) -> model_service_pb.ListModelsResponse:
        found = self.registry.list_models(request.parent, messages.display_name(request.filter), request.order_by)
        page, token = messages.page(found, request.page_size, request.page_token)
        return model_service_pb.ListModelsResponse(models=[_model(v) for v in page], next_page_token=token)

    def list_model_versions(
        self, request: model_service_pb.ListModelVersionsRequest
    ) -> model_service_pb.ListModelVersionsResponse:
        if request.filter:
            raise ApiError(
                "INVALID_ARGUMENT", f"the rehearsal lists versions unfiltered; got filter {request.filter!r}"
            )
        found = self.registry.ordered(self.registry.versions(request.name), request.order_by)
        page, token = messages.page(found, request.page_size, request.page_token)
        return model_service_pb.ListModelVersionsResponse(models=[_model(v) for v in page], next_page_token=token)

    def get_model(self, request: model_service_pb.GetModelRequest) -> model_pb.Model:
        return _model(self.registry.version(request.name))

    def merge_version_aliases(self, request: model_service_pb.MergeVersionAliasesRequest) -> model_pb.Model:
        return _model(self.registry.merge_aliases(request.name, list(request.version_aliases)))

    def upload_model(self, parent: str, request: model_service_pb.UploadModelRequest) -> operations_pb2.Operation:
        """A new model in `parent` (named `request.model_id` when given), or a new version of
        `request.parent_model`; the operation is done at once."""
        self.context.check(messages.to_dict(request.model))
        name, version_id = self.registry.upload(
            parent, messages.to_dict(request.model), request.parent_model, request.model_id
        )
        return self.operations.done(model_service_pb.UploadModelResponse(model=name, model_version_id=version_id))
