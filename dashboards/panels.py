"""Panel and dashboard builders: Grafana's current JSON model (schemaVersion 42), written as plain dicts.

grafanalib 0.7 (its last release) writes the schemaVersion 12 model: rows, ``sharedCrosshair``,
``timepicker.time_options``, table ``displayMode``, per-target ``step``/``intervalFactor``, a fixed
``maxDataPoints``. Grafana migrates that on every load, and the check against Grafana's published
schema (``@grafana/schema``, see ``dashboards/schema_check.py``) refuses it. So every panel here is
the dict Grafana itself saves today, with one look for all dashboards: a unit on every panel, a
description that says what good looks like, thresholds from the config, datasources only through
the dashboard's datasource variables, legends that fit the panel's width.

Dashboards describe their content as rows of panels; :func:`layout` places them on Grafana's
24-column grid, so no dashboard module does grid arithmetic.
"""

from __future__ import annotations

import copy
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infersight.alerts.recording import QUANTILES, level_labels
from infersight.dashboards.datasources import (
    CLICKHOUSE_NAME,
    CLICKHOUSE_PLUGIN,
    CLICKHOUSE_REF,
    CLICKHOUSE_UID,
    CLICKHOUSE_VARIABLE,
    PROMETHEUS_NAME,
    PROMETHEUS_REF,
    PROMETHEUS_UID,
    PROMETHEUS_VARIABLE,
)
from infersight.signals import Signal

SCHEMA_VERSION = 42  # Grafana 12/13 (the defaultDashboard of @grafana/schema 13.2)
PANEL_HEIGHT = 8
STAT_HEIGHT = 4
GRID_WIDTH = 24
TAG = "infersight"
# Rate windows follow the dashboard's resolution: at least four scrapes, wider when zoomed out.
RATE = "$__rate_interval"
# Every Prometheus query filters on its dashboard variables; "All" matches everything.
ALL = ".*"
ALL_VALUE = "$__all"
# Grafana's custom unit for token rates (it has no built-in one).
TOKENS_PER_S = "suffix: tok/s"
# Heatmap cells stay readable: about one column per 20 pixels of a full-width panel.
HEATMAP_POINTS = 60


@dataclass(frozen=True)
class Q:
    """One PromQL query of a panel and its legend (``{{label}}`` placeholders)."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Line:
    """A threshold drawn on a panel. ``below`` colours the area under it red instead of above;
    ``warn`` adds an orange line before it (e.g. the share of the SLO where scale-out starts)."""

    value: float
    below: bool = False
    warn: float | None = None


def recorded(record: str, matchers: Mapping[str, str]) -> str:
    """A recording rule's series narrowed by the dashboard's ``matchers`` (``{"model": "=~$model"}``) on the
    labels its level keeps, so recorded panels follow the dashboard's selection like the raw series do."""
    kept = set(level_labels(record))
    parts = []
    for label, value in matchers.items():
        if label in kept:
            op = next((o for o in ("=~", "!=", "!~") if value.startswith(o)), "=")
            parts.append(f'{label}{op}"{value.removeprefix(op) if op != "=" else value}"')
    return f"{record}{{{','.join(parts)}}}" if parts else record


def describe(what: str, good: str) -> str:
    """A panel description: what it shows, then what good looks like (every panel has both)."""
    if not good.strip():
        raise ValueError(f"panel description {what!r} says nothing about what good looks like")
    return f"{what.strip()} Good: {good.strip()}".strip()


def _thresholds(line: Line | None) -> dict:
    if line is None:
        steps = [{"color": "green", "value": None}]
    elif line.below:
        steps = [{"color": "red", "value": None}, {"color": "green", "value": line.value}]
    else:
        warn = [] if line.warn is None else [{"color": "orange", "value": line.warn}]
        steps = [{"color": "green", "value": None}, *warn, {"color": "red", "value": line.value}]
    return {"mode": "absolute", "steps": steps}


def _legend(width: int, calcs: Sequence[str] = ("mean", "lastNotNull", "max")) -> dict:
    """A table with figures where there is room for one, else a plain list under the graph."""
    if width >= GRID_WIDTH:
        return {"showLegend": True, "displayMode": "table", "placement": "right", "calcs": list(calcs)}
    if width >= 12:
        return {"showLegend": True, "displayMode": "table", "placement": "bottom", "calcs": list(calcs)}
    return {"showLegend": True, "displayMode": "list", "placement": "bottom", "calcs": []}


def prometheus_target(query: Q, ref_id: str, *, heatmap: bool = False) -> dict:
    target = {"datasource": dict(PROMETHEUS_REF), "refId": ref_id, "expr": query.expr, "legendFormat": query.legend,
              "editorMode": "code", "range": not query.instant, "instant": query.instant}
    if heatmap:
        target["format"] = "heatmap"
    return target


