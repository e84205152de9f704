"""One span with absurd values (as any client may send them) must not fail the queries of its window.

Before: a stall offset of "nan" or "1e30" ms failed `traces slowest` and `traces stalls` over every
window holding the span (NaN to integer, DateTime64 overflow), and a span ending at 2^64 ns failed
`traces neighbors` and `traces retries` on its instance. Now such a value reads as unknown (a stall
offset) or is cut to a year (a duration), and the other requests of the window answer as before.
"""

from __future__ import annotations

import datetime as dt

import pytest

from infersight import attributes as attr
from infersight.pipelines.queries import library as q
from infersight.pipelines.schema.ddl import DEFAULT_TABLES as T

T0 = dt.datetime(2026, 12, 2, 12, 0, 0)
WINDOW = (T0 - dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=5))
MAX_DURATION_NS = (1 << 64) - 1
COLUMNS = ["Timestamp", "TraceId", "SpanId", "ParentSpanId", "ServiceName", "SpanName", "SpanAttributes",
           "Duration", "StatusCode"]


def _request(trace: str, stall_offset_ms: str, duration_ns: int = 3_000_000_000, at: dt.datetime = T0) -> list:
    attributes = {attr.REQUEST_OUTCOME: "success", attr.INSTANCE: "i-1", attr.TTFT_MS: "120",
                  attr.TOKEN_GAP_MAX_MS: "2500", attr.TOKEN_STALL_OFFSET_MS: stall_offset_ms}
    return [at, trace, f"{trace}-r", "", "gateway", "chat m", attributes, duration_ns, "Ok"]


def _attempt(trace: str, attempt: int, at: dt.datetime, duration_ns: int) -> list:
    attributes = {attr.INSTANCE: "i-1", attr.RETRY_ATTEMPT: str(attempt)}
    return [at, trace, f"{trace}-u{attempt}", f"{trace}-r", "gateway", attr.SPAN_UPSTREAM, attributes, duration_ns,
            "Error" if attempt == 0 else "Ok"]


@pytest.fixture(params=["nan", "inf", "1e30", "-5", "huge duration"])
def store(request, clickhouse_server, clickhouse_schema):
    client = clickhouse_server.client(clickhouse_schema)
    hostile = request.param
    rows = [_request("good", "700"),  # stalled 700 ms after its start
            _attempt("good", 0, T0, 400_000_000), _attempt("good", 1, T0 + dt.timedelta(milliseconds=500), 1_000_000)]
    if hostile == "huge duration":
        rows += [_request("bad", "700", MAX_DURATION_NS, T0 + dt.timedelta(seconds=1)),
                 _attempt("bad", 0, T0 + dt.timedelta(seconds=1), MAX_DURATION_NS),
                 _attempt("bad", 1, T0 + dt.timedelta(seconds=2), 1_000_000)]
    else:
        rows.append(_request("bad", hostile, at=T0 + dt.timedelta(seconds=1)))
    client.insert(T.traces, rows, column_names=COLUMNS)
    return client, clickhouse_schema, hostile


def test_the_window_still_answers(store):
    client, db, hostile = store
    slowest = {r["trace_id"]: r for r in q.slowest(client, db, *WINDOW)}
    assert slowest["good"]["stall_at"] == T0 + dt.timedelta(milliseconds=700)
    if hostile != "huge duration":
        assert slowest["bad"]["stall_at"] is None  # not a time: unknown
    stalls = q.window_stalls(client, db, *WINDOW, min_gap_ms=1000)
    assert sum(r["requests"] for r in stalls) == 2
    assert min(r["first_stall_at"] for r in stalls) == T0 + dt.timedelta(milliseconds=700)
    in_flight = {r["trace_id"] for r in q.neighbors(client, db, "i-1", T0 + dt.timedelta(seconds=2))}
    assert {"good", "bad"} <= in_flight
    chains = {(r["trace_id"], r["attempt"]): r for r in q.retries(client, db, *WINDOW)}
    assert chains[("good", 1)]["gap_ms"] == 100.0
    if hostile == "huge duration":
        assert chains[("bad", 1)]["gap_ms"] < 0  # its first attempt "ends" a year on: the gap reads negative
