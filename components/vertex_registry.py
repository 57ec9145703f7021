"""Vertex AI Model Registry and endpoint look-ups for the upload, deploy and batch prediction steps.

- `find_resource`: the registry model / endpoint with a display name (upload a new version of it, reuse it);
- `traffic_split`: a canary split that keeps the endpoint's current models serving the rest of the traffic;
- `champion_version`: the registry model's version holding the champion alias (the evaluation gate's champion);
- `resolve_model_version`: the exact model version a batch prediction job should use (the champion alias by
  default).
Each is a plain function calling the Vertex AI API through the GAPIC clients of `google-cloud-aiplatform`, plus a
thin KFP step. The steps take the project explicitly (the pipeline's project placeholder): inside a Vertex
pipeline step `google.auth.default()` may name another project than the pipeline's.
"""
from typing import Any, NamedTuple

from kfp.dsl import Artifact, Output

KINDS = ("model", "endpoint")


def api_endpoint(location: str) -> str:
    return f"{location}-aiplatform.googleapis.com"


def resource_uri(resource_name: str) -> str:
    """The `https://<location>-aiplatform.googleapis.com/v1/<name>` URI GCPC gives Vertex resource artifacts."""
    if not resource_name:
        return ""
    location = resource_name.split("/")[3]
    return f"https://{api_endpoint(location)}/v1/{resource_name}"


def display_name_filter(display_name: str) -> str:
    """The AIP-160 list filter selecting one display name (quotes and backslashes escaped)."""
    escaped = display_name.replace("\\", "\\\\").replace('"', '\\"')
    return f'display_name="{escaped}"'


def _client(kind: str, location: str):
    from google.cloud import aiplatform_v1

    options = {"api_endpoint": api_endpoint(location)}
    if kind == "model":
        return aiplatform_v1.ModelServiceClient(client_options=options)
    if kind == "endpoint":
        return aiplatform_v1.EndpointServiceClient(client_options=options)
    raise ValueError(f"unknown resource kind {kind!r}; use one of: {', '.join(KINDS)}")


def find_resource(kind: str, display_name: str, project: str, location: str) -> str:
    """Resource name of the registry model (`kind="model"`) or endpoint with `display_name`, or "" when there is
    none. Several with the same name: the oldest (the one earlier runs found), with a warning."""
    if not display_name:
        raise ValueError(f"a {kind} display name is required")
    client = _client(kind, location)
    request = {"parent": f"projects/{project}/locations/{location}", "filter": display_name_filter(display_name),
               "order_by": "create_time"}
    found = list(client.list_models(request=request) if kind == "model" else client.list_endpoints(request=request))
    if not found:
        print(f"no {kind} named {display_name!r} in {request['parent']}")
        return ""
    if len(found) > 1:
        print(f"warning: {len(found)} {kind}s are named {display_name!r}; using the oldest, {found[0].name} "
              f"(others: {', '.join(r.name for r in found[1:])})")
    print(f"{kind} {display_name!r}: {found[0].name}")
    return found[0].name


def traffic_split(current: dict, percentage: int) -> dict:
    """DeployModel's `traffic_split` giving the new deployed model ("0") `percentage` % and the endpoint's current
    deployed models the rest, in proportion to their current shares (largest remainders; sums to 100). With
    nothing serving yet the new model gets everything."""
    if not 1 <= percentage <= 100:
        raise ValueError(f"traffic_percentage must be in 1..100, got {percentage}")
    serving = {str(k): int(v) for k, v in current.items() if int(v) > 0}
    if percentage == 100 or not serving:
        return {"0": 100}
    rest, total = 100 - percentage, sum(serving.values())
    exact = {k: rest * v / total for k, v in serving.items()}
    split = {k: int(x) for k, x in exact.items()}
    by_remainder = sorted(exact, key=lambda k: (split[k] - exact[k], k))
    for k in by_remainder[:rest - sum(split.values())]:
        split[k] += 1
    return {"0": percentage, **{k: v for k, v in sorted(split.items()) if v > 0}}


def endpoint_traffic(endpoint_name: str) -> dict:
    """The endpoint's current traffic split ({deployed model id: percent})."""
    location = endpoint_name.split("/")[3]
    endpoint = _client("endpoint", location).get_endpoint(name=endpoint_name)
    return dict(endpoint.traffic_split)


def champion_version(display_name: str, alias: str, project: str, location: str) -> tuple[str, str]:
    """(`projects/.../models/ID@VERSION`, artifact URI) of the version of the registry model named `display_name`
    that holds `alias`; ("", "") when there is no such model or no version holds the alias."""
    from google.api_core.exceptions import NotFound

    parent = find_resource("model", display_name, project, location)
    if not parent or not alias:
        return "", ""
    try:
        found = _client("model", location).get_model(name=f"{parent}@{alias}")
    except NotFound:
        return "", ""
    return f"{found.name}@{found.version_id}", found.artifact_uri


