"""The schema on a real ClickHouse server: migrations, Collector compatibility, materialized views."""

from __future__ import annotations

import datetime as dt

import pytest

from infersight import attributes as attr
from infersight.config import Retention
from infersight.pipelines.schema import ddl, migrations
from infersight.pipelines.schema.ddl import SchemaOptions
from tests.pipelines.span_rows import insert_spans, span_row

# The OTel Collector contrib exporter's otel_traces columns and types, in order.
EXPORTER_COLUMNS = [
    ("Timestamp", "DateTime64(9)"), ("TraceId", "String"), ("SpanId", "String"), ("ParentSpanId", "String"),
    ("TraceState", "String"), ("SpanName", "LowCardinality(String)"), ("SpanKind", "LowCardinality(String)"),
    ("ServiceName", "LowCardinality(String)"), ("ResourceAttributes", "Map(LowCardinality(String), String)"),
    ("ScopeName", "String"), ("ScopeVersion", "String"), ("SpanAttributes", "Map(LowCardinality(String), String)"),
    ("Duration", "UInt64"), ("StatusCode", "LowCardinality(String)"), ("StatusMessage", "String"),
    ("Events.Timestamp", "Array(DateTime64(9))"), ("Events.Name", "Array(LowCardinality(String))"),
    ("Events.Attributes", "Array(Map(LowCardinality(String), String))"),
    ("Links.TraceId", "Array(String)"), ("Links.SpanId", "Array(String)"), ("Links.TraceState", "Array(String)"),
    ("Links.Attributes", "Array(Map(LowCardinality(String), String))"),
]
NOW = dt.datetime.now(dt.UTC).replace(second=10, microsecond=0, tzinfo=None)


@pytest.fixture
def schema(clickhouse_server, clickhouse_database):
    client = clickhouse_server.client()
    opts = SchemaOptions(database=clickhouse_database)
    migrations.migrate(client, opts)
    return client, opts


def test_otel_traces_matches_the_collector_exporter(schema):
    client, opts = schema
    rows = client.query("SELECT name, type, default_kind FROM system.columns WHERE database = {db:String} "
                        "AND table = 'otel_traces' ORDER BY position", parameters={"db": opts.database}).result_rows
    insertable = [(name, kind) for name, kind, default_kind in rows if default_kind != "MATERIALIZED"]
    assert insertable == EXPORTER_COLUMNS
    assert {name for name, _, kind in rows if kind == "MATERIALIZED"} == {c[0] for c in ddl.PROMOTED_COLUMNS}
    create = client.query("SELECT create_table_query FROM system.tables WHERE database = {db:String} "
                          "AND name = 'otel_traces'", parameters={"db": opts.database}).result_rows[0][0]
    assert "PARTITION BY toDate(Timestamp)" in create
    assert "ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)" in create
    assert "idx_trace_id TraceId TYPE bloom_filter" in create
    assert "ttl_only_drop_parts = 1" in create
    assert "toIntervalDay(7)" in create


def test_migrate_is_idempotent_and_versioned(schema):
    client, opts = schema
    assert migrations.migrate(client, opts) == []
    assert migrations.pending(client, opts) == []
    assert migrations.applied_versions(client, opts) == {m.version for m in migrations.MIGRATIONS}
    tables = {r[0] for r in client.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                         parameters={"db": opts.database}).result_rows}
    assert {ddl.TRACES, ddl.TRACE_ID_TS, ddl.TOKENS, ddl.REQUESTS_1M, ddl.MIGRATIONS} <= tables


def test_half_applied_migration_runs_again(schema):
    client, opts = schema
    client.command(f"DELETE FROM {opts.table(ddl.MIGRATIONS)} WHERE Version = 3")
    client.command(f"DROP VIEW {opts.table(ddl.REQUESTS_1M + '_mv')}")  # as if it died before the view
    applied = migrations.migrate(client, opts)
    assert [m.version for m in applied] == [3]
    assert client.query("EXISTS VIEW {db:Identifier}.llm_requests_1m_mv",
                        parameters={"db": opts.database}).result_rows == [(1,)]


