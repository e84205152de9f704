"""Time windows for post-incident queries: ``--since 30m`` or ``--from/--to`` in ISO 8601.

Times are handled in UTC and handed to ClickHouse as naive UTC datetimes, which is how
``DateTime64(9)`` columns without a time zone store them on a UTC server.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_WINDOW = dt.timedelta(days=31)


class WindowError(ValueError):
    """A time window or instant that cannot be used; the message says what to write instead."""


@dataclass(frozen=True)
class Window:
    start: dt.datetime  # naive UTC
    end: dt.datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def __str__(self) -> str:
        return f"{self.start.isoformat(sep=' ')} .. {self.end.isoformat(sep=' ')} UTC"


def parse_duration(text: str) -> dt.timedelta:
    """``30m``, ``2h``, ``1.5s``, ``500ms``, ``7d``."""
    match = DURATION_RE.match(text.strip())
    if not match:
        raise WindowError(f"{text!r} is not a duration; write a number and a unit, e.g. 30m, 2h, 90s, 500ms")
    return dt.timedelta(seconds=float(match.group(1)) * UNITS[match.group(2)])


def parse_time(text: str) -> dt.datetime:
    """An ISO 8601 instant (``2026-03-01T14:05:00Z``, with an offset, or naive meaning UTC) as naive UTC."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise WindowError(f"{text!r} is not an ISO 8601 time; e.g. 2026-03-01T14:05:00Z") from None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def resolve(since: str | None = None, start: str | None = None, end: str | None = None,
            default_since: str = "1h", now: dt.datetime | None = None) -> Window:
    """The window from CLI flags: ``since`` alone, or ``start`` with an optional ``end`` (default now)."""
    now = now or utc_now()
    if since and (start or end):
        raise WindowError("use either --since or --from/--to, not both")
    if start:
        window = Window(parse_time(start), parse_time(end) if end else now)
    elif end:
        raise WindowError("--to needs --from (or use --since)")
    else:
        window = Window(now - parse_duration(since or default_since), now)
    if window.end <= window.start:
        raise WindowError(f"the window is empty or reversed ({window}); --from must be before --to")
    if window.end - window.start > MAX_WINDOW:
        raise WindowError(f"the window spans {window.end - window.start}; keep it under {MAX_WINDOW.days} days")
    return window
