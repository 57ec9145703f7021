"""The error every part of the configuration raises for the user."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration is invalid (user-facing message)."""
