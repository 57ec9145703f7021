"""The error every part of the configuration raises for the user: `pipelines.errors.ConfigError`, a TfpipeError."""

from __future__ import annotations

from pipelines.errors import ConfigError

__all__ = ["ConfigError"]
