"""What Vertex AI checks in a request's identity and resources before it accepts it, for the double: service account
e-mails, CMEK keys in the request's region, VPC networks named by project number, a TensorBoard of the same project
and region, labels, a job's scheduling strategy, persistent resource and PSC interface, Cloud Storage locations given
as gs:// URIs, machine type / accelerator pairs and replica counts. Each check returns Vertex's kind of message for
the first field it refuses, or None. Requests are dicts with proto field names (`api._dict`).

Whether the caller may act as the service account is the double's IAM (iam.py); the project's real IAM is for the
pre-flight checks of `submit` and `schedule`, which ask Google Cloud itself (pipelines/preflight.py).
"""

from __future__ import annotations

import re

from core.names import BIGQUERY_DESTINATION, BIGQUERY_TABLE, BIGQUERY_URI_MAX
from pipelines.config import (
    KMS_KEY,
    LABEL_KEY,
    LABEL_VALUE,
    MAX_LABELS,
    NETWORK,
    NETWORK_ATTACHMENT,
    PERSISTENT_RESOURCE_ID,
    TENSORBOARD,
)
from pipelines.config.accelerators import ACCELERATOR_MACHINES

# stricter than the config's check: an account ID of 6-30 characters, or the Compute Engine default account
SERVICE_ACCOUNT = re.compile(
    r"^([a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9-]+\.iam|[0-9]+-compute@developer)\.gserviceaccount\.com$"
)


def labels(field: str, value: dict) -> str | None:
    if len(value) > MAX_LABELS:
        return f"{field}: at most {MAX_LABELS} labels, got {len(value)}"
    for key, text in value.items():
        if not LABEL_KEY.match(key) or not LABEL_VALUE.match(text):
            return f"{field}: invalid label {key}={text!r} (keys {LABEL_KEY.pattern}, values {LABEL_VALUE.pattern})"
    return None


def identity_parts(data: dict):
    """(field prefix, part) of each part of a request that may hold a service account, network, key or labels: its
    top level, `job_spec`, `trial_job_spec`, `deployed_model`."""
    for where in ("", "job_spec", "trial_job_spec", "deployed_model"):
        yield (f"{where}." if where else ""), (data.get(where, {}) if where else data)


def identity(data: dict, location: str, project_ids: tuple[str, ...]) -> str | None:
    """`service_account`, `network`, `encryption_spec.kms_key_name`, `tensorboard` and `labels` wherever a request
    holds them (at its top level or in `job_spec` / `trial_job_spec` / `deployed_model`)."""
    for prefix, part in identity_parts(data):
        account = part.get("service_account", "")
        if account and not SERVICE_ACCOUNT.match(account):
            return f"{prefix}service_account {account!r} is not a service account e-mail"
        network = part.get("network", "")
        if network and not NETWORK.match(network):
            return f"{prefix}network {network!r} must be projects/PROJECT_NUMBER/global/networks/NAME"
        key = part.get("encryption_spec", {}).get("kms_key_name", "")
        match = KMS_KEY.match(key)
        if key and (not match or match["location"] != location):
            return f"{prefix}encryption_spec.kms_key_name {key!r} must be a Cloud KMS key in {location}"
        board = part.get("tensorboard", "")
        match = TENSORBOARD.match(board)
        if board and (not match or match["location"] != location or match["project"] not in project_ids):
            return f"{prefix}tensorboard {board!r} must be a TensorBoard of this project in {location}"
        problem = labels(f"{prefix}labels", part.get("labels", {}))
        if problem:
            return problem
    return None


def placement(data: dict, location: str) -> str | None:
    """Where a custom job's or a tuning job's trials run (`job_spec` / `trial_job_spec`): a scheduling strategy of
    Scheduling.Strategy, `max_wait_duration` with FLEX_START only, a persistent resource's ID, a PSC interface's
    network attachment in the job's region and never beside a peered `network`."""
    from google.cloud.aiplatform_v1.types import custom_job

    for where in ("job_spec", "trial_job_spec"):
        spec = data.get(where, {})
        scheduling = spec.get("scheduling", {})
        strategy = scheduling.get("strategy", "STRATEGY_UNSPECIFIED")
        if strategy not in custom_job.Scheduling.Strategy.__members__:
            return f"{where}.scheduling.strategy {strategy!r} is not a Scheduling.Strategy"
        if "max_wait_duration" in scheduling and strategy != "FLEX_START":
            return f"{where}.scheduling.max_wait_duration applies to the FLEX_START strategy only, not {strategy}"
        resource = spec.get("persistent_resource_id", "")
        if resource and not PERSISTENT_RESOURCE_ID.fullmatch(resource):
            return f"{where}.persistent_resource_id {resource!r} must match {PERSISTENT_RESOURCE_ID.pattern}"
        attachment = spec.get("psc_interface_config", {}).get("network_attachment", "")
        match = NETWORK_ATTACHMENT.fullmatch(attachment)
        if attachment and (not match or (match["region"] or location) != location):
            return (
                f"{where}.psc_interface_config.network_attachment {attachment!r} must be a network attachment's name "
                f"or projects/P/regions/{location}/networkAttachments/NAME"
            )
        if attachment and spec.get("network"):
            return f"{where}: network and psc_interface_config cannot both be set"
    return None


