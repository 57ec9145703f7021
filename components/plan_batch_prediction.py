"""The model version, instances (files or a BigQuery table), output (files or BigQuery) and instance config of a
Vertex AI batch prediction job."""

from typing import Any, NamedTuple

from kfp.dsl import Artifact, Output


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
) -> NamedTuple(
    "Outputs",
    [
        ("model_name", str),
        ("model_uri", str),
        ("gcs_source_uris", list),
        ("bigquery_source_input_uri", str),
        ("output_prefix", str),
        ("bigquery_destination_output_uri", str),
        ("predictions_format", str),
        ("job_display_name", str),
        ("included_fields", list),
        ("excluded_fields", list),
        ("instance_type", str),
        ("model_parameters", dict),
    ],
):
    """KFP step (Vertex): the model version, the instances as gs:// URIs (comma-separated; `/gcs/` FUSE paths are
    turned back into gs://) or, for instances_format bigquery, the table bq://PROJECT.DATASET.TABLE; the output:
    JSON Lines under a gs:// prefix (`output_prefix`, else this step's artifact URI: one per run), or BigQuery
    tables in the project or dataset `output_prefix` bq://PROJECT[.DATASET] names (predictions_format bigquery);
    the display name (`<run_name>-batch`) of a batch job, and its instance config: the field options checked and
    completed as on the self-hosted targets (`components.lib.batch.instances.instance_config`: by default CSV columns
    and array-typed JSONL objects carry the model's feature columns, read from the version's artifacts), and the
    job's `model_parameters`: `{"signature_name": ...}` when the job must call another signature than
    `serving_default` (`signature_name`, or `components.lib.batch.signatures.choose_signature`'s: a file list of images
    goes to an image model's `serving_image_bytes`), which this project's serving container honours.

    Args:
        model: The version: a version id, alias or resource name (empty: the champion alias's version).
        display_name: Display name of the registry model.
        alias: The version alias that marks the champion.
        instances: The instances: comma-separated gs:// URIs or globs (or /gcs/ paths), or a BigQuery table.
        output_prefix: gs:// prefix of the output directory (empty: this step's artifact URI), or BigQuery's
            bq://PROJECT or bq://PROJECT.DATASET.
        project: Google Cloud project.
        location: Region.
        run_name: The pipeline run's name, part of the job's display name.
        instances_format: Format of the instances: jsonl, csv, tf-record, tf-record-gzip, file-list or bigquery.
        key_field: Field identifying an instance: never sent to the model.
        included_fields: Fields sent to the model, in this order (empty: the model's feature columns).
        excluded_fields: Fields not sent to the model.
        instance_type: JSONL objects sent as objects or as arrays (empty: as given).
        signature_name: The signature to call (empty: chosen from the model and the instances).
    """
    from collections import namedtuple

    from components.lib.batch.instance_formats import B64_FORMATS, BIGQUERY, KEYED_FORMATS
    from components.lib.batch.instances import instance_config
    from components.lib.batch.signatures import choose_signature, model_feature_names, model_signatures
    from components.lib.vertex.registry import find_model_version, resource_uri
    from core.names import bigquery_table, job_display_name, output_location

    uris, table = [], ""
    if instances_format == BIGQUERY:
        table = bigquery_table(instances.strip(), "instances")
    for item in [] if table else (i.strip() for i in instances.split(",")):
        if item.startswith("/gcs/"):
            item = "gs://" + item[len("/gcs/") :]
        if item:
            if item.startswith("bq://"):
                raise ValueError(f"instances {item} is a BigQuery table: set instances_format bigquery")
            if not item.startswith("gs://"):
                raise ValueError(f"Vertex batch prediction reads instances from gs:// URIs, got {item!r}")
            uris.append(item)
    if not uris and not table:
        raise ValueError("no instances given")
    if output_prefix:
        output_location(output_prefix, "output_prefix")
    bigquery_output = output_prefix if output_prefix.startswith("bq://") else ""
    fields: dict[str, Any] = dict(
        key_field=key_field,
        included_fields=included_fields,
        excluded_fields=excluded_fields,
        instance_type=instance_type,
    )
    instance_config(instances_format, **fields, feature_names=None)  # a mistake fails before any look-up
    name, artifact_uri = find_model_version(model, display_name, alias, project, location)
    features = model_feature_names(artifact_uri) if artifact_uri and instances_format in KEYED_FORMATS else []
    config = instance_config(instances_format, **fields, feature_names=features)
    signatures = (
        model_signatures(artifact_uri) if artifact_uri and (signature_name or instances_format in B64_FORMATS) else {}
    )
    signature = choose_signature(signatures, signature_name, instances_format)
    parameters = {} if signature == "serving_default" else {"signature_name": signature}
    prefix = "" if bigquery_output else output_prefix or destination.uri
    print(
        f"model {name}; instances {table or uris}; output {bigquery_output or 'under ' + prefix}; "
        f"instance config {config}; signature {signature}"
    )
    Outputs = namedtuple(
        "Outputs",
        [
            "model_name",
            "model_uri",
            "gcs_source_uris",
            "bigquery_source_input_uri",
            "output_prefix",
            "bigquery_destination_output_uri",
            "predictions_format",
            "job_display_name",
            "included_fields",
            "excluded_fields",
            "instance_type",
            "model_parameters",
        ],
    )
    return Outputs(
        name,
        resource_uri(name),
        uris,
        table,
        prefix,
        bigquery_output,
        "bigquery" if bigquery_output else "jsonl",
        job_display_name(run_name, "batch"),
        list(config.included_fields),
        list(config.excluded_fields),
        config.instance_type,
        parameters,
    )
