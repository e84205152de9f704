"""Helpers shared by the dashboard tests: the built dashboards and every query they hold."""

from __future__ import annotations

import re
from dataclasses import dataclass

from infersight.dashboards.build import all_dashboards
from infersight.dashboards.datasources import CLICKHOUSE_PLUGIN

# What Grafana puts in for "All" of a variable (allValue): the regex matches everything.
VARIABLE = re.compile(r"\$(?!__)(\w+)\b")
ALL = ".*"
# $__rate_interval as Grafana computes it for the provisioned datasource (timeInterval 15s): 4 x 15s.
RATE_INTERVAL = "1m"


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    datasource: str  # prometheus or the ClickHouse plugin
    text: str  # PromQL or SQL as the dashboard holds it

    @property
    def expanded(self) -> str:
        """The query with the dashboard variables set to All, as Grafana sends it."""
        return VARIABLE.sub(ALL, self.text.replace("$__rate_interval", RATE_INTERVAL))


def panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] != "row"]


def queries(boards: list[dict]) -> list[Query]:
    found = []
    for board in boards:
        for panel in panels(board):
            for target in panel["targets"]:
                source = target["datasource"]["type"]
                text = target["rawSql"] if source == CLICKHOUSE_PLUGIN else target["expr"]
                found.append(Query(board["uid"], panel["title"], source, text))
    return found


def promql(boards: list[dict]) -> list[Query]:
    return [q for q in queries(boards) if q.datasource == "prometheus"]


def sql(boards: list[dict]) -> list[Query]:
    return [q for q in queries(boards) if q.datasource == CLICKHOUSE_PLUGIN]


def prometheus_variables(board: dict) -> list[dict]:
    """The board's Prometheus query variables (not its datasource or ClickHouse ones)."""
    return [v for v in board["templating"]["list"]
            if v["type"] == "query" and v["datasource"]["type"] == "prometheus"]


def default_boards() -> list[dict]:
    from infersight.config import parse_config

    return all_dashboards(parse_config({}))
