"""The post-incident queries of ``pipelines/queries/library.py``, as Grafana ClickHouse panel SQL.

The library's SQL is never copied: each query function runs against :class:`CapturingClient`,
which records the SQL text and its bound parameters instead of querying. Then every server-side
parameter becomes what Grafana can send: the time window becomes the plugin's macros
(``$__fromTime_ms``/``$__toTime_ms``, ``$__fromTime`` for ``DateTime`` parameters), the database
an identifier, filters the dashboard lets the user pick become its template variables
(``${model:sqlstring}``: Grafana quotes and escapes the chosen value), and the remaining values
literals fixed when the dashboard is built.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any

# A library query's server-side parameter: {name:Type}.
PARAMETER = re.compile(r"\{(\w+):([^{}]+)\}")
WINDOW_MACROS = {
    ("start", "DateTime64(9)"): "$__fromTime_ms",
    ("end", "DateTime64(9)"): "$__toTime_ms",
    ("start", "DateTime"): "$__fromTime",
    ("end", "DateTime"): "$__toTime",
}
# Any instant does: the capture replaces the window with macros.
_ANY = dt.datetime(2000, 1, 1)


class CapturingClient:
    """Stands in for a clickhouse-connect client: keeps the query instead of running it."""

    def __init__(self) -> None:
        self.sql = ""
        self.parameters: dict[str, Any] = {}

    def query(self, sql: str, parameters: dict[str, Any]):
        self.sql, self.parameters = sql, dict(parameters)
        return self

    def named_results(self) -> list:
        return []


def capture(query: Callable[..., Any], database: str, **options: Any) -> tuple[str, dict[str, Any]]:
    """The SQL and parameters ``query(client, database, start, end, **options)`` would send."""
    client = CapturingClient()
    query(client, database, _ANY, _ANY, **options)
    if not client.sql:
        raise RuntimeError(f"{query.__name__} sent no query")
    return client.sql, client.parameters


def _literal(name: str, ch_type: str, value: Any) -> str:
    if ch_type == "Identifier":
        return "`" + str(value).replace("\\", "\\\\").replace("`", "\\`") + "`"
    if ch_type == "String":
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if ch_type == "Array(String)":
        return "[" + ", ".join(_literal(name, "String", v) for v in value) + "]"
    if re.fullmatch(r"U?Int\d+|Float\d+", ch_type) and isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    raise ValueError(f"parameter {name} of type {ch_type} ({value!r}) has no Grafana rendering")


def grafana_sql(query: Callable[..., Any], database: str, variables: Mapping[str, str] | None = None,
                **options: Any) -> str:
    """The library query as panel SQL: the dashboard's time range via macros, the String parameters named in
    ``variables`` (parameter -> dashboard variable) via those variables, everything else literal."""
    sql, parameters = capture(query, database, **options)
    variables = variables or {}
    unknown = set(variables) - set(parameters)
    if unknown:
        raise ValueError(f"{query.__name__} has no parameter {sorted(unknown)} for a dashboard variable")

    def render(match: re.Match) -> str:
        name, ch_type = match.group(1), match.group(2)
        macro = WINDOW_MACROS.get((name, ch_type))
        if macro:
            return macro
        if name in variables:
            if ch_type != "String":
                raise ValueError(f"parameter {name} of type {ch_type} cannot take a dashboard variable")
            return f"${{{variables[name]}:sqlstring}}"
        if name in ("start", "end"):
            raise ValueError(f"time parameter {name} of type {ch_type} has no Grafana macro")
        return _literal(name, ch_type, parameters[name])

    return PARAMETER.sub(render, sql).strip()
