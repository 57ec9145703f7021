"""The CLI's one line for an error of a cloud call raised outside the API (pipelines/cloud_errors.py)."""

from pipelines.cloud_errors import describe

__all__ = ["describe"]
