"""Links from the incident report into Grafana: a trace id opens Grafana's trace view.

The link is an Explore URL whose one pane runs the same trace-id query the Traces dashboard's data
link runs (:func:`infersight.dashboards.traces.trace_link`), with the trace id and the datasource
uid filled in, so a report and a dashboard open the same view. Grafana is not installable here:
the URL follows Grafana's documented Explore ``panes`` format and is checked by structure only.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import urllib.parse

from infersight.dashboards.datasources import CLICKHOUSE_UID
from infersight.dashboards.traces import TRACE_VALUE, trace_link, trace_view_sql
from infersight.pipelines.schema.ddl import DEFAULT_TABLES, Tables

TRACE_ID = re.compile(r"[0-9a-f]{32}")


def trace_url(grafana_url: str, database: str, trace_id: str, around: tuple[dt.datetime, dt.datetime],
              datasource_uid: str | None = None, tables: Tables = DEFAULT_TABLES) -> str | None:
    """Grafana Explore showing ``trace_id`` in the trace view, with the time range ``around`` (naive UTC).

    None for an id that is not 32 lowercase hex digits: the id goes into the query's SQL text, and a
    span written by a foreign exporter could carry anything there.
    """
    if not TRACE_ID.fullmatch(trace_id):
        return None
    uid = datasource_uid or CLICKHOUSE_UID
    query = copy.deepcopy(trace_link(database, tables)["internal"]["query"])
    query["datasource"] = {"type": query["datasource"]["type"], "uid": uid}
    query["rawSql"] = trace_view_sql(database, trace_id, tables)
    query["builderOptions"]["meta"]["traceId"] = trace_id
    if TRACE_VALUE in json.dumps(query):
        raise RuntimeError("the dashboards' trace query gained a placeholder the report does not fill")
    start, end = (int(t.replace(tzinfo=dt.UTC).timestamp() * 1000) for t in around)
    panes = {"trace": {"datasource": uid, "queries": [query], "range": {"from": str(start), "to": str(end)}}}
    return (f"{grafana_url.rstrip('/')}/explore?schemaVersion=1&orgId=1&panes="
            + urllib.parse.quote(json.dumps(panes, separators=(",", ":")), safe=""))
