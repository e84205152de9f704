"""One span with a timing no request can have ("nan", "inf", "-5", "1e308") must not poison its window.

Before schema version 9, a TTFT of "inf" made the window's p95 and p99 Infinity and its p50 NaN (in the
per-minute rollup and over the promoted columns), and the report and `--format json` printed them.
Now such a value is stored as unknown: the percentiles are those of the other requests.
"""

from __future__ import annotations

import datetime as dt

import pytest

from infersight import attributes as attr
from infersight.pipelines.queries import library as q
from infersight.pipelines.schema import ddl
from infersight.pipelines.schema.ddl import DEFAULT_TABLES as T
from infersight.pipelines.schema.ddl import SchemaOptions

T0 = dt.datetime(2026, 12, 2, 12, 0, 0)
WINDOW = (T0 - dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=5))
COLUMNS = ["Timestamp", "TraceId", "SpanId", "ParentSpanId", "ServiceName", "SpanName", "SpanAttributes",
           "Duration", "StatusCode"]
HOSTILE = ["nan", "inf", "-inf", "1e308", "-5"]


def _request(trace: str, timing: str, at: dt.datetime, ratio: str = "0.5") -> list:
    attributes = {attr.REQUEST_OUTCOME: "success", attr.INSTANCE: "i-1", attr.GEN_AI_REQUEST_MODEL: "m",
                  attr.POOL: "stable", attr.GEN_AI_USAGE_OUTPUT_TOKENS: "10", attr.TTFT_MS: timing,
                  attr.TPOT_MS: timing, attr.QUEUE_MS: timing, attr.TOKEN_GAP_MAX_MS: timing,
                  attr.TOKEN_STALL_OFFSET_MS: timing, attr.ROUTING_PREFIX_CACHE_RATIO: ratio}
    return [at, trace, f"{trace}-r", "", "gateway", "chat m", attributes, 3_000_000_000, "Ok"]


def _store(client, hostile: str) -> None:
    client.insert(T.traces, [_request("good-1", "120", T0), _request("bad", hostile, T0 + dt.timedelta(seconds=1),
                                                                       ratio=hostile),
                             _request("good-2", "130", T0 + dt.timedelta(seconds=2))], column_names=COLUMNS)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_the_percentiles_are_those_of_the_other_requests(hostile, clickhouse_server, clickhouse_schema):
    client, db = clickhouse_server.client(clickhouse_schema), clickhouse_schema
    _store(client, hostile)
    stored = client.query(f"SELECT TtftMs, TpotMs, QueueMs, TokenGapMaxMs, TokenStallOffsetMs, PrefixCacheRatio "
                          f"FROM {T.traces} WHERE TraceId = 'bad'").result_rows
    assert stored == [(None,) * 6]
    expected = {"ttft_p50_ms": 125.0, "ttft_p95_ms": 129.5, "ttft_p99_ms": 129.9}
    for rows in (q.percentiles(client, db, *WINDOW), q.window_percentiles(client, db, *WINDOW),
                 q.compare_pools(client, db, *WINDOW)):
        assert len(rows) == 1 and {k: rows[0][k] for k in expected} == expected, rows
        assert rows[0]["requests"] == 3  # the request still counts; only its timing is unknown
    assert q.slo_impact(client, db, *WINDOW, ttft_slo_ms=500)["ttft_p95_ms"] == 129.5
    slowest = {r["trace_id"]: r for r in q.slowest(client, db, *WINDOW)}
    assert slowest["bad"]["ttft_ms"] is None and slowest["good-2"]["ttft_ms"] == 130.0
    in_flight = {r["trace_id"]: r for r in q.neighbors(client, db, "i-1", T0 + dt.timedelta(seconds=2))}
    assert in_flight["bad"]["ttft_ms"] is None and in_flight["bad"]["queue_ms"] is None


def test_version_9_bounds_a_database_written_before(clickhouse_server, clickhouse_schema):
    """The migration's statements on a schema with version 8's expressions: new rows are bounded, the
    rollup's view too (MODIFY QUERY), and parts written before keep their values."""
    client, db = clickhouse_server.client(clickhouse_schema), clickhouse_schema
    opts = SchemaOptions(database=db)
    unbounded = ddl.requests_rollup_select(opts).replace(ddl.bounded(ddl._number(attr.TTFT_MS)),
                                                         ddl._number(attr.TTFT_MS))
    client.command(f"ALTER TABLE {opts.table(T.traces)} MODIFY COLUMN TtftMs Nullable(Float64) MATERIALIZED "
                   f"coalesce({ddl._number(attr.TTFT_MS)}, {ddl._number(attr.GEN_AI_LATENCY_TTFT_S)} * 1000)")
    client.command(f"ALTER TABLE {opts.view_of(T.requests_1m)} MODIFY QUERY {unbounded}")
    client.insert(T.traces, [_request("before", "inf", T0)], column_names=COLUMNS)
    for statement in ddl.bounded_columns(opts):
        client.command(statement)
    _store(client, "inf")
    ttft = dict(client.query(f"SELECT TraceId, TtftMs FROM {T.traces}").result_rows)
    assert ttft == {"before": float("inf"), "good-1": 120.0, "bad": None, "good-2": 130.0}
    minutes = q.percentiles(client, db, *WINDOW)
    assert minutes[0]["requests"] == 4 and minutes[0]["ttft_p99_ms"] == float("inf")  # the part from before
    client.command(f"TRUNCATE TABLE {opts.table(T.requests_1m)}")
    _store(client, "inf")
    assert q.percentiles(client, db, *WINDOW)[0]["ttft_p99_ms"] == 129.9
