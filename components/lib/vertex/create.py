"""Idempotent creation of the registry model and the endpoint: two first runs that overlap end with one model and one
endpoint, and a step run again does not repeat its operation.

GCPC 2.22's `ModelUploadOp` and `EndpointCreateOp` give Vertex no resource ID, so each call creates another resource
(display names are not unique). Here the model and the endpoint are created with an ID derived from the display name
(`resource_id`): of two overlapping creations the second gets ALREADY_EXISTS and takes the resource the first made;
a model then gets a version of the upload, unless a version already holds the same artifacts. A resource found by
its display name (made before these IDs, or by hand) is used as before.
"""

import hashlib
import re

OPERATION_TIMEOUT = 1800  # seconds an upload or an endpoint's creation may take


def resource_id(display_name: str) -> str:
    """The ID of the model or endpoint named `display_name`: `tfpipe-`, the name in lower-case letters, digits and
    -, and 8 hex digits of the name's SHA-256 (names alike but for case or punctuation differ); at most 62
    characters, a form both Vertex's model IDs and endpoint IDs take."""
    slug = re.sub(r"[^a-z0-9]+", "-", display_name.lower()).strip("-")[:45].rstrip("-")
    digest = hashlib.sha256(display_name.encode()).hexdigest()[:8]
    return f"tfpipe-{slug}-{digest}" if slug else f"tfpipe-{digest}"


def _system_labels(labels: dict) -> dict:
    """The labels with the run's billing labels Vertex gives its steps, as GCPC's launchers attach them."""
    from google_cloud_pipeline_components.container.v1.gcp_launcher.utils.gcp_labels_util import (
        attach_system_labels,
    )

    return dict(attach_system_labels(dict(labels)) or {})


def ensure_endpoint(display_name: str, project: str, location: str, labels: dict, encryption_key: str) -> str:
    """The resource name of the endpoint named `display_name`: the oldest one found, else the one created with
    `resource_id`'s ID (or, when another run created it meanwhile, that one)."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud.aiplatform_v1.types import EncryptionSpec, Endpoint

    from components.lib.vertex.registry import find_resource, service_client

    found = find_resource("endpoint", display_name, project, location)
    if found:
        return found
    client = service_client("endpoint", location)
    parent, endpoint_id = f"projects/{project}/locations/{location}", resource_id(display_name)
    endpoint = Endpoint(
        display_name=display_name,
        labels=_system_labels(labels),
        encryption_spec=EncryptionSpec(kms_key_name=encryption_key) if encryption_key else None,
    )
    try:
        created = client.create_endpoint(parent=parent, endpoint=endpoint, endpoint_id=endpoint_id)
        name = created.result(timeout=OPERATION_TIMEOUT).name
        print(f"created endpoint {display_name!r}: {name}")
        return name
    except AlreadyExists:
        existing = client.get_endpoint(name=f"{parent}/endpoints/{endpoint_id}")
        _same_name("endpoint", existing, display_name)
        print(f"endpoint {display_name!r} was created meanwhile by another run: {existing.name}")
        return existing.name


def _same_name(kind: str, resource, display_name: str) -> None:
    if resource.display_name != display_name:
        raise RuntimeError(
            f"{kind} {resource.name} holds the ID of {display_name!r} but is named {resource.display_name!r}; "
            f"rename or delete it"
        )


def create_model(display_name: str, model: dict, project: str, location: str, labels: dict, encryption_key: str) -> str:
    """`projects/.../models/ID@VERSION` of the first version of the model named `display_name`, uploaded with
    `resource_id`'s ID (`model`: the Model's artifact_uri, container_spec and pipeline_job, as proto or JSON field
    names). When another run
    created the model meanwhile: its version holding the same artifacts, else a new version of it."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud.aiplatform_v1.types import Model
    from google.protobuf import json_format

    from components.lib.vertex.registry import registered_version, service_client

    client = service_client("model", location)
    parent, model_id = f"projects/{project}/locations/{location}", resource_id(display_name)
    fields = {**model, "display_name": display_name, "labels": _system_labels(labels)}
    if encryption_key:
        fields["encryption_spec"] = {"kms_key_name": encryption_key}
    upload = Model.wrap(json_format.ParseDict(fields, Model.pb(Model())))
    try:
        request = {"parent": parent, "model": upload, "model_id": model_id}
        done = client.upload_model(request=request).result(timeout=OPERATION_TIMEOUT)
        print(f"created model {display_name!r}: {done.model}@{done.model_version_id}")
        return f"{done.model}@{done.model_version_id}"
    except AlreadyExists:
        name = f"{parent}/models/{model_id}"
        _same_name("model", client.get_model(name=name), display_name)
    same = registered_version(name, model["artifact_uri"])
    if same:
        print(f"model {display_name!r} was created meanwhile by another run, with these artifacts: {same}")
        return same
    request = {"parent": parent, "model": upload, "parent_model": name}
    done = client.upload_model(request=request).result(timeout=OPERATION_TIMEOUT)
    print(f"model {display_name!r} was created meanwhile by another run: new version {done.model_version_id}")
    return f"{done.model}@{done.model_version_id}"
