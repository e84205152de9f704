"""Every SQL panel, its Grafana macros expanded as the ClickHouse plugin does, run on a real ClickHouse.

The trace store holds the constructed incident of tests/pipelines/incident_data.py (sent once per
session through the real receiver). Each panel must return exactly what the library query it came
from returns for the same window: the dashboard and `infersight traces` agree.
"""

from __future__ import annotations

import datetime as dt

import pytest

from infersight.config import parse_config
from infersight.dashboards import traces
from infersight.dashboards.build import all_dashboards
from infersight.dashboards.macros import MacroError, expand, interpolate
from infersight.pipelines.queries import library
from tests.dashboards.boards import sql
from tests.pipelines import boundary_data, incident_data

ALL = {name: None for name in traces.FILTERS.values()}  # every variable on "All"
ALL_VALUES = {name: traces.ALL_SQL for name in traces.FILTERS.values()}


def as_sent(text: str, start, end, **chosen: str) -> str:
    """Panel SQL as Grafana sends it: variables chosen (the rest on All), then the plugin's macros."""
    return expand(interpolate(text, {**ALL, **chosen}, ALL_VALUES), start, end)

# What each panel must equal: the library call with the options the dashboard chose.
LIBRARY_CALLS = {
    "Slowest requests by TTFT": lambda c, db, s, e: library.slowest(c, db, s, e, by="ttft", limit=20),
    "Slowest requests end to end": lambda c, db, s, e: library.slowest(c, db, s, e, by="e2e", limit=20),
    "Token stalls per instance and minute": lambda c, db, s, e: library.window_stalls(c, db, s, e),
    "TTFT percentiles per minute, by pool": lambda c, db, s, e: library.percentiles(c, db, s, e, by="pool"),
    "Canary vs stable": lambda c, db, s, e: library.compare_pools(c, db, s, e),
    "Retry chains": lambda c, db, s, e: library.retries(c, db, s, e),
}


@pytest.fixture(scope="module")
def incident(clickhouse_server):
    client, database, data, _ = incident_data.shared(clickhouse_server)
    config = parse_config({"clickhouse": {"dsn": clickhouse_server.dsn(database, "reader")}})
    return client, database, data, sql(all_dashboards(config))


def test_every_sql_panel_runs_and_matches_its_library_query(incident):
    client, db, data, statements = incident
    assert sorted(q.panel for q in statements) == sorted(LIBRARY_CALLS)
    for query in statements:
        assert f"`{db}`." in query.text  # the database named by clickhouse.dsn
        rows = list(client.query(as_sent(query.text, data.t0, data.end)).named_results())
        assert rows, f"{query.panel}: no rows for the incident window"
        assert rows == LIBRARY_CALLS[query.panel](client, db, data.t0, data.end), query.panel


def test_panels_show_the_incident(incident):
    client, db, data, statements = incident
    by_title = {q.panel: list(client.query(as_sent(q.text, data.t0, data.end)).named_results()) for q in statements}
    assert by_title["Slowest requests by TTFT"][0]["trace_id"] == data.trace_id("long-prefill")
    stalls = by_title["Token stalls per instance and minute"]
    assert {r["instance"] for r in stalls} == {"i-2"} and max(r["max_gap_ms"] for r in stalls) == 3000.0
    assert {r["pool"] for r in by_title["Canary vs stable"]} == {"canary", "stable"}
    assert {r["trace_id"] for r in by_title["Retry chains"]} == {data.trace_id("retried")}
    # a window before the incident: the same SQL finds nothing
    before = data.t0 - dt.timedelta(hours=2)
    slowest = next(q for q in statements if q.panel == "Slowest requests by TTFT")
    assert list(client.query(as_sent(slowest.text, before, before + dt.timedelta(minutes=10))).named_results()) == []


def test_variables_list_the_incident_and_filter_like_the_library(incident):
    client, db, data, statements = incident
    listed = {name: [r[0] for r in client.query(expand(q, data.t0, data.end)).result_rows]
              for name, q in traces.variables_sql(db).items()}
    assert listed["model"] == [incident_data.MODEL] and {"canary", "stable"} <= set(listed["pool"])
    assert "i-2" in listed["instance"]
    by_title = {q.panel: q.text for q in statements}
    for variable, parameter, value in (("instance", "instance", "i-2"), ("pool", "pool", "canary"),
                                       ("model", "model", "no-such-model")):
        for title, call in (("Slowest requests by TTFT", lambda **f: library.slowest(
                client, db, data.t0, data.end, by="ttft", limit=20, **f)),
                            ("Token stalls per instance and minute", lambda **f: library.window_stalls(
                client, db, data.t0, data.end, **f))):
            got = list(client.query(as_sent(by_title[title], data.t0, data.end, **{variable: value})).named_results())
            assert got == call(**{parameter: value}), (title, variable)
            if value == "no-such-model":
                assert got == []
    canary = as_sent(by_title["TTFT percentiles per minute, by pool"], data.t0, data.end, pool="canary")
    rows = list(client.query(canary).named_results())
    assert rows and {r["pool"] for r in rows} == {"canary"}
    assert rows == library.percentiles(client, db, data.t0, data.end, by="pool", pool="canary")