def resolve_model_version(model: str, display_name: str, alias: str, project: str, location: str) -> str:
    """`projects/.../models/ID@VERSION` of the model a batch job should use: `model` as a resource name
    (`projects/...`, optionally `@version` or `@alias`), as a version id or alias of the registry model named
    `display_name`, or ("" ) that model's `alias` version (its default version when `alias` is "")."""
    return find_model_version(model, display_name, alias, project, location)[0]


def find_model_version(model: str, display_name: str, alias: str, project: str, location: str) -> tuple[str, str]:
    """(`projects/.../models/ID@VERSION`, artifact URI) of the version `resolve_model_version` picks."""
    if model.startswith("projects/"):
        name = model
    else:
        parent = find_resource("model", display_name, project, location)
        if not parent:
            raise LookupError(f"no model named {display_name!r} in projects/{project}/locations/{location}; "
                              "run the training pipeline first or pass a model resource name")
        version = model or alias
        name = f"{parent}@{version}" if version else parent
    found = _client("model", name.split("/")[3]).get_model(name=name)
    return f"{found.name}@{found.version_id}", found.artifact_uri


def batch_job_name(gcp_resources: str) -> str:
    """`projects/.../locations/.../batchPredictionJobs/ID` from a GCPC `gcp_resources` JSON."""
    import json

    uri = json.loads(gcp_resources)["resources"][0]["resourceUri"]
    name = uri.split("/v1/", 1)[-1]
    if "/batchPredictionJobs/" not in name:
        raise ValueError(f"not a batch prediction job resource: {uri}")
    return name


def batch_job_counts(gcp_resources: str) -> tuple[str, int, int]:
    """(job name, succeeded, failed) of a finished batch prediction job, from its `completion_stats` (instances
    left incomplete count as failed)."""
    from google.cloud import aiplatform_v1

    name = batch_job_name(gcp_resources)
    client = aiplatform_v1.JobServiceClient(client_options={"api_endpoint": api_endpoint(name.split("/")[3])})
    stats = client.get_batch_prediction_job(name=name).completion_stats
    return name, int(stats.successful_count), int(stats.failed_count) + max(0, int(stats.incomplete_count))


def find_model(display_name: str, project: str, location: str) -> NamedTuple(
        "Outputs", [("resource_name", str), ("resource_uri", str)]):
    """KFP step (Vertex): the registry model with this display name ("" when there is none).

    Args:
        display_name: Display name of the registry model.
        project: Google Cloud project.
        location: Region.
    """
    from collections import namedtuple

    from components.vertex_registry import find_resource, resource_uri

    name = find_resource("model", display_name, project, location)
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri"])
    return Outputs(name, resource_uri(name))


def find_endpoint(display_name: str, project: str, location: str) -> NamedTuple(
        "Outputs", [("resource_name", str), ("resource_uri", str)]):
    """KFP step (Vertex): the endpoint with this display name ("" when there is none).

    Args:
        display_name: Display name of the endpoint.
        project: Google Cloud project.
        location: Region.
    """
    from collections import namedtuple

    from components.vertex_registry import find_resource, resource_uri

    name = find_resource("endpoint", display_name, project, location)
    Outputs = namedtuple("Outputs", ["resource_name", "resource_uri"])
    return Outputs(name, resource_uri(name))


def plan_traffic_split(endpoint_name: str, traffic_percentage: int) -> dict:
    """KFP step (Vertex): ModelDeployOp's `traffic_split` for a rollout of `traffic_percentage` % to the new model
    (`endpoint_name` "": a new endpoint, nothing else serves).

    Args:
        endpoint_name: The endpoint's resource name (empty: a new endpoint).
        traffic_percentage: The new model's share of the traffic in %.
    """
    from components.vertex_registry import endpoint_traffic, traffic_split

    current = endpoint_traffic(endpoint_name) if endpoint_name else {}
    split = traffic_split(current, traffic_percentage)
    if traffic_percentage < 100 and split == {"0": 100}:
        print(f"nothing else serves on {endpoint_name or 'the new endpoint'}: the new model takes all traffic")
    print(f"current traffic {current}; new split {split}")
    return split


def check_batch_prediction_job(gcp_resources: str, max_error_fraction: float) -> NamedTuple(
        "Outputs", [("succeeded", int), ("failed", int)]):
    """KFP step (Vertex), after `ModelBatchPredictOp` (a Vertex job succeeds whatever its instances do): read the
    job's success and error counts and fail when more than `max_error_fraction` of the instances failed.

    Args:
        gcp_resources: The batch prediction job's resource record (GCPC's `gcp_resources`).
        max_error_fraction: The step fails when a larger share of the instances failed.
    """
    from collections import namedtuple

    from components.batch_predict import check_error_budget
    from components.vertex_registry import batch_job_counts

    name, succeeded, failed = batch_job_counts(gcp_resources)
    print(f"{name}: {check_error_budget(succeeded, failed, max_error_fraction, f' (job {name})')}")
    Outputs = namedtuple("Outputs", ["succeeded", "failed"])
    return Outputs(succeeded, failed)


