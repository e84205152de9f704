"""Panel builders on top of grafanalib: one look for every dashboard, datasources and units always set.

Dashboards describe their content as rows of panels; :func:`layout` places them on Grafana's
24-column grid, so no dashboard module does grid arithmetic.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import attr
from grafanalib import core

from infersight.dashboards.datasources import CLICKHOUSE_REF, PROMETHEUS_REF

PANEL_HEIGHT = 8
GRID_WIDTH = 24
# Every Prometheus query filters on these dashboard variables; "All" matches everything.
ALL = ".*"


@dataclass(frozen=True)
class Q:
    """One PromQL query of a panel and its legend (``{{label}}`` placeholders)."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Line:
    """A threshold drawn on a panel. ``below`` colours the area under it red instead of above;
    ``warn`` adds an orange line before it (e.g. the share of the SLO where scale-out starts)."""

    value: float
    below: bool = False
    warn: float | None = None


@attr.s
class ClickHouseTarget:
    """A raw-SQL query of the grafana-clickhouse-datasource plugin (its v4 query model)."""

    rawSql: str = attr.ib()  # noqa: N815 - the plugin's field name
    refId: str = attr.ib(default="A")  # noqa: N815
    time_series: bool = attr.ib(default=False)

    def to_json_data(self) -> dict:
        # format 0 is time series, 1 table in the plugin's Format enum
        return {"datasource": CLICKHOUSE_REF, "editorType": "sql", "rawSql": self.rawSql, "refId": self.refId,
                "format": 0 if self.time_series else 1,
                "queryType": "timeseries" if self.time_series else "table"}


def _thresholds(line: Line | None) -> list[dict]:
    if line is None:
        return [{"color": "green", "value": None}]
    if line.below:
        return [{"color": "red", "value": None}, {"color": "green", "value": line.value}]
    warn = [] if line.warn is None else [{"color": "orange", "value": line.warn}]
    return [{"color": "green", "value": None}, *warn, {"color": "red", "value": line.value}]


def timeseries(title: str, unit: str, queries: Sequence[Q], *, description: str = "", line: Line | None = None,
               stack: bool = False, max_value: float | None = None, width: int = 8,
               repeat: str | None = None) -> core.TimeSeries:
    """A Prometheus time series panel; ``line`` draws the threshold the alerts use."""
    targets = [core.Target(expr=q.expr, legendFormat=q.legend, refId=string.ascii_uppercase[i],
                           datasource=PROMETHEUS_REF) for i, q in enumerate(queries)]
    return core.TimeSeries(
        title=title, description=description, dataSource=PROMETHEUS_REF, targets=targets, unit=unit,
        thresholds=_thresholds(line), thresholdsStyleMode="line" if line else "off",
        stacking={"mode": "normal", "group": "A"} if stack else {}, fillOpacity=30 if stack else 10,
        valueMin=0, valueMax=max_value, legendDisplayMode="table", legendPlacement="right",
        legendCalcs=["lastNotNull", "max"], tooltipMode="multi", span=width,
        repeat=core.Repeat("h", repeat, 4) if repeat else core.Repeat(),
    )


@attr.s
class Heatmap(core.Panel):
    """Grafana's heatmap panel over pre-bucketed Prometheus histograms (no client-side bucketing)."""

    unit: str = attr.ib(default="s")

    def to_json_data(self) -> dict:
        return self.panel_json({
            "type": "heatmap",
            "fieldConfig": {"defaults": {"unit": "reqps"}, "overrides": []},
            "options": {"calculate": False, "yAxis": {"unit": self.unit}, "cellValues": {"unit": "reqps"},
                        "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5},
                        "tooltip": {"mode": "single", "yHistogram": True}, "legend": {"show": True}},
        })


def heatmap(title: str, bucket_rate: str, *, description: str = "", width: int = 8) -> Heatmap:
    """A heatmap of ``sum by (le) (rate(<bucket>[w]))``: each bucket's observations per second over time."""
    target = core.Target(expr=bucket_rate, legendFormat="{{le}}", refId="A", format="heatmap",
                         datasource=PROMETHEUS_REF)
    return Heatmap(title=title, description=description, dataSource=PROMETHEUS_REF, targets=[target], span=width)


def sql_table(title: str, sql: str, *, description: str = "", width: int = 24) -> core.Table:
    """A ClickHouse table panel; columns ending in ``_ms`` show as milliseconds."""
    return core.Table(
        title=title, description=description, dataSource=CLICKHOUSE_REF, targets=[ClickHouseTarget(sql)],
        unit="none", span=width, filterable=True,
        overrides=[{"matcher": {"id": "byRegexp", "options": ".*_ms$"},
                    "properties": [{"id": "unit", "value": "ms"}]}],
    )


def sql_timeseries(title: str, sql: str, unit: str, *, description: str = "", hide_columns: Sequence[str] = (),
                   line: Line | None = None, width: int = 12) -> core.TimeSeries:
    """A ClickHouse time series panel; ``hide_columns`` drops numeric columns that are not series."""
    transformations = []
    if hide_columns:
        transformations.append({"id": "organize",
                                "options": {"excludeByName": {c: True for c in hide_columns}}})
    return core.TimeSeries(
        title=title, description=description, dataSource=CLICKHOUSE_REF,
        targets=[ClickHouseTarget(sql, time_series=True)], unit=unit, thresholds=_thresholds(line),
        thresholdsStyleMode="line" if line else "off", transformations=transformations, valueMin=0,
        legendDisplayMode="table", legendPlacement="right", legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi", span=width,
    )


def layout(rows: Sequence[tuple[str, Sequence[core.Panel]]]) -> list[core.Panel]:
    """Rows with a title bar each; panels flow left to right with their ``span`` as grid width."""
    placed: list[core.Panel] = []
    y = 0
    for title, panels in rows:
        placed.append(core.RowPanel(title=title, gridPos=core.GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        y += 1
        x = 0
        for panel in panels:
            width = panel.span
            if x + width > GRID_WIDTH:
                x, y = 0, y + PANEL_HEIGHT
            placed.append(attr.evolve(panel, gridPos=core.GridPos(h=PANEL_HEIGHT, w=width, x=x, y=y), span=None))
            x += width
        y += PANEL_HEIGHT
    return placed


def variable(name: str, label: str, values_of: str, label_name: str) -> core.Template:
    """A multi-select dashboard variable over ``label_name`` of the series ``values_of`` (All = ``.*``)."""
    return core.Template(name=name, label=label, dataSource=PROMETHEUS_REF,
                         query=f"label_values({values_of}, {label_name})", includeAll=True, multi=True,
                         allValue=ALL, default="All", refresh=2, sort=1)


def dashboard(uid: str, title: str, description: str, panels: list[core.Panel],
              variables: Sequence[core.Template] = (), time_from: str = "now-3h") -> core.Dashboard:
    return core.Dashboard(
        uid=uid, title=title, description=description, tags=["infersight"], panels=panels,
        templating=core.Templating(list=list(variables)), time=core.Time(time_from, "now"), refresh="30s",
        timezone="utc", editable=True, sharedCrosshair=True,
    ).auto_panel_ids()