def test_a_value_with_a_quote_cannot_break_out_of_the_filter(incident):
    client, db, data, statements = incident
    slowest = next(q.text for q in statements if q.panel == "Slowest requests by TTFT")
    hostile = "x' OR 1=1 OR Model = '"
    assert list(client.query(as_sent(slowest, data.t0, data.end, model=hostile)).named_results()) == []


def test_trace_ids_open_the_trace_view(incident):
    client, db, data, _ = incident
    trace = data.trace_id("long-prefill")
    rows = list(client.query(traces.trace_view_sql(db, trace)).named_results())
    spans = {s["span_id"]: s for s in library.trace_spans(client, db, trace)}
    assert len(spans) > 1 and sorted(r["spanID"] for r in rows) == sorted(spans)
    assert {r["traceID"] for r in rows} == {trace}
    assert all(round(r["duration"], 2) == spans[r["spanID"]]["duration_ms"] for r in rows)  # milliseconds
    assert {"traceID", "spanID", "parentSpanID", "serviceName", "operationName", "startTime", "duration", "tags",
            "serviceTags"} <= set(rows[0])
    link = traces.trace_link(db)
    assert link["internal"]["query"]["rawSql"] == traces.trace_view_sql(db)
    assert "${__value.raw}" in link["internal"]["query"]["rawSql"]


def test_panels_keep_exactly_the_window_on_unmerged_parts(clickhouse_server, clickhouse_schema):
    """A window with millisecond edges over one-span parts: the panels' macros round nothing away."""
    t0 = (dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)).replace(second=0, microsecond=0)
    client = clickhouse_server.client(clickhouse_schema)
    data = boundary_data.load(client, clickhouse_schema, t0)
    config = parse_config({"clickhouse": {"dsn": f"{clickhouse_server.url}/{clickhouse_schema}"}})
    for query in sql(all_dashboards(config)):
        rows = list(client.query(as_sent(query.text, data.start, data.end)).named_results())
        assert rows == LIBRARY_CALLS[query.panel](client, clickhouse_schema, data.start, data.end), query.panel
    slowest = next(q for q in sql(all_dashboards(config)) if q.panel == "Slowest requests by TTFT")
    rows = client.query(as_sent(slowest.text, data.start, data.end)).named_results()
    assert {r["trace_id"] for r in rows} == data.inside()


def test_trace_view_finds_every_span_of_just_written_traces(clickhouse_server, clickhouse_schema):
    """The trace view's lookup on one-span parts: no span in a trace's last second is pruned away."""
    t0 = (dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)).replace(second=0, microsecond=0)
    client = clickhouse_server.client(clickhouse_schema)
    expected = boundary_data.lookup_traces(client, clickhouse_schema, t0)
    found = {trace: len(client.query(traces.trace_view_sql(clickhouse_schema, trace)).result_rows)
             for trace in expected}
    assert found == expected


def test_macros_expand_as_the_plugin_does():
    start = dt.datetime(2026, 3, 1, 14, 0, 0, 250000, tzinfo=dt.UTC)
    end = start + dt.timedelta(minutes=5)
    s, e = int(start.timestamp()), int(end.timestamp())
    assert expand("$__fromTime $__toTime", start, end) == f"toDateTime({s}) toDateTime({e})"
    assert expand("$__fromTime_ms", start, end) == f"fromUnixTimestamp64Milli({s * 1000 + 250})"
    assert expand("WHERE $__timeFilter(Timestamp)", start, end) == \
        f"WHERE Timestamp >= toDateTime({s}) AND Timestamp <= toDateTime({e})"
    assert expand("$__timeInterval(Minute)", start, end, 30) == \
        "toStartOfInterval(toDateTime(Minute), INTERVAL 30 second)"
    assert expand("$__fromTime", start.replace(tzinfo=None), end) == f"toDateTime({s})"  # naive means UTC


@pytest.mark.parametrize(("text", "words"), [
    ("$__nosuchmacro", "not a macro"),
    ("$__timeFilter(a, b)", "expects 1 argument"),
    ("$__timeFilter", "expects 1 argument"),
])
def test_bad_macros_are_refused(text, words):
    now = dt.datetime(2026, 3, 1)
    with pytest.raises(MacroError, match=words):
        expand(text, now, now)
