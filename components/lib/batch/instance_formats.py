"""Vertex AI batch prediction's instance formats (DESIGN.md §3): the config's, the CLI's and both predictors'."""

from typing import Literal, get_args

InstancesFormat = Literal["jsonl", "csv", "tf-record", "tf-record-gzip", "file-list", "bigquery"]
FORMATS: tuple[str, ...] = get_args(InstancesFormat)
BIGQUERY = "bigquery"  # rows of a BigQuery table (bq://PROJECT.DATASET.TABLE): read by Vertex AI only
FILE_FORMATS = tuple(f for f in FORMATS if f != BIGQUERY)  # what the self-hosted predictor reads
# `target`: "target local", "targets local and kubeflow"
SELF_HOSTED_BIGQUERY = (
    "instances_format bigquery: the batch predictor of {target} reads files, and there is no BigQuery here; run "
    "the batch prediction on target vertex, or export the table to files (" + ", ".join(FILE_FORMATS) + ")"
)
B64_FORMATS = ("tf-record", "tf-record-gzip", "file-list")  # records reach the model as {"b64": ...}
KEYED_FORMATS = ("jsonl", "csv", BIGQUERY)  # the formats whose records have fields (key, included, excluded fields)
ARRAY_FORMATS = ("csv", BIGQUERY)  # records that reach the model as arrays unless instance_type says otherwise
