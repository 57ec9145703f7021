"""Vertex AI Model Registry and endpoint look-ups for the upload, deploy and batch prediction steps.

- `find_resource`: the registry model / endpoint with a display name (upload a new version of it, reuse it);
- `registered_version`: the version of a registry model that holds given artifacts (a model uploaded before is not
  uploaded again);
- `version_labels`: the labels of an uploaded model version (the run's and the commit that produced it);
- `traffic_split`: a canary split that keeps the endpoint's current models serving the rest of the traffic;
- `champion_version`: the registry model's version holding the champion alias (the evaluation gate's champion);
- `resolve_model_version`: the exact model version a batch prediction job should use (the champion alias by
  default).
Each is a plain function calling the Vertex AI API through the GAPIC clients of `google-cloud-aiplatform`. The
steps that call them (`find_model`, `ensure_endpoint`, `plan_traffic_split`, `plan_batch_prediction`,
`check_batch_prediction_job`, `find_registry_champion`) take the project explicitly (the pipeline's project
placeholder): inside a Vertex pipeline step `google.auth.default()` may name another project than the pipeline's.
"""

from collections.abc import Mapping

from core.retries import policy

KINDS = ("model", "endpoint")
SOURCE_COMMIT_LABEL = "source_commit"  # the label of each uploaded model version: the commit that produced it


def api_endpoint(location: str) -> str:
    return f"{location}-aiplatform.googleapis.com"


def location_of(resource_name: str) -> str:
    """The region of a resource `projects/P/locations/LOCATION/...`."""
    return resource_name.split("/")[3]


def resource_uri(resource_name: str) -> str:
    """The `https://<location>-aiplatform.googleapis.com/v1/<name>` URI GCPC gives Vertex resource artifacts."""
    if not resource_name:
        return ""
    return f"https://{api_endpoint(location_of(resource_name))}/v1/{resource_name}"


def display_name_filter(display_name: str) -> str:
    """The AIP-160 list filter selecting one display name (quotes and backslashes escaped)."""
    escaped = display_name.replace("\\", "\\\\").replace('"', '\\"')
    return f'display_name="{escaped}"'


def service_client(kind: str, location: str):
    """The ModelService (`kind="model"`), EndpointService (`"endpoint"`) or PredictionService (`"prediction"`)
    client of `location`'s regional endpoint."""
    from google.cloud import aiplatform_v1

    clients = {
        "model": aiplatform_v1.ModelServiceClient,
        "endpoint": aiplatform_v1.EndpointServiceClient,
        "prediction": aiplatform_v1.PredictionServiceClient,
    }
    if kind not in clients:
        raise ValueError(f"unknown resource kind {kind!r}; use one of: {', '.join(KINDS)}")
    return clients[kind](client_options={"api_endpoint": api_endpoint(location)})


def find_resource(kind: str, display_name: str, project: str, location: str) -> str:
    """Resource name of the registry model (`kind="model"`) or endpoint with `display_name`, or "" when there is
    none. Several with the same name: the oldest (the one earlier runs found), with a warning."""
    if not display_name:
        raise ValueError(f"a {kind} display name is required")
    if kind not in KINDS:
        raise ValueError(f"unknown resource kind {kind!r}; use one of: {', '.join(KINDS)}")
    client = service_client(kind, location)
    request = {
        "parent": f"projects/{project}/locations/{location}",
        "filter": display_name_filter(display_name),
        "order_by": "create_time",
    }
    listed = client.list_models if kind == "model" else client.list_endpoints
    found = list(listed(request=request, retry=policy()))
    if not found:
        print(f"no {kind} named {display_name!r} in {request['parent']}")
        return ""
    if len(found) > 1:
        print(
            f"warning: {len(found)} {kind}s are named {display_name!r}; using the oldest, {found[0].name} "
            f"(others: {', '.join(r.name for r in found[1:])})"
        )
    print(f"{kind} {display_name!r}: {found[0].name}")
    return found[0].name