def plan_batch_prediction(
    model: str,
    display_name: str,
    alias: str,
    instances: str,
    output_prefix: str,
    project: str,
    location: str,
    run_name: str,
    destination: Output[Artifact],
    instances_format: str = "jsonl",
    key_field: str = "",
    included_fields: list = [],  # noqa: B006 (KFP compiles the default into the step's spec; never mutated)
    excluded_fields: list = [],  # noqa: B006
    instance_type: str = "",
    signature_name: str = "",
) -> NamedTuple("Outputs", [("model_name", str), ("model_uri", str), ("gcs_source_uris", list),
                            ("output_prefix", str), ("job_display_name", str), ("included_fields", list),
                            ("excluded_fields", list), ("instance_type", str), ("model_parameters", dict)]):
    """KFP step (Vertex): the model version, the instances as gs:// URIs (comma-separated; `/gcs/` FUSE paths are
    turned back into gs://), the output prefix (`output_prefix`, else this step's artifact URI: one per run), the
    display name (`<run_name>-batch`) of a batch job, and its instance config: the field options checked and
    completed as on the self-hosted targets (`components.batch_predict.instance_config`: by default CSV columns
    and array-typed JSONL objects carry the model's feature columns, read from the version's artifacts), and the
    job's `model_parameters`: `{"signature_name": ...}` when the job must call another signature than
    `serving_default` (`signature_name`, or `components.batch_predict.choose_signature`'s: a file list of images
    goes to an image model's `serving_image_bytes`), which this project's serving container honours.

    Args:
        model: The version: a version id, alias or resource name (empty: the champion alias's version).
        display_name: Display name of the registry model.
        alias: The version alias that marks the champion.
        instances: The instances: comma-separated gs:// URIs or globs (or /gcs/ paths).
        output_prefix: gs:// prefix of the output directory (empty: this step's artifact URI).
        project: Google Cloud project.
        location: Region.
        run_name: The pipeline run's name, part of the job's display name.
        instances_format: Format of the instances: jsonl, csv, tf-record, tf-record-gzip or file-list.
        key_field: Field identifying an instance: never sent to the model.
        included_fields: Fields sent to the model, in this order (empty: the model's feature columns).
        excluded_fields: Fields not sent to the model.
        instance_type: JSONL objects sent as objects or as arrays (empty: as given).
        signature_name: The signature to call (empty: chosen from the model and the instances).
    """
    from collections import namedtuple

    from components.batch_predict import B64_FORMATS, choose_signature, instance_config, model_feature_names, \
        model_signatures
    from components.vertex_registry import find_model_version, resource_uri
    from components.vertex_training import job_display_name

    uris = []
    for item in (i.strip() for i in instances.split(",")):
        if item.startswith("/gcs/"):
            item = "gs://" + item[len("/gcs/"):]
        if item:
            if not item.startswith("gs://"):
                raise ValueError(f"Vertex batch prediction reads instances from gs:// URIs, got {item!r}")
            uris.append(item)
    if not uris:
        raise ValueError("no instances given")
    fields: dict[str, Any] = dict(key_field=key_field, included_fields=included_fields,
                                  excluded_fields=excluded_fields, instance_type=instance_type)
    instance_config(instances_format, **fields, feature_names=None)  # a mistake fails before any look-up
    name, artifact_uri = find_model_version(model, display_name, alias, project, location)
    features = model_feature_names(artifact_uri) if artifact_uri and instances_format in ("csv", "jsonl") else []
    config = instance_config(instances_format, **fields, feature_names=features)
    signatures = model_signatures(artifact_uri) if artifact_uri and (
        signature_name or instances_format in B64_FORMATS) else {}
    signature = choose_signature(signatures, signature_name, instances_format)
    parameters = {} if signature == "serving_default" else {"signature_name": signature}
    prefix = output_prefix or destination.uri
    print(f"model {name}; instances {uris}; output under {prefix}; instance config {config}; signature {signature}")
    Outputs = namedtuple("Outputs", ["model_name", "model_uri", "gcs_source_uris", "output_prefix", "job_display_name",
                                     "included_fields", "excluded_fields", "instance_type", "model_parameters"])
    return Outputs(
        name, resource_uri(name), uris, prefix, job_display_name(run_name, "batch"), list(config.included_fields),
        list(config.excluded_fields), config.instance_type, parameters)
