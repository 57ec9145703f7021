"""Cron expressions of schedules, checked locally before any API call.

Vertex AI schedules take a standard five-field cron expression with an optional time zone prefix,
`TZ=<IANA zone> ` or `CRON_TZ=<IANA zone> ` (without one, Vertex evaluates it in UTC). The fields are validated
with croniter and the zone with zoneinfo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_PREFIX = re.compile(r"^(?P<key>TZ|CRON_TZ)=(?P<zone>\S+)\s+(?P<fields>.+)$")
_FIELDS = "minute hour day-of-month month day-of-week"


@dataclass(frozen=True)
class Cron:
    fields: str  # the five fields, single-spaced
    zone: str = ""  # IANA time zone; "" = none given (Vertex: UTC)
    prefix: str = "TZ"  # TZ or CRON_TZ, as given

    def __str__(self) -> str:
        """The expression as the schedule receives it."""
        return f"{self.prefix}={self.zone} {self.fields}" if self.zone else self.fields

    def next_runs(self, count: int = 3, after: datetime | None = None) -> list[datetime]:
        """The next `count` run times (aware datetimes in the expression's zone, UTC without one)."""
        from croniter import croniter

        zone = ZoneInfo(self.zone or "UTC")
        schedule = croniter(self.fields, (after or datetime.now(zone)).astimezone(zone))
        return [schedule.get_next(datetime) for _ in range(count)]


def parse_cron(text: str) -> Cron:
    """Parse and validate `text`; raise ValueError with a one-line reason."""
    from croniter import croniter

    text = " ".join((text or "").split())
    if not text:
        raise ValueError("a cron expression is required, like '0 3 * * 1' or 'TZ=Europe/Paris 0 3 * * 1'")
    prefix, zone, fields = "TZ", "", text
    if match := _PREFIX.match(text):
        prefix, zone, fields = match["key"], match["zone"], match["fields"]
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {zone!r} in {text!r}: use an IANA name like Europe/Paris") from None
    elif re.match(r"^(TZ|CRON_TZ)=", text):
        raise ValueError(f"{text!r}: the time zone prefix must be followed by the five cron fields")
    count = len(fields.split(" "))
    if count != 5:
        raise ValueError(f"{fields!r} has {count} field(s); a cron expression has 5 ({_FIELDS})")
    if not croniter.is_valid(fields):
        raise ValueError(f"{fields!r} is not a valid cron expression ({_FIELDS})")
    return Cron(fields, zone, prefix)
