"""Every time-bounded query answers right on just-written, unmerged parts (boundary_data.py).

Each span sits in its own part, merges are stopped and nothing waits: the state ClickHouse is in
minutes after an incident. A bound rounded to whole seconds anywhere (in the SQL or in the engine's
part pruning) drops or adds the requests placed a few hundred milliseconds from the window's edges.
"""

from __future__ import annotations

import datetime as dt

import pytest

from infersight.pipelines.queries import library as q
from tests.pipelines import boundary_data


@pytest.fixture
def t0() -> dt.datetime:
    # Recent (inside the retention), a whole minute so that the window straddles a minute boundary.
    return (dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)).replace(second=0, microsecond=0)


@pytest.fixture
def boundary(clickhouse_server, clickhouse_schema, t0):
    client = clickhouse_server.client(clickhouse_schema)
    data = boundary_data.load(client, clickhouse_schema, t0)
    parts = client.query("SELECT count() FROM system.parts WHERE active AND database = {db:String} "
                         "AND table = 'otel_traces'", parameters={"db": clickhouse_schema}).result_rows[0][0]
    assert parts == 3 * len(boundary_data.REQUEST_OFFSETS)  # one part per span: nothing merged
    return client, clickhouse_schema, data


def test_trace_lookup_finds_every_just_written_trace(clickhouse_server, clickhouse_schema, t0):
    client = clickhouse_server.client(clickhouse_schema)
    traces = boundary_data.lookup_traces(client, clickhouse_schema, t0)
    found = {}
    for trace in traces:
        try:
            found[trace] = len(q.trace_spans(client, clickhouse_schema, trace))
        except q.TraceNotFound:
            found[trace] = 0
    assert found == traces  # every span of every trace, including a late child in a part of its own


@pytest.mark.parametrize("by", sorted(q.SORT_COLUMNS))
def test_slowest_keeps_exactly_the_window(boundary, by):
    client, db, data = boundary
    rows = q.slowest(client, db, data.start, data.end, by=by, limit=100)
    assert {r["trace_id"] for r in rows} == data.inside()


def test_window_stalls_keep_exactly_the_window(boundary):
    client, db, data = boundary
    rows = q.window_stalls(client, db, data.start, data.end, min_gap_ms=boundary_data.STALL_MS - 1)
    assert sum(r["requests"] for r in rows) == len(data.inside())
    assert {m["minute"] for m in rows} == {data.t0, data.t0 + dt.timedelta(minutes=1)}


def test_retries_keep_exactly_the_window(boundary):
    client, db, data = boundary
    rows = q.retries(client, db, data.start, data.end)
    assert {r["trace_id"] for r in rows} == data.inside()
    assert len(rows) == 2 * len(data.inside())  # both attempts of every chain


def test_neighbors_at_a_fractional_instant(boundary):
    client, db, data = boundary
    rows = q.neighbors(client, db, boundary_data.INSTANCE, data.at(boundary_data.NEIGHBOR_AT))
    assert [r["trace_id"] for r in rows] == [data.trace_id("req-30.2")]


def test_rollup_queries_count_every_minute_the_window_touches(boundary):
    client, db, data = boundary
    expected = data.in_window_minutes()
    assert sum(r["requests"] for r in q.percentiles(client, db, data.start, data.end)) == expected
    assert sum(r["requests"] for r in q.compare_pools(client, db, data.start, data.end)) == expected
    # An end a millisecond into the next minute takes that minute; an end exactly on it does not.
    minute = data.t0 + dt.timedelta(minutes=1)
    before = sum(1 for s in boundary_data.REQUEST_OFFSETS if s < 60)
    assert sum(r["requests"] for r in q.percentiles(client, db, data.t0, minute)) == before
    just_after = sum(r["requests"] for r in q.compare_pools(client, db, data.t0, minute + dt.timedelta(milliseconds=1)))
    assert just_after == sum(1 for s in boundary_data.REQUEST_OFFSETS if s < 120)


def test_report_queries_keep_exactly_the_window(boundary):
    # the incident report's own questions (SLO impact, failed attempts, the window's percentiles and
    # the filter values), on the same unmerged parts
    client, db, data = boundary
    inside = len(data.inside())
    assert q.slo_impact(client, db, data.start, data.end, ttft_slo_ms=1000.0)["requests"] == inside
    attempts = {r["instance"]: (r["attempts"], r["failed_attempts"])
                for r in q.attempt_failures(client, db, data.start, data.end)}
    assert attempts == {"10.0.0.8:8000": (inside, inside), boundary_data.INSTANCE: (inside, 0)}
    expected = data.in_window_minutes()
    assert sum(r["requests"] for r in q.window_percentiles(client, db, data.start, data.end)) == expected
    assert q.dimension_values(client, db, data.start, data.end, "instance") == [boundary_data.INSTANCE]
    assert q.instance_pools(client, db, data.start, data.end) == {boundary_data.INSTANCE: "stable"}
    # the rollup-backed ones take a minute the window only just touches
    minute = data.t0 + dt.timedelta(minutes=1)
    just_after = sum(r["requests"] for r in q.window_percentiles(client, db, data.t0,
                                                                minute + dt.timedelta(milliseconds=1)))
    assert just_after == sum(1 for s in boundary_data.REQUEST_OFFSETS if s < 120)
    assert q.dimension_values(client, db, minute + dt.timedelta(seconds=59, milliseconds=900),
                              minute + dt.timedelta(seconds=59, milliseconds=950), "pool") == ["stable"]