def _gcs(value: str) -> bool:
    return value.startswith("gs://") and len(value) > len("gs://") and value[len("gs://")] != "/"


def locations(data: dict) -> str | None:
    """Where Vertex AI reads or writes Cloud Storage: a model's `artifact_uri`, a job's base output directory, a batch
    job's sources and destination take gs://BUCKET/PATH (a local path exists on no machine of Vertex's); a batch
    job's BigQuery source is a table, its BigQuery destination a project or dataset."""
    found = {"artifact_uri": data.get("artifact_uri", "")}
    for where in ("job_spec", "trial_job_spec"):
        found[f"{where}.base_output_directory.output_uri_prefix"] = (
            data.get(where, {}).get("base_output_directory", {}).get("output_uri_prefix", "")
        )
    for index, uri in enumerate(data.get("input_config", {}).get("gcs_source", {}).get("uris", [])):
        found[f"input_config.gcs_source.uris[{index}]"] = uri
    found["output_config.gcs_destination.output_uri_prefix"] = (
        data.get("output_config", {}).get("gcs_destination", {}).get("output_uri_prefix", "")
    )
    for field, value in found.items():
        if value and not _gcs(value):
            return f"{field} {value!r} is not a Cloud Storage URI (gs://BUCKET/PATH)"
    table = data.get("input_config", {}).get("bigquery_source", {}).get("input_uri", "")
    if table and not (len(table) <= BIGQUERY_URI_MAX and BIGQUERY_TABLE.fullmatch(table)):
        return f"input_config.bigquery_source.input_uri {table!r} is not a BigQuery table (bq://PROJECT.DATASET.TABLE)"
    written = data.get("output_config", {}).get("bigquery_destination", {}).get("output_uri", "")
    if written and not (len(written) <= BIGQUERY_URI_MAX and BIGQUERY_DESTINATION.fullmatch(written)):
        return (
            f"output_config.bigquery_destination.output_uri {written!r} is not a BigQuery project or dataset "
            "(bq://PROJECT or bq://PROJECT.DATASET)"
        )
    return None


def machine(field: str, spec: dict) -> str | None:
    """A MachineSpec: an accelerator needs a count, and a machine type of its series."""
    accelerator = spec.get("accelerator_type", "")
    accelerator = "" if accelerator == "ACCELERATOR_TYPE_UNSPECIFIED" else accelerator
    count, machine_type = int(spec.get("accelerator_count", 0)), spec.get("machine_type", "")
    if bool(accelerator) != bool(count):
        return f"{field}: accelerator_type and accelerator_count go together (got {accelerator!r}, {count})"
    series = ACCELERATOR_MACHINES.get(accelerator)
    if accelerator and series is None:
        return f"{field}.accelerator_type {accelerator!r} is not an accelerator Vertex AI offers"
    if series and not machine_type.startswith(series):
        return (
            f"{field}: {accelerator} attaches to {' or '.join(s + '*' for s in series)} machines, not {machine_type!r}"
        )
    return None


def resources(data: dict) -> str | None:
    """Every MachineSpec of a request, and a deployment's or a batch job's replica counts."""
    for where in ("job_spec", "trial_job_spec"):
        for index, pool in enumerate(data.get(where, {}).get("worker_pool_specs", [])):
            problem = machine(f"{where}.worker_pool_specs[{index}].machine_spec", pool.get("machine_spec", {}))
            if problem:
                return problem
    batch = data.get("dedicated_resources")
    if batch:  # a batch prediction job's: starting_replica_count 0 lets Vertex choose
        problem = machine("dedicated_resources.machine_spec", batch.get("machine_spec", {}))
        starting, most = int(batch.get("starting_replica_count", 0)), int(batch.get("max_replica_count", 0))
        if not problem and most and starting > most:
            problem = f"dedicated_resources: starting_replica_count {starting} exceeds max_replica_count {most}"
        if problem:
            return problem
    deployed = data.get("deployed_model", {}).get("dedicated_resources")
    if deployed:  # a deployment's: at least one replica (a max below the min is raised to it)
        problem = machine("deployed_model.dedicated_resources.machine_spec", deployed.get("machine_spec", {}))
        if not problem and int(deployed.get("min_replica_count", 0)) < 1:
            problem = "deployed_model.dedicated_resources.min_replica_count must be at least 1"
        if problem:
            return problem
    return None
