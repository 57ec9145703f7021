"""Between the double's records (dicts of proto field names, times in epoch seconds) and aiplatform_v1's messages,
and Vertex's list conventions: a `display_name="..."` filter and pages of at most PAGE_SIZE items."""

from __future__ import annotations

import re

from google.protobuf import timestamp_pb2

from pipelines.rehearsal.registry import ApiError

PAGE_SIZE = 2  # Vertex pages its lists (up to 100 by default); small pages here, so that paging is exercised
_DISPLAY_NAME = re.compile(r'display_name\s*=\s*"((?:[^"\\]|\\.)*)"')


def to_dict(message) -> dict:
    """A proto-plus message as a dict: proto field names, enums by name, fields left at their default omitted."""
    return type(message).to_dict(
        message, preserving_proto_field_name=True, use_integers_for_enums=False, including_default_value_fields=False
    )


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


def display_name(filter_text: str) -> str | None:
    """The display name a list's `filter` asks for (`display_name="..."`); None: any."""
    match = _DISPLAY_NAME.search(filter_text or "")
    return match[1].replace('\\"', '"').replace("\\\\", "\\") if match else None


def page(items: list, page_size: int, page_token: str) -> tuple[list, str]:
    """One page of a list and the next page's token, as Vertex pages them (here at most PAGE_SIZE items, so that a
    client that reads only the first page misses what follows)."""
    size = min(page_size or PAGE_SIZE, PAGE_SIZE)
    try:
        start = int(page_token or 0)
    except ValueError:
        raise ApiError("INVALID_ARGUMENT", f"page_token {page_token!r} is not one this API gave") from None
    end = start + size
    return items[start:end], str(end) if end < len(items) else ""