def quantiles(signal: Signal, by: Sequence[str], matchers: Mapping[str, str], legend: str = "",
              qs: Sequence[float] = QUANTILES) -> list[Q]:
    """One query per quantile of histogram ``signal`` over the dashboard's rate window (p50/p95/p99 by
    default, the recording rules' quantiles), each legend ``p95 <legend>``."""
    return [Q(signal.quantile(q, by, RATE, **matchers), f"p{round(q * 100)} {legend}".rstrip()) for q in qs]


def _targets(queries: Sequence[Q]) -> list[dict]:
    return [prometheus_target(q, string.ascii_uppercase[i]) for i, q in enumerate(queries)]


def _panel(kind: str, title: str, description: str, datasource: dict, targets: list[dict], defaults: dict,
           options: dict, width: int, height: int = PANEL_HEIGHT, **extra) -> dict:
    panel = {"type": kind, "title": title, "description": description, "datasource": dict(datasource),
             "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
             "options": options, "gridPos": {"h": height, "w": width, "x": 0, "y": 0}}
    panel.update(extra)
    return panel


def link(title: str, url: str, tooltip: str = "") -> dict:
    """A link to ``url`` (variables like ``${instance}`` and ``${__url_time_range}`` are expanded by Grafana)."""
    return {"title": title, "type": "link", "url": url, "tooltip": tooltip, "icon": "dashboard", "tags": [],
            "asDropdown": False, "includeVars": False, "keepTime": False, "targetBlank": False}


def data_link(title: str, url: str) -> dict:
    """A link on a series or cell; ``url`` may use ``${__field.labels.X}`` or ``${__value.raw}``."""
    return {"title": title, "url": url, "targetBlank": False}


def dashboard_url(uid: str, **variables: str) -> str:
    """The URL of dashboard ``uid`` keeping the time range, with ``variables`` set (values may be ``${var}``)."""
    query = "".join(f"&var-{name}={value}" for name, value in variables.items())
    return f"/d/{uid}?${{__url_time_range}}{query}"


def timeseries(title: str, unit: str, queries: Sequence[Q], *, description: str = "", good: str = "",
               line: Line | None = None, stack: bool = False, max_value: float | None = None, width: int = 8,
               min_value: float | None = 0, repeat: str | None = None, decimals: int | None = None,
               links: Sequence[dict] = (), data_links: Sequence[dict] = ()) -> dict:
    """A Prometheus time series panel; ``line`` draws the threshold the alerts use; ``links`` sit on the panel,
    ``data_links`` on each series (their URLs may use the series' labels, ``${__field.labels.instance}``);
    the axis starts at 0 unless ``min_value`` is None (a trend, which is negative when falling)."""
    defaults = {
        "unit": unit, "color": {"mode": "palette-classic"}, "thresholds": _thresholds(line),
        "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 30 if stack else 10, "showPoints": "never",
                   "spanNulls": False, "gradientMode": "none",
                   "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                   "thresholdsStyle": {"mode": "line" if line else "off"}},
    }
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    if decimals is not None:
        defaults["decimals"] = decimals
    if data_links:
        defaults["links"] = list(data_links)
    options = {"legend": _legend(width), "tooltip": {"mode": "multi", "sort": "desc"}}
    extra = {"repeat": repeat, "repeatDirection": "h", "maxPerRow": 4} if repeat else {}
    if links:
        extra["links"] = list(links)
    return _panel("timeseries", title, _text(description, good, title), PROMETHEUS_REF, _targets(queries),
                  defaults, options, width, **extra)


def stat(title: str, unit: str, queries: Sequence[Q], *, description: str = "", good: str = "",
         line: Line | None = None, width: int = 4, calc: str = "lastNotNull", graph: bool = True,
         decimals: int | None = None, links: Sequence[dict] = (), text_mode: str = "auto") -> dict:
    """One big number per series, coloured by the config's threshold, with a sparkline; ``text_mode="name"``
    shows the series' legend instead of its value (e.g. which state is active)."""
    defaults = {"unit": unit, "color": {"mode": "thresholds"}, "thresholds": _thresholds(line), "mappings": []}
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {"reduceOptions": {"calcs": [calc], "fields": "", "values": False}, "orientation": "auto",
               "colorMode": "value", "graphMode": "area" if graph else "none", "justifyMode": "auto",
               "textMode": text_mode, "wideLayout": True, "showPercentChange": False,
               "percentChangeColorMode": "standard"}
    extra = {"links": list(links)} if links else {}
    return _panel("stat", title, _text(description, good, title), PROMETHEUS_REF, _targets(queries), defaults,
                  options, width, STAT_HEIGHT, **extra)


