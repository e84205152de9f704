"""Traces: the post-incident questions from ClickHouse, for the dashboard's time range.

Each panel runs a query of ``pipelines/queries/library.py`` (captured, never copied; see
:mod:`infersight.dashboards.sql`), so the dashboard and ``infersight traces ...`` give the same answers.
The library's optional filters (model, pool, instance) are the dashboard's variables; a trace id
opens the trace in Grafana's trace view (the ClickHouse plugin's trace-id query).
"""

from __future__ import annotations

from infersight.config import Config
from infersight.dashboards.datasources import CLICKHOUSE_NAME, CLICKHOUSE_REF, clickhouse_database
from infersight.dashboards.panels import Line, dashboard, layout, sql_table, sql_timeseries, sql_variable
from infersight.dashboards.sql import grafana_sql
from infersight.pipelines.queries import library
from infersight.pipelines.schema.ddl import DEFAULT_TABLES, Tables
from infersight.thresholds import Thresholds

UID = "infersight-traces"
SLOWEST = 20
# Library filter parameter -> dashboard variable (the same names as on the Prometheus dashboards,
# so links between them carry the choice).
FILTERS = {"model": "model", "pool": "pool", "instance": "instance"}
COLUMNS = {"model": "Model", "pool": "Pool", "instance": "Instance"}
# "All" sends the SQL empty string: the library's "({x:String} = '' OR X = {x:String})" then matches all.
ALL_SQL = "''"
TRACE_VALUE = "${__value.raw}"
# The trace view's frame (the plugin's trace format): one row per span with these column names.
TRACE_FORMAT = 3


def _quote(name: str) -> str:
    return "`" + name.replace("`", "\\`") + "`"


# Table names go into the SQL as they are: clickhouse.tables only takes plain names (letters, digits, _).


def trace_view_sql(database: str, trace_id: str = TRACE_VALUE, tables: Tables = DEFAULT_TABLES) -> str:
    """One trace's spans in the columns Grafana's trace view reads, bounded by the trace-id lookup table."""
    db = _quote(database)
    # DateTime64 bounds: compared as whole-second DateTime, part pruning skips unmerged parts in the
    # trace's last second (see library.trace_spans).
    return f"""WITH (SELECT (toDateTime64(min(Start), 9), toDateTime64(max(End), 9) + toIntervalSecond(1))
      FROM {db}.{tables.trace_id_ts} WHERE TraceId = '{trace_id}') AS span_range
SELECT TraceId AS traceID, SpanId AS spanID, ParentSpanId AS parentSpanID, ServiceName AS serviceName,
       SpanName AS operationName, toUnixTimestamp64Nano(Timestamp) / 1000000 AS startTime,
       Duration / 1000000 AS duration,
       arrayMap(key -> map('key', key, 'value', SpanAttributes[key]), mapKeys(SpanAttributes)) AS tags,
       arrayMap(key -> map('key', key, 'value', ResourceAttributes[key]), mapKeys(ResourceAttributes)) AS serviceTags,
       StatusCode AS statusCode
FROM {db}.{tables.traces}
WHERE TraceId = '{trace_id}' AND Timestamp >= span_range.1 AND Timestamp < span_range.2
ORDER BY Timestamp, SpanId"""


def trace_link(database: str, tables: Tables = DEFAULT_TABLES) -> dict:
    """A data link that opens the clicked trace id in Explore's trace view (ClickHouse plugin, trace-id mode)."""
    query = {
        "datasource": dict(CLICKHOUSE_REF), "refId": "Trace ID", "editorType": "builder", "queryType": "traces",
        "format": TRACE_FORMAT, "rawSql": trace_view_sql(database, tables=tables),
        "builderOptions": {"database": database, "table": tables.traces, "queryType": "traces", "columns": [],
                           "filters": [], "orderBy": [],
                           "meta": {"isTraceIdMode": True, "traceId": TRACE_VALUE, "otelEnabled": True,
                                    "otelVersion": "latest", "traceDurationUnit": "nanoseconds", "minimized": True}},
    }
    return {"title": "Open trace", "url": "", "targetBlank": False,
            "internal": {"datasourceUid": CLICKHOUSE_REF["uid"], "datasourceName": CLICKHOUSE_NAME, "query": query}}


