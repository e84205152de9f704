"""Traces: the post-incident questions from ClickHouse, for the dashboard's time range.

Each panel runs a query of ``pipelines/queries/library.py`` (captured, never copied; see
:mod:`infersight.dashboards.sql`), so the dashboard and ``infersight traces ...`` give the same answers.
"""

from __future__ import annotations

from grafanalib import core

from infersight.alerts.limits import Limits
from infersight.config import Config
from infersight.dashboards.datasources import clickhouse_database
from infersight.dashboards.panels import Line, dashboard, layout, sql_table, sql_timeseries
from infersight.dashboards.sql import grafana_sql
from infersight.pipelines.queries import library

UID = "infersight-traces"
SLOWEST = 20


def panels_sql(database: str) -> dict[str, str]:
    """Each panel's SQL by title (the tests run these against ClickHouse)."""
    return {
        "Slowest requests by TTFT": grafana_sql(library.slowest, database, by="ttft", limit=SLOWEST),
        "Slowest requests end to end": grafana_sql(library.slowest, database, by="e2e", limit=SLOWEST),
        "Token stalls per instance and minute": grafana_sql(library.window_stalls, database),
        "TTFT percentiles per minute, by pool": grafana_sql(library.percentiles, database, by="pool"),
        "Canary vs stable": grafana_sql(library.compare_pools, database),
        "Retry chains": grafana_sql(library.retries, database),
    }


def build(config: Config, limits: Limits) -> core.Dashboard:
    sql = panels_sql(clickhouse_database(config.clickhouse.dsn))
    slo_ms = limits.ttft_slo_seconds * 1000
    rows = [
        ("Slowest requests", [
            sql_table("Slowest requests by TTFT", sql["Slowest requests by TTFT"], width=12,
                      description="One row per trace; open a trace with 'infersight traces show TRACE'."),
            sql_table("Slowest requests end to end", sql["Slowest requests end to end"], width=12),
        ]),
        ("Stalls and latency over time", [
            sql_table("Token stalls per instance and minute", sql["Token stalls per instance and minute"],
                      width=12, description="Requests whose longest inter-token gap passed 500 ms, by the minute "
                                            "the gap started; sampled token timelines only."),
            sql_timeseries("TTFT percentiles per minute, by pool", sql["TTFT percentiles per minute, by pool"], "ms",
                           hide_columns=("requests", "errors"), line=Line(slo_ms), width=12,
                           description="From the llm_requests_1m rollup; the line is the TTFT SLO."),
        ]),
        ("Pools and retries", [
            sql_table("Canary vs stable", sql["Canary vs stable"], width=12),
            sql_table("Retry chains", sql["Retry chains"], width=12,
                      description="Every attempt of requests tried twice or more, with the gap between attempts."),
        ]),
    ]
    return dashboard(UID, "infersight / Traces", "Post-incident questions answered from the ClickHouse trace "
                     "store: slowest requests, stalls, TTFT percentiles per minute, canary vs stable, retries.",
                     layout(rows), time_from="now-1h")
