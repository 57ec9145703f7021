"""What a command was doing when a cloud call failed: `doing` tags the error with it, and the CLI's one line for
the error (pipelines/cloud_errors.py) starts with it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_ACTION = "tfpipe_action"  # the attribute `doing` sets on an exception


@contextlib.contextmanager
def doing(action: str) -> Iterator[None]:
    """Tag an error raised inside with `action` (the innermost one wins)."""
    try:
        yield
    except Exception as e:
        if not hasattr(e, _ACTION):
            setattr(e, _ACTION, action)
        raise


def action_of(error: BaseException) -> str | None:
    """What the command was doing when `error` was raised (`doing`), if it said."""
    return getattr(error, _ACTION, None)
