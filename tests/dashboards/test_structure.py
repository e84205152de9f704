"""Dashboard structure: what Grafana needs to import them, and that they speak the catalog's vocabulary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from infersight.alerts.recording import level_labels, recording_rules
from infersight.config import parse_config
from infersight.dashboards import build as dashboards_build
from infersight.dashboards.build import all_dashboards
from infersight.dashboards.datasources import (
    CLICKHOUSE_PLUGIN,
    CLICKHOUSE_REF,
    CLICKHOUSE_UID,
    CLICKHOUSE_VARIABLE,
    PASSWORD_ENV,
    PROMETHEUS_REF,
    PROMETHEUS_UID,
    PROMETHEUS_VARIABLE,
    ProvisioningError,
    datasources_yaml,
)
from infersight.dashboards.panels import SCHEMA_VERSION
from infersight.signals import CATALOG
from infersight.thresholds import SCRAPE_UP, thresholds_from_config
from tests.dashboards.boards import panels, prometheus_variables, promql, queries, sql
from tests.promql_names import metric_names

DASHBOARDS_SOURCE = Path(dashboards_build.__file__).parent
LABEL_VALUES = re.compile(r"^label_values\((\w+), (\w+)\)$")


@pytest.fixture(scope="module")
def boards():
    return all_dashboards(parse_config({}))


def test_dashboards_with_unique_uids_and_titles(boards):
    assert [b["uid"] for b in boards] == ["infersight-fleet", "infersight-engines", "infersight-gpus",
                                          "infersight-pipeline", "infersight-traces", "infersight-instance",
                                          "infersight-capacity", "infersight-breaker", "infersight-canary",
                                          "infersight-pd"]
    assert len({b["title"] for b in boards}) == len(boards)
    for board in boards:
        json.loads(json.dumps(board, allow_nan=False))  # plain JSON, no NaN Grafana would refuse
        assert board["schemaVersion"] == SCHEMA_VERSION == 42 and board["time"]["from"].startswith("now-")
        assert board["graphTooltip"] == 1, "shared crosshair"
        assert "__inputs" not in board, "provisioned dashboards do not resolve __inputs"


def test_datasources_only_through_variables(boards):
    """No uid in any panel, target or variable: provisioning and UI import into another Grafana both work."""
    for board in boards:
        text = json.dumps(board)
        assert PROMETHEUS_UID not in json.dumps(board["panels"]) and CLICKHOUSE_UID not in json.dumps(board["panels"])
        sources = {v["name"]: v for v in board["templating"]["list"] if v["type"] == "datasource"}
        refs = {json.dumps(p["datasource"], sort_keys=True) for p in panels(board)}
        refs |= {json.dumps(v["datasource"], sort_keys=True) for v in board["templating"]["list"] if "datasource" in v}
        expected = {PROMETHEUS_VARIABLE: ("prometheus", PROMETHEUS_REF, PROMETHEUS_UID),
                    CLICKHOUSE_VARIABLE: (CLICKHOUSE_PLUGIN, CLICKHOUSE_REF, CLICKHOUSE_UID)}
        for name, (plugin, ref, uid) in expected.items():
            used = json.dumps(ref, sort_keys=True) in refs
            assert used == (name in sources), (board["uid"], name)
            if used:
                assert sources[name]["query"] == plugin and sources[name]["current"]["value"] == uid
                assert text.count(uid) == 1, "the uid only as the variable's saved choice"
        assert refs <= {json.dumps(r, sort_keys=True) for r in (PROMETHEUS_REF, CLICKHOUSE_REF)}, board["uid"]


def test_dashboards_link_to_each_other_keeping_time_and_variables(boards):
    tags = {tag for board in boards for tag in board["tags"]}
    for board in boards:
        (link,) = board["links"]
        assert link["type"] == "dashboards" and set(link["tags"]) <= tags
        assert link["includeVars"] and link["keepTime"]


def test_rate_windows_follow_the_resolution(boards):
    """rate() reads $__rate_interval; fixed windows only where the window is the question ("in 5 minutes")."""
    exprs = [q.text for q in promql(boards)]
    windows = [w for e in exprs for w in re.findall(r"\brate\([^\[]*\[([^\]]+)\]", e)]
    assert len(windows) > 40 and set(windows) == {"$__rate_interval"}


def test_legends_fit_and_data_points_follow_the_width(boards):
    for board in boards:
        for panel in panels(board):
            where = (board["uid"], panel["title"])
            legend = panel["options"].get("legend")
            if panel["type"] == "timeseries":
                assert legend["showLegend"]
                if legend["placement"] == "right":
                    assert panel["gridPos"]["w"] == 24, where
                if panel["gridPos"]["w"] < 12:
                    assert legend["displayMode"] == "list", where
            if panel["type"] == "heatmap":
                assert 0 < panel["maxDataPoints"] <= 100, where
            else:
                assert "maxDataPoints" not in panel, where  # Grafana uses the panel's width in pixels


def test_every_panel_says_what_it_shows_and_what_good_looks_like(boards):
    for board in boards:
        assert board["description"].strip(), board["uid"]
        for panel in panels(board):
            what, _, good = panel["description"].partition(" Good: ")
            assert what.strip() and len(good.strip()) > 1, (board["uid"], panel["title"])


def test_stat_and_gauge_panels_lead(boards):
    kinds = {p["type"] for b in boards for p in panels(b)}
    assert {"stat", "gauge"} <= kinds
    for board in boards:
        rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
        if "Now" in rows:
            assert rows[0] == "Now", board["uid"]  # where the figures of the moment lead, they lead
            first = next(p for p in board["panels"] if p["type"] != "row")
            assert first["type"] in ("stat", "gauge"), board["uid"]


def test_every_panel_has_title_datasource_unit_and_targets(boards):
    for board in boards:
        for panel in panels(board):
            where = f"{board['uid']} / {panel.get('title')!r}"
            assert panel["title"].strip(), where
            assert panel["type"] in ("timeseries", "table", "heatmap", "stat", "gauge"), where
            assert panel["datasource"] in (PROMETHEUS_REF, CLICKHOUSE_REF), where
            assert panel["fieldConfig"]["defaults"]["unit"], where
            assert panel["targets"], where
            ref_ids = [t["refId"] for t in panel["targets"]]
            assert len(set(ref_ids)) == len(ref_ids), where
            for target in panel["targets"]:
                assert target["datasource"] == panel["datasource"], where


def test_panel_ids_unique_and_grid_without_overlap(boards):
    for board in boards:
        titles = [p["title"] for p in panels(board) if not p.get("repeat")]
        assert len(titles) == len(set(titles)), board["uid"]  # links and tests find panels by title
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids) and all(ids), board["uid"]
        cells: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, (board["uid"], panel["title"])
            own = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
            assert not own & cells, f"{board['uid']}: {panel['title']!r} overlaps another panel"
            cells |= own


def test_rows_have_titles_and_repeats_use_defined_variables(boards):
    for board in boards:
        rows = [p for p in board["panels"] if p["type"] == "row"]
        assert rows and all(r["title"].strip() for r in rows)
        variables = {v["name"] for v in board["templating"]["list"]}
        for panel in panels(board):
            if panel.get("repeat"):
                assert panel["repeat"] in variables
            text = json.dumps(panel["targets"])
            used = {n for n in re.findall(r"\$\{?(\w+)", text) if not n.startswith("__")}
            assert used <= variables, (board["uid"], panel["title"], used - variables)


def test_the_loop_is_closed_every_series_queried_is_produced(boards):
    """Each name a panel or variable queries is a catalog series, a recording rule of alerts/, or `up`."""
    limits = thresholds_from_config(parse_config({}))
    recorded = {r.record for r in recording_rules(limits)}
    produced = {series for signal in CATALOG.values() for series in signal.series_names()}
    used = set().union(*(metric_names(q.text) for q in promql(boards)))
    for board in boards:
        for var in prometheus_variables(board):
            metric, _label = LABEL_VALUES.match(var["query"]).groups()
            assert metric in produced
            used.add(metric)
    assert len(used) > 40, "the name scan found too little; it is broken"
    assert used - recorded - produced == set()
    assert any(metric_names(q.text) & recorded for q in promql(boards)), "recording rules are used"
    assert any(SCRAPE_UP in q.text for q in promql(boards))


def test_no_metric_name_typed_in_the_dashboard_code():
    names = {series for signal in CATALOG.values() for series in signal.series_names()}
    names |= {r.record for r in recording_rules(thresholds_from_config(parse_config({})))}
    for source in DASHBOARDS_SOURCE.glob("*.py"):
        text = source.read_text()
        # `limits.gpu_temperature_celsius` is a config attribute, not a metric: skip attribute access
        typed = {n for n in names if re.search(rf"(?<![.\w]){re.escape(n)}\b", text)}
        assert typed == set(), f"{source.name} types {typed}; use the catalog Signal or the recording module"


def test_sql_panels_use_grafana_macros_and_no_bound_parameters(boards):
    statements = sql(boards)
    assert len(statements) == 6
    for query in statements:
        assert "$__fromTime" in query.text and "$__toTime" in query.text, query.panel
        assert not re.search(r"(?<!\$)\{\w+:[^{}]+\}", query.text), query.panel
        assert "`default`." in query.text  # the database of clickhouse.dsn


def test_thresholds_follow_the_config():
    data = {"slo": {"ttft_seconds": 0.5, "tpot_p95_seconds": 0.05, "ttft_p95_seconds": 0.8},
            "thresholds": {"ttft_slo_share_rising": 0.75, "instance_p99_ttft_seconds": 2.5,
                           "gateway_queue_depth": 20, "gpu_temperature_celsius": 80, "kv_usage_near_full": 0.9,
                           "retry_ratio": 0.1, "bandwidth_saturation": 0.85, "spans_rejected_ratio": 0.05,
                           "queue_wait_slo_share": 0.25}}
    custom = {b["uid"]: b for b in all_dashboards(parse_config(data))}
    default = {b["uid"]: b for b in all_dashboards(parse_config({}))}
    expected = {
        ("infersight-fleet", "TTFT p50 / p95 / p99 vs SLO"): (1.0, 0.5),
        ("infersight-fleet", "TPOT p50 / p95 / p99"): (0.1, 0.05),
        # the queue bar in seconds: its share of the p95 TTFT target (0.1 x 1 s, 0.25 x 0.8 s)
        ("infersight-capacity", "Queue wait (gateway and engines), 30-minute mean"): (0.1, 0.2),
        ("infersight-fleet", "Retries per request"): (0.2, 0.1),
        ("infersight-capacity", "TTFT p95 vs the scale-out bar"): (1.0, 0.8),
        ("infersight-breaker", "Instance TTFT p99 (inside the engine) vs its peers"): (5.0, 2.5),
        ("infersight-instance", "Breaker: TTFT p99 vs the threshold"): (5.0, 2.5),
        ("infersight-engines", "KV cache usage"): (0.95, 0.9),
        ("infersight-gpus", "Temperature"): (85, 80),
        ("infersight-gpus", "Memory bandwidth utilization"): (0.9, 0.85),
        ("infersight-pipeline", "Refused share of spans"): (0.01, 0.05),
    }
    for (uid, title), values in expected.items():
        got = tuple(_line(boards[uid], title) for boards in (default, custom))
        assert got == values, (uid, title)
    # the orange scale-out bar: rising share x p95 target
    bar = [[s["value"] for s in _steps(boards["infersight-capacity"], "TTFT p95 vs the scale-out bar")
            if s["color"] == "orange"] for boards in (default, custom)]
    assert bar == [[0.7], [pytest.approx(0.6)]]


def _steps(board: dict, title: str) -> list[dict]:
    panel = next(p for p in panels(board) if p["title"] == title)
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
    return panel["fieldConfig"]["defaults"]["thresholds"]["steps"]


def _line(board: dict, title: str) -> float:
    return _steps(board, title)[-1]["value"]


def test_queries_filter_on_the_dashboard_variables(boards):
    fleet = [q for q in queries(boards) if q.dashboard == "infersight-fleet" and "llm_time_to_first" in q.text]
    assert fleet and all('model=~"$model"' in q.text for q in fleet)


# Panels that read past the dashboard's selection on purpose, and why.
FLEET_WIDE = {
    ("infersight-engines", "Instances up"): "every scraped instance of the fleet, beside Targets up",
    ("infersight-gpus", "Energy per generated token"): "per node and the fleet's figure, not per device",
}
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?")
GROUPING = re.compile(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)")


def test_every_series_follows_the_dashboard_selection(boards):
    """A series that carries a dashboard variable's label is narrowed by it, recording rules included
    (their level names the labels they keep): a panel that ignores $model shows every model's figure."""
    labels = {series: set(signal.labels) for signal in CATALOG.values() for series in signal.series_names()}
    labels |= {r.record: set(level_labels(r.record)) for r in recording_rules(thresholds_from_config(parse_config({})))}
    checked, ignoring = 0, []
    for board in boards:
        chosen = {v["name"] for v in prometheus_variables(board)}
        for query in promql([board]):
            if (board["uid"], query.panel) in FLEET_WIDE:
                continue
            for name, matchers in SELECTOR.findall(GROUPING.sub("", query.text)):
                for label in chosen & labels.get(name, set()):
                    checked += 1
                    if f'{label}=~"${label}"' not in matchers:
                        ignoring.append((board["uid"], query.panel, name, label))
    assert checked > 200, "the selector scan found too little; it is broken"
    assert ignoring == []


