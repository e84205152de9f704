"""Grafana ClickHouse plugin macros expanded as the plugin's backend does (pkg/macros/macros.go, v4).

Grafana is not installable here, so the tests run every SQL panel through this and then against a
real ClickHouse. The forms follow the plugin: seconds as ``toDateTime(<unix s>)``, milliseconds as
``fromUnixTimestamp64Milli(<unix ms>)``, ``$__timeFilter(col)`` as ``col >= from AND col <= to``,
``$__timeInterval(col)`` as ``toStartOfInterval(toDateTime(col), INTERVAL n second)``.
"""

from __future__ import annotations

import datetime as dt
import re

MACRO = re.compile(r"\$__(\w+)(?:\(([^()]*)\))?")


class MacroError(ValueError):
    """A macro the plugin does not know, or one with the wrong arguments."""


def expand(sql: str, start: dt.datetime, end: dt.datetime, interval_seconds: int = 60) -> str:
    """``sql`` with every ``$__macro`` replaced for the window ``[start, end]`` (aware or naive UTC)."""
    start, end = _utc(start), _utc(end)

    def seconds(t: dt.datetime) -> str:
        return f"toDateTime({int(t.timestamp())})"

    def millis(t: dt.datetime) -> str:
        return f"fromUnixTimestamp64Milli({int(t.timestamp() * 1000)})"

    def one(args: list[str], name: str) -> str:
        if len(args) != 1:
            raise MacroError(f"$__{name} expects 1 argument, got {len(args)}")
        return args[0]

    def replace(match: re.Match) -> str:
        name = match.group(1)
        args = [a.strip() for a in match.group(2).split(",")] if match.group(2) else []
        if name == "fromTime":
            return seconds(start)
        if name == "toTime":
            return seconds(end)
        if name == "fromTime_ms":
            return millis(start)
        if name == "toTime_ms":
            return millis(end)
        if name == "timeFilter":
            column = one(args, name)
            return f"{column} >= {seconds(start)} AND {column} <= {seconds(end)}"
        if name == "timeFilter_ms":
            column = one(args, name)
            return f"{column} >= {millis(start)} AND {column} <= {millis(end)}"
        if name == "timeInterval":
            return f"toStartOfInterval(toDateTime({one(args, name)}), INTERVAL {max(interval_seconds, 1)} second)"
        if name == "interval_s":
            return str(max(interval_seconds, 1))
        raise MacroError(f"$__{name} is not a macro of the ClickHouse plugin")

    return MACRO.sub(replace, sql)


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t


VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")


def interpolate(sql: str, values: dict[str, str | None], all_values: dict[str, str]) -> str:
    """Template variables replaced as Grafana does for a single-value variable: ``values[name]`` is the chosen
    value, ``None`` for "All". A custom all value goes in unformatted; ``:sqlstring`` quotes and escapes
    (``'`` doubled, as Grafana's formatter does). Names that are not in ``values`` stay as they are."""

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name not in values:
            return match.group(0)
        value, fmt = values[name], match.group(2)
        if value is None:
            if name not in all_values:
                raise MacroError(f"${name} has no custom all value")
            return all_values[name]
        if fmt == "sqlstring":
            return "'" + value.replace("'", "''") + "'"
        if fmt in (None, "raw"):
            return value
        raise MacroError(f"format {fmt!r} of ${name} is not emulated here")

    return VARIABLE.sub(replace, sql)
