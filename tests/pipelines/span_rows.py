"""Build otel_traces rows exactly as the OTel Collector's ClickHouse exporter inserts them.

Attribute values are text as the Collector writes them (numbers in decimal, arrays as JSON). Used by
the schema and query tests to insert directly, the way a Collector in front of our tables would.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from infersight.pipelines.schema.ddl import DEFAULT_TABLES, EXPORTER_INSERT_COLUMNS


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def span_row(start: dt.datetime, trace_id: str, span_id: str, name: str, duration_ms: float,
             service: str = "gateway", parent: str = "", attributes: dict[str, Any] | None = None,
             status: str = "Ok", kind: str = "Server") -> list:
    attrs = {k: as_text(v) for k, v in (attributes or {}).items()}
    return [start, trace_id, span_id, parent, "", name, kind, service, {"service.name": service},
            "infersight.tests", "0.1.0", attrs, int(duration_ms * 1_000_000), status, "", [], [], [], [], [], [], []]


def insert_spans(client, database: str, rows: list[list]) -> None:
    client.insert(DEFAULT_TABLES.traces, rows, column_names=list(EXPORTER_INSERT_COLUMNS), database=database)