def variables_sql(database: str, tables: Tables = DEFAULT_TABLES) -> dict[str, str]:
    """Each filter variable's query: the values seen on request spans in the dashboard's time range."""
    return {name: f"SELECT DISTINCT {column} FROM {_quote(database)}.{tables.traces} "
                  f"WHERE $__timeFilter_ms(Timestamp) AND IsRequest AND {column} != '' ORDER BY {column}"
            for name, column in COLUMNS.items()}


def panels_sql(database: str, tables: Tables = DEFAULT_TABLES) -> dict[str, str]:
    """Each panel's SQL by title (the tests run these against ClickHouse)."""
    t = tables
    return {
        "Slowest requests by TTFT": grafana_sql(library.slowest, database, FILTERS, by="ttft", limit=SLOWEST,
                                                tables=t),
        "Slowest requests end to end": grafana_sql(library.slowest, database, FILTERS, by="e2e", limit=SLOWEST,
                                                   tables=t),
        "Token stalls per instance and minute": grafana_sql(library.window_stalls, database, FILTERS, tables=t),
        "TTFT percentiles per minute, by pool": grafana_sql(
            library.percentiles, database, {"pool": "pool", "instance": "instance"}, by="pool", tables=t),
        "Canary vs stable": grafana_sql(library.compare_pools, database, tables=t),
        "Retry chains": grafana_sql(library.retries, database, tables=t),
    }


def build(config: Config, limits: Thresholds) -> dict:
    database = clickhouse_database(config.clickhouse.dsn)
    tables = Tables.from_config(config)
    sql = panels_sql(database, tables)
    slo_ms = limits.ttft_slo_seconds * 1000
    open_trace = [("trace_id", [trace_link(database, tables)])]
    rows = [
        ("Slowest requests", [
            sql_table("Slowest requests by TTFT", sql["Slowest requests by TTFT"], width=12, links=open_trace,
                      description="One row per trace, slowest first; click a trace id for its span tree "
                                  "('infersight traces show TRACE' in a terminal).",
                      good=f"the top TTFT under the SLO ({slo_ms:g} ms); a slow row with a long max_gap_ms "
                           "stalled mid-stream rather than queued."),
            sql_table("Slowest requests end to end", sql["Slowest requests end to end"], width=12, links=open_trace,
                      description="One row per trace by end-to-end time.",
                      good="the slowest are the longest outputs (output_tokens), not short requests that waited."),
        ]),
        ("Stalls and latency over time", [
            sql_table("Token stalls per instance and minute", sql["Token stalls per instance and minute"],
                      width=12, description="Requests whose longest inter-token gap passed 500 ms, by the minute "
                                            "the gap started; sampled token timelines only.",
                      good="empty; rows on one instance in one minute point at that instance, not the fleet."),
            sql_timeseries("TTFT percentiles per minute, by pool", sql["TTFT percentiles per minute, by pool"], "ms",
                           hide_columns=("requests", "errors"), line=Line(slo_ms), width=12,
                           description=f"From the {tables.requests_1m} rollup; the line is the TTFT SLO.",
                           good="p99 under the line, canary and stable together."),
        ]),
        ("Pools and retries", [
            sql_table("Canary vs stable", sql["Canary vs stable"], width=12,
                      description="TTFT percentiles, decode tokens/s and error rate per pool over the time range.",
                      good="canary within a few percent of stable on every column."),
            sql_table("Retry chains", sql["Retry chains"], width=12, links=open_trace,
                      description="Every attempt of requests tried twice or more, with the gap between attempts.",
                      good="few chains, each with a backoff_ms and gap_ms that grow from attempt to attempt."),
        ]),
    ]
    variables = [sql_variable(name, name, query, all_value=ALL_SQL,
                              description=f"Request spans of this {name} only (All: every {name}).")
                 for name, query in variables_sql(database, tables).items()]
    return dashboard(UID, "infersight / Traces", "Post-incident questions answered from the ClickHouse trace "
                     "store: slowest requests, stalls, TTFT percentiles per minute, canary vs stable, retries.",
                     layout(rows), variables, time_from="now-1h")
