"""Vertex AI batch prediction's instance formats (DESIGN.md §3): the config's, the CLI's and both predictors'."""

from typing import Literal, get_args

InstancesFormat = Literal["jsonl", "csv", "tf-record", "tf-record-gzip", "file-list"]
FORMATS: tuple[str, ...] = get_args(InstancesFormat)
B64_FORMATS = ("tf-record", "tf-record-gzip", "file-list")  # records reach the model as {"b64": ...}
KEYED_FORMATS = ("jsonl", "csv")  # the formats whose records have fields (key, included, excluded fields)