def registered_version(model_name: str, artifact_uri: str) -> str:
    """`projects/.../models/ID@VERSION` of the newest version of the registry model `model_name` whose artifacts
    are `artifact_uri`, or "" (ListModelVersions, every page; Vertex keeps the URI an upload gave)."""
    location = location_of(model_name)
    wanted = artifact_uri.rstrip("/")
    same = [
        v
        for v in service_client("model", location).list_model_versions(request={"name": model_name}, retry=policy())
        if v.artifact_uri.rstrip("/") == wanted
    ]
    if not same:
        return ""
    newest = max(same, key=lambda v: int(v.version_id))
    return f"{newest.name}@{newest.version_id}"


def version_labels(labels: Mapping[str, str], source_commit: str) -> dict[str, str]:
    """The labels of an uploaded model version: `labels`, and SOURCE_COMMIT_LABEL=`source_commit` unless it is
    empty. ValueError (one line) when `source_commit` is no Google Cloud label value (Vertex would refuse the
    upload) or `labels` hold the key already."""
    from core import names

    if SOURCE_COMMIT_LABEL in labels:
        raise ValueError(f"labels: {SOURCE_COMMIT_LABEL} is the label of the version's source_commit")
    if not source_commit:
        return dict(labels)
    names.label_value(source_commit, "source_commit")
    return {**labels, SOURCE_COMMIT_LABEL: source_commit}


def proportional(shares: Mapping[str, int], total: int) -> dict[str, int]:
    """The positive `shares` ({deployed model id: percent}) scaled to sum to `total`, in proportion (largest
    remainders, ties by id); shares that round to 0 left out; {} when none is positive."""
    serving = {str(k): int(v) for k, v in shares.items() if int(v) > 0}
    whole = sum(serving.values())
    if not whole:
        return {}
    exact = {k: total * v / whole for k, v in serving.items()}
    split = {k: int(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: (split[k] - exact[k], k))[: total - sum(split.values())]:
        split[k] += 1
    return {k: v for k, v in sorted(split.items()) if v > 0}


def traffic_split(current: Mapping[str, int], percentage: int) -> dict[str, int]:
    """DeployModel's `traffic_split` ({deployed model id: percent}) giving the new deployed model ("0") `percentage` %
    and the endpoint's current deployed models the rest, in proportion to their current shares (largest remainders;
    sums to 100). With nothing serving yet the new model gets everything."""
    if not 1 <= percentage <= 100:
        raise ValueError(f"traffic_percentage must be in 1..100, got {percentage}")
    rest = proportional(current, 100 - percentage) if percentage < 100 else {}
    return {"0": percentage, **rest} if rest else {"0": 100}


def champion_version(display_name: str, alias: str, project: str, location: str) -> tuple[str, str]:
    """(`projects/.../models/ID@VERSION`, artifact URI) of the version of the registry model named `display_name`
    that holds `alias`; ("", "") when there is no such model or no version holds the alias."""
    from google.api_core.exceptions import NotFound

    parent = find_resource("model", display_name, project, location)
    if not parent or not alias:
        return "", ""
    try:
        found = service_client("model", location).get_model(name=f"{parent}@{alias}", retry=policy())
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
            raise LookupError(
                f"no model named {display_name!r} in projects/{project}/locations/{location}; "
                "run the training pipeline first or pass a model resource name"
            )
        version = model or alias
        name = f"{parent}@{version}" if version else parent
    found = service_client("model", location_of(name)).get_model(name=name, retry=policy())
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
    client = aiplatform_v1.JobServiceClient(client_options={"api_endpoint": api_endpoint(location_of(name))})
    stats = client.get_batch_prediction_job(name=name, retry=policy()).completion_stats
    return name, int(stats.successful_count), int(stats.failed_count) + max(0, int(stats.incomplete_count))
