"""The schema on a real ClickHouse server: migrations, Collector compatibility, materialized views."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from infersight import attributes as attr
from infersight.config import Retention
from infersight.pipelines.schema import ddl, migrations
from infersight.pipelines.schema.ddl import SchemaOptions
from tests.pipelines.span_rows import insert_spans, span_row

TABLES = ddl.DEFAULT_TABLES  # the schema's table names

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
    assert {TABLES.traces, TABLES.trace_id_ts, TABLES.token_events, TABLES.requests_1m, TABLES.migrations} <= tables


def test_half_applied_migration_runs_again(schema):
    client, opts = schema
    client.command(f"DELETE FROM {opts.table(TABLES.migrations)} WHERE Version = 3")
    client.command(f"DROP VIEW {opts.table(TABLES.requests_1m + '_mv')}")  # as if it died before the view
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
    assert "toIntervalDay(30)" in ttl[TABLES.traces] and "toIntervalDay(30)" in ttl[TABLES.trace_id_ts]
    assert "toIntervalDay(2)" in ttl[TABLES.token_timelines]
    assert "toIntervalDay(90)" in ttl[TABLES.requests_1m]
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


TOKEN_QUERY = ("SELECT TraceId, SpanId, Instance, TokenIndex, Timestamp, OffsetUs, GapUs FROM `{db}`.llm_token_events "
               "ORDER BY TraceId, TokenIndex")


def test_a_per_token_schema_upgrades_to_timelines_with_the_same_rows(clickhouse_server, clickhouse_database):
    client, db = clickhouse_server.client(), clickhouse_database
    opts = SchemaOptions(database=db)
    migrations.migrate(client, opts)
    # Make it the schema of before: drop what version 5 made, put the per-token table and view back.
    for name in (TABLES.token_events, TABLES.token_timelines + "_mv", TABLES.token_timelines):
        client.command(f"DROP TABLE {opts.table(name)}")
    for statement in ddl.per_token_events(opts):  # what migration 2 created before version 5
        client.command(statement)
    client.command(f"DELETE FROM {opts.table(TABLES.migrations)} WHERE Version = 5")
    insert_spans(client, db, [_request("a" * 32, [100_000, 120_000, 450_000], 100.0, "i-1"),
                              _request("b" * 32, [5_000, 9_000], 3.0, "i-2")])
    before = client.query(TOKEN_QUERY.format(db=db)).result_rows
    assert len(before) == 5

    assert [m.version for m in migrations.migrate(client, opts)] == [5]
    assert client.query(TOKEN_QUERY.format(db=db)).result_rows == before  # the old rows, through the view
    engines = dict(client.query("SELECT name, engine FROM system.tables WHERE database = {db:String}",
                                parameters={"db": db}).result_rows)
    assert engines[TABLES.token_events] == "View" and engines[TABLES.token_events_v1] == "MergeTree"
    assert TABLES.token_events + "_mv" not in engines
    # New timelines go to the new table only, once; the copy is not repeated by a second run.
    insert_spans(client, db, [_request("c" * 32, [7_000, 8_000], 7.0, "i-3")])
    migrations._token_timelines_upgrade(client, opts)
    after = client.query(TOKEN_QUERY.format(db=db)).result_rows
    assert after[:5] == before and [r[3] for r in after[5:]] == [0, 1]
    assert client.query(f"SELECT count() FROM `{db}`.{TABLES.token_events_v1}").result_rows == [(5,)]


def test_one_trace_timeline_is_a_point_read_through_the_view(schema):
    """The view's TraceId filter reaches the timelines table's primary key (not a scan of every timeline),
    on the parts as the inserts left them: random trace ids, several unmerged parts that all span them."""
    client, opts = schema
    traces = [hashlib.sha256(str(n).encode()).hexdigest()[:32] for n in range(6000)]
    client.command(f"SYSTEM STOP MERGES {opts.table(TABLES.token_timelines)}")  # the parts stay as written
    for batch in range(4):  # one part per insert, each ~6 granules of 256 timelines
        insert_spans(client, opts.database, [_request(t, [1000, 2000, 3000], 1.0, "i-1")
                                             for t in traces[batch::4]])
    parts = client.query("SELECT count() FROM system.parts WHERE database = {db:String} AND table = {t:String} "
                         "AND active", parameters={"db": opts.database, "t": TABLES.token_timelines}).result_rows
    assert parts == [(4,)]
    trace = traces[1234]
    plan = "\n".join(r[0] for r in client.query(
        f"EXPLAIN indexes = 1 SELECT * FROM {opts.table(TABLES.token_events)} WHERE TraceId = {{t:String}}",
        parameters={"t": trace}).result_rows)
    assert "PrimaryKey" in plan and "Condition: (TraceId in ['" in plan
    granules = [line for line in plan.splitlines() if "Granules:" in line]
    selected, total = (int(x) for x in granules[-1].split("Granules:")[1].strip().split("/"))
    assert selected < total / 4
    rows = client.query(f"SELECT TokenIndex, OffsetUs FROM {opts.table(TABLES.token_events)} "
                        "WHERE TraceId = {t:String} "
                        "ORDER BY TokenIndex", parameters={"t": trace}).result_rows
    assert rows == [(0, 1000), (1, 2000), (2, 3000)]


def _creates(client, db: str) -> list[str]:
    return [client.query("SELECT create_table_query FROM system.tables WHERE database = {db:String} AND name = "
                         "{t:String}", parameters={"db": db, "t": name}).result_rows[0][0]
            for name in (TABLES.traces, TABLES.token_timelines)]


def test_version_10_merges_the_big_tables_in_fewer_generations(clickhouse_server, clickhouse_database, monkeypatch):
    """A database at version 9 (ClickHouse's default merge selector) with rows in it takes the setting on
    both tables, keeps their other settings and its rows."""
    client = clickhouse_server.client()
    opts = SchemaOptions(database=clickhouse_database)
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", tuple(m for m in migrations.MIGRATIONS if m.version < 10))
        migrations.migrate(client, opts)
    assert not any("merge_selector_base" in create for create in _creates(client, opts.database))
    insert_spans(client, opts.database, [_request("a" * 32, [100_000, 120_000], 100.0, "i-1")])

    assert [m.version for m in migrations.migrate(client, opts)][:1] == [10]
    for create in _creates(client, opts.database):
        assert f"merge_selector_base = {ddl.MERGE_SELECTOR_BASE}" in create
        assert "ttl_only_drop_parts = 1" in create  # the table's other settings stay
    assert client.query(f"SELECT count() FROM `{opts.database}`.{TABLES.token_timelines}").result_rows[0][0] == 1
    assert migrations.migrate(client, opts) == []


def _part_types(client, db: str, table: str) -> list[tuple[str, int]]:
    return client.query("SELECT part_type, rows FROM system.parts WHERE active AND database = {db:String} AND "
                        "table = {t:String} ORDER BY min_block_number", parameters={"db": db, "t": table}).result_rows


def test_version_11_writes_an_insert_as_one_compact_part(clickhouse_server, clickhouse_database, monkeypatch):
    """A database at version 10 writes a batch over ClickHouse's 10 MiB bound as a Wide part (a file per
    column); after version 11 the same batch is one Compact part, and the rows before it stay readable."""
    client = clickhouse_server.client(send_receive_timeout=300)
    opts = SchemaOptions(database=clickhouse_database)
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", tuple(m for m in migrations.MIGRATIONS if m.version < 11))
        migrations.migrate(client, opts)
    client.command(f"SYSTEM STOP MERGES {opts.table(TABLES.traces)}")  # the parts stay as the inserts wrote them
    # Over 10 MiB uncompressed per insert: incompressible attribute values, as real prompts' ids and hashes are.
    spans = [_request(hashlib.sha256(f"{n}".encode()).hexdigest()[:32], [1000, 2000], 1.0, f"i-{n % 7}")
             for n in range(60_000)]
    for n, span in enumerate(spans):
        span[11]["llm.request.digest"] = hashlib.sha512(str(n).encode()).hexdigest() * 2
    insert_spans(client, opts.database, spans[:30_000])
    assert _part_types(client, opts.database, TABLES.traces) == [("Wide", 30_000)]

    assert [m.version for m in migrations.migrate(client, opts)] == [11]
    for create in _creates(client, opts.database):
        assert f"min_bytes_for_wide_part = {ddl.WIDE_PART_MIN_BYTES}" in create
        assert f"merge_selector_base = {ddl.MERGE_SELECTOR_BASE}" in create  # version 10's setting stays
    insert_spans(client, opts.database, spans[30_000:])
    assert _part_types(client, opts.database, TABLES.traces) == [("Wide", 30_000), ("Compact", 30_000)]
    assert client.query(f"SELECT count(), uniqExact(TraceId) FROM {opts.table(TABLES.traces)}").result_rows == [
        (60_000, 60_000)]
    assert migrations.migrate(client, opts) == []