def test_trend_panels_can_show_a_fall(boards):
    """A deriv() is negative while the value falls ("good: at or under 0"): its axis must not stop at 0."""
    trends = [p for b in boards for p in panels(b) if any("deriv(" in t.get("expr", "") for t in p["targets"])]
    assert trends
    for panel in trends:
        assert "min" not in panel["fieldConfig"]["defaults"], panel["title"]


def test_datasources_come_from_the_config():
    config = parse_config({"prometheus": {"url": "http://prom.internal:9090"},
                           "clickhouse": {"dsn": "https://grafana:s3cret@ch.internal:8443/traces"}})
    text = datasources_yaml(config)
    assert "s3cret" not in text
    sources = {s["uid"]: s for s in yaml.safe_load(text)["datasources"]}
    assert sources[PROMETHEUS_UID]["url"] == "http://prom.internal:9090"
    assert sources[PROMETHEUS_UID]["type"] == "prometheus"
    ch = sources[CLICKHOUSE_UID]
    assert ch["type"] == "grafana-clickhouse-datasource"
    assert ch["jsonData"] == {"host": "ch.internal", "port": 8443, "protocol": "http", "secure": True,
                              "defaultDatabase": "traces", "username": "grafana",
                              "traces": {"defaultDatabase": "traces", "defaultTable": "otel_traces",
                                         "otelEnabled": True, "otelVersion": "latest",
                                         "durationUnit": "nanoseconds"}}
    assert ch["secureJsonData"]["password"] == f"${{{PASSWORD_ENV}}}"
    default = {s["uid"]: s for s in yaml.safe_load(datasources_yaml(parse_config({})))["datasources"]}
    # Without a user in the DSN Grafana is the embedded store's read-only reader, its password from the environment.
    assert default[CLICKHOUSE_UID]["jsonData"]["port"] == 8123
    assert default[CLICKHOUSE_UID]["jsonData"]["username"] == "infersight_reader"
    assert default[CLICKHOUSE_UID]["secureJsonData"]["password"] == f"${{{PASSWORD_ENV}}}"


@pytest.mark.parametrize(("data", "words"), [
    ({"clickhouse": {"dsn": "chdb://.infersight/data"}}, "in-process engine"),
    ({"prometheus": {"url": None}}, "prometheus.url is not set"),
    ({"prometheus": {"url": "prom:9090"}}, "not an http(s) URL"),
])
def test_datasources_grafana_cannot_use_are_refused(data, words):
    with pytest.raises(ProvisioningError, match=re.escape(words)):
        datasources_yaml(parse_config(data))