def gauge(title: str, unit: str, queries: Sequence[Q], *, description: str = "", good: str = "",
          line: Line | None = None, max_value: float = 1, width: int = 4) -> dict:
    """A gauge from 0 to ``max_value`` with the threshold on its rim (for ratios with a hard ceiling)."""
    defaults = {"unit": unit, "min": 0, "max": max_value, "color": {"mode": "thresholds"},
                "thresholds": _thresholds(line), "mappings": []}
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "orientation": "auto",
               "showThresholdLabels": False, "showThresholdMarkers": True, "minVizWidth": 75, "minVizHeight": 75,
               "sizing": "auto",
               # Grafana 13's gauge (its defaults); older Grafana ignores these.
               "shape": "gauge", "barShape": "flat", "barWidthFactor": 0.5, "segmentCount": 1, "segmentSpacing": 0.3,
               "effects": {}}
    return _panel("gauge", title, _text(description, good, title), PROMETHEUS_REF, _targets(queries), defaults,
                  options, width, STAT_HEIGHT)


def heatmap(title: str, bucket_rate: str, *, unit: str = "s", description: str = "", good: str = "",
            width: int = 8) -> dict:
    """A heatmap of ``sum by (le) (rate(<bucket>[w]))``: each bucket's observations per second over time."""
    target = prometheus_target(Q(bucket_rate, "{{le}}"), "A", heatmap=True)
    options = {"calculate": False, "yAxis": {"unit": unit, "axisPlacement": "left"}, "cellValues": {"unit": "reqps"},
               "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange", "scale": "exponential",
                         "exponent": 0.5, "steps": 64, "reverse": False},
               "exemplars": {"color": "rgba(255,0,255,0.7)"}, "filterValues": {"le": 1e-9},
               "legend": {"show": True}, "showValue": "never", "cellGap": 1,
               "rowsFrame": {"layout": "auto"},
               "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False}}
    return _panel("heatmap", title, _text(description, good, title), PROMETHEUS_REF, [target],
                  {"unit": "reqps", "custom": {"scaleDistribution": {"type": "linear"},
                                               "hideFrom": {"legend": False, "tooltip": False, "viz": False}}},
                  options, width, maxDataPoints=HEATMAP_POINTS)


def clickhouse_target(sql: str, ref_id: str = "A", *, time_series: bool = False) -> dict:
    """A raw-SQL query of the grafana-clickhouse-datasource plugin (its v4 query model)."""
    # format 0 is time series, 1 table in the plugin's Format enum
    return {"datasource": dict(CLICKHOUSE_REF), "editorType": "sql", "rawSql": sql, "refId": ref_id,
            "format": 0 if time_series else 1, "queryType": "timeseries" if time_series else "table"}


MS_COLUMNS = {"matcher": {"id": "byRegexp", "options": ".*_ms$"}, "properties": [{"id": "unit", "value": "ms"}]}


def sql_table(title: str, sql: str, *, description: str = "", good: str = "", width: int = 24,
              links: Sequence[tuple[str, list[dict]]] = ()) -> dict:
    """A ClickHouse table panel; columns ending in ``_ms`` show as milliseconds; ``links`` puts data links
    (``(column, [link, ...])``) on columns, e.g. a trace id opening Grafana's trace view."""
    overrides = [copy.deepcopy(MS_COLUMNS)]
    for column, column_links in links:
        overrides.append({"matcher": {"id": "byName", "options": column},
                          "properties": [{"id": "links", "value": column_links}]})
    defaults = {"unit": "none", "color": {"mode": "thresholds"}, "thresholds": _thresholds(None), "mappings": [],
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False, "filterable": True}}
    options = {"showHeader": True, "cellHeight": "sm", "frameIndex": 0, "sortBy": []}
    return _panel("table", title, _text(description, good, title), CLICKHOUSE_REF, [clickhouse_target(sql)],
                  defaults, options, width, overrides=overrides)


def sql_timeseries(title: str, sql: str, unit: str, *, description: str = "", good: str = "",
                   hide_columns: Sequence[str] = (), line: Line | None = None, width: int = 12) -> dict:
    """A ClickHouse time series panel; ``hide_columns`` drops numeric columns that are not series."""
    transformations = []
    if hide_columns:
        transformations.append({"id": "organize", "options": {"excludeByName": {c: True for c in hide_columns}}})
    defaults = {
        "unit": unit, "min": 0, "color": {"mode": "palette-classic"}, "thresholds": _thresholds(line),
        "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": False,
                   "thresholdsStyle": {"mode": "line" if line else "off"}},
    }
    options = {"legend": _legend(width), "tooltip": {"mode": "multi", "sort": "desc"}}
    return _panel("timeseries", title, _text(description, good, title), CLICKHOUSE_REF,
                  [clickhouse_target(sql, time_series=True)], defaults, options, width,
                  transformations=transformations)