def test_retention_follows_the_config(schema):
    client, opts = schema
    longer = SchemaOptions(database=opts.database, retention=Retention(traces_days=30, tokens_days=2))
    migrations.migrate(client, longer)
    ttl = dict(client.query("SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
                            parameters={"db": opts.database}).result_rows)
    assert "toIntervalDay(30)" in ttl[ddl.TRACES] and "toIntervalDay(30)" in ttl[ddl.TRACE_ID_TS]
    assert "toIntervalDay(2)" in ttl[ddl.TOKENS]
    assert "toIntervalDay(90)" in ttl[ddl.REQUESTS_1M]
    assert migrations.reconcile_retention(client, longer) == []  # nothing left to change


def _request(trace: str, offsets: str | list[int], ttft: float, instance: str, outcome: str = "success",
             duration_ms: float = 500.0) -> list:
    return span_row(NOW, trace, trace[:16], "chat llama", duration_ms, attributes={
        attr.REQUEST_OUTCOME: outcome, attr.GEN_AI_REQUEST_MODEL: "llama", attr.INSTANCE: instance,
        attr.POOL: "stable", attr.ROUTING_STRATEGY: "least_conn", attr.TTFT_MS: ttft, attr.TPOT_MS: 20.5,
        attr.GEN_AI_USAGE_OUTPUT_TOKENS: 4, attr.GEN_AI_USAGE_INPUT_TOKENS: 100,
        attr.TOKEN_OFFSETS_US: offsets})


def test_collector_rows_feed_every_view(schema):
    client, opts = schema
    rows = [_request("a" * 32, [100_000, 120_000, 450_000, 470_000], 100.0, "i-1"),
            _request("b" * 32, "not json at all", 300.0, "i-2", outcome="error"),
            span_row(NOW, "a" * 32, "c" * 16, attr.SPAN_PREFILL, 80, service="engine", parent="a" * 16)]
    insert_spans(client, opts.database, rows)
    db = opts.database

    promoted = client.query(f"SELECT TraceId, Outcome, Instance, TtftMs, OutputTokens, TokenGapMaxMs, "
                            f"TokenStallOffsetMs, IsRequest FROM `{db}`.otel_traces ORDER BY TraceId, IsRequest DESC"
                            ).result_rows
    # the gap summary is computed from the timeline when the instrumentation did not write it
    assert promoted[0] == ("a" * 32, "success", "i-1", 100.0, 4, 330.0, 120.0, True)
    assert promoted[1][-1] is False and promoted[1][3] is None  # the prefill span is no request span
    assert promoted[2] == ("b" * 32, "error", "i-2", 300.0, 4, None, None, True)

    tokens = client.query(f"SELECT TokenIndex, OffsetUs, GapUs, Timestamp, Instance FROM `{db}`.llm_token_events "
                          "ORDER BY TokenIndex").result_rows
    assert [(i, o, g) for i, o, g, _, _ in tokens] == [(0, 100_000, 0), (1, 120_000, 20_000), (2, 450_000, 330_000),
                                                       (3, 470_000, 20_000)]
    assert tokens[2][3] == NOW + dt.timedelta(microseconds=450_000) and tokens[2][4] == "i-1"

    lookup = client.query(f"SELECT TraceId, Start FROM `{db}`.otel_traces_trace_id_ts ORDER BY TraceId").result_rows
    assert lookup == [("a" * 32, NOW), ("b" * 32, NOW)]

    rollup = client.query(f"SELECT Instance, sum(Requests), sum(Errors), quantilesMerge(0.5, 0.95, 0.99)(TtftMs) "
                          f"FROM `{db}`.llm_requests_1m GROUP BY Instance ORDER BY Instance").result_rows
    assert rollup == [("i-1", 1, 0, [100.0, 100.0, 100.0]), ("i-2", 1, 1, [300.0, 300.0, 300.0])]