def _text(description: str, good: str, title: str) -> str:
    if good:
        return describe(description or title + ".", good)
    return description


def layout(rows: Sequence[tuple[str, Sequence[dict]]]) -> list[dict]:
    """Rows with a title bar each; panels flow left to right with their width, wrapping at 24 columns."""
    placed: list[dict] = []
    y = 0
    for title, panels in rows:
        placed.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}})
        y += 1
        x, line_height = 0, 0
        for panel in panels:
            width, height = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            placed.append({**panel, "gridPos": {"h": height, "w": width, "x": x, "y": y}})
            x += width
            line_height = max(line_height, height)
        y += line_height
    for number, panel in enumerate(placed, start=1):
        panel["id"] = number
    return placed


def variable(name: str, label: str, values_of: str, label_name: str, *, multi: bool = True,
             include_all: bool = True, description: str = "") -> dict:
    """A Prometheus query variable over ``label_name`` of the series ``values_of`` (All = ``.*``). Without
    ``include_all`` it is one value, the first one Grafana lists until the user picks another."""
    query = f"label_values({values_of}, {label_name})"
    var = {"type": "query", "name": name, "label": label, "description": description,
           "datasource": dict(PROMETHEUS_REF), "query": query, "refresh": 2, "sort": 1,
           "regex": "", "includeAll": include_all, "multi": multi, "options": [], "hide": 0}
    if include_all:
        var["allValue"] = ALL
        var["current"] = {"selected": True, "text": ["All"] if multi else "All",
                          "value": [ALL_VALUE] if multi else ALL_VALUE}
    return var


def sql_variable(name: str, label: str, sql: str, *, all_value: str, description: str = "") -> dict:
    """A single-value ClickHouse query variable; "All" sends ``all_value`` unformatted (Grafana skips the
    format of a custom all value), which the library's optional filters read as "no filter"."""
    return {"type": "query", "name": name, "label": label, "description": description,
            "datasource": dict(CLICKHOUSE_REF), "query": sql, "refresh": 2, "sort": 1, "regex": "",
            "includeAll": True, "multi": False, "allValue": all_value,
            "current": {"selected": True, "text": "All", "value": ALL_VALUE}, "options": [], "hide": 0}


def datasource_variable(name: str, label: str, plugin: str, uid: str, source_name: str) -> dict:
    """Which datasource of ``plugin`` the panels read. Saved with the provisioned datasource selected; where
    that uid does not exist (UI import elsewhere) Grafana selects the site's default one of that type."""
    return {"type": "datasource", "name": name, "label": label, "query": plugin, "regex": "", "refresh": 1,
            "includeAll": False, "multi": False, "current": {"selected": True, "text": source_name, "value": uid},
            "options": [], "hide": 0}


PROMETHEUS_DATASOURCE = datasource_variable(PROMETHEUS_VARIABLE, "Prometheus", "prometheus", PROMETHEUS_UID,
                                            PROMETHEUS_NAME)
CLICKHOUSE_DATASOURCE = datasource_variable(CLICKHOUSE_VARIABLE, "ClickHouse", CLICKHOUSE_PLUGIN, CLICKHOUSE_UID,
                                            CLICKHOUSE_NAME)
# Every dashboard links to every other, keeping the time range and the variables they share.
LINKS = [{"title": "infersight dashboards", "type": "dashboards", "tags": [TAG], "asDropdown": True,
          "includeVars": True, "keepTime": True, "targetBlank": False, "icon": "external link", "tooltip": "",
          "url": ""}]


def _uses(panels: Sequence[dict], ref: dict) -> bool:
    return any(p.get("datasource") == ref for p in panels)


def dashboard(uid: str, title: str, description: str, panels: list[dict], variables: Sequence[dict] = (),
              time_from: str = "now-3h") -> dict:
    """The dashboard JSON, with the datasource variables its panels and variables refer to first."""
    sources = []
    for ref, source in ((PROMETHEUS_REF, PROMETHEUS_DATASOURCE), (CLICKHOUSE_REF, CLICKHOUSE_DATASOURCE)):
        if _uses(panels, ref) or _uses(variables, ref):
            sources.append(copy.deepcopy(source))
    return {
        "uid": uid, "title": title, "description": description, "tags": [TAG], "editable": True,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "graphTooltip": 1,  # 1: shared crosshair
        "time": {"from": time_from, "to": "now"}, "timepicker": {}, "timezone": "utc", "refresh": "30s",
        "fiscalYearStartMonth": 0, "liveNow": False, "links": copy.deepcopy(LINKS),
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": [*sources, *variables]},
        "panels": panels,
    }
