"""Versioned, idempotent schema migrations.

Each migration is a version, a name and the statements that build it. Every statement is
``IF NOT EXISTS``, ``CREATE OR REPLACE VIEW``, an ``ALTER ... MODIFY SETTING`` or an ``ALTER ... MODIFY
COLUMN`` to a definition, so a migration interrupted half-way simply runs again; the applied versions are recorded in
``infersight_schema_migrations`` so later runs skip them. Retention (TTL) comes from the config and is
reconciled on every run: changing ``clickhouse.retention`` and running ``infersight db migrate`` again
alters the TTL of existing tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infersight.pipelines.schema import ddl
from infersight.pipelines.schema.ddl import SchemaOptions


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: Callable[[SchemaOptions], list[str]]
    # For a step that depends on what the database holds (an upgrade): runs instead of the statements.
    run: Callable[[Any, SchemaOptions], None] | None = None


def _token_timelines_upgrade(client, opts: SchemaOptions) -> None:
    """Version 5 on a database that has the per-token table of versions 2-4 (a fresh schema already
    has the view, and this only re-runs its IF NOT EXISTS statements).

    Stop the per-token view, move the old table aside (kept until its TTL), create the timelines
    table, its view and ``llm_token_events`` as a view, then copy the old rows over. The copy
    carries a fixed deduplication token, so a migration interrupted after it and run again does not
    copy twice. On a cluster there is no copy (the rows are shard-local; one client cannot move them):
    timelines from before the upgrade stay in each shard's ``llm_token_events_v1_local``, out of the view.
    """
    for statement in ddl.token_events_upgrade(opts):
        client.command(statement)
    tokens, old = opts.tables.token_events, opts.tables.token_events_v1
    engine = _engine(client, opts, tokens + ("_local" if opts.cluster else ""))
    if engine and engine != "View":
        if opts.cluster:  # the Distributed table holds no rows; the shards' tables keep theirs
            client.command(f"DROP TABLE IF EXISTS {opts.table(tokens)}{opts.on_cluster}")
        client.command(f"RENAME TABLE {opts.table(tokens, local=True)} TO "
                       f"{opts.table(old, local=True)}{opts.on_cluster}")
    for statement in ddl.token_events(opts):
        client.command(statement)
    if not opts.cluster and _engine(client, opts, old):
        client.command(ddl.backfill_timelines(opts),
                       settings={"insert_deduplication_token": f"{opts.database}.migration-5-backfill"})


def _engine(client, opts: SchemaOptions, table: str) -> str | None:
    rows = client.query("SELECT engine FROM system.tables WHERE database = {db:String} AND name = {t:String}",
                        parameters={"db": opts.database, "t": table}).result_rows
    return rows[0][0] if rows else None


MIGRATIONS = (
    Migration(1, "otel_traces and the trace id lookup (OTel Collector exporter compatible)",
              lambda o: ddl.traces_table(o) + ddl.trace_id_ts(o)),
    Migration(2, "token timelines from llm.token.offsets_us (llm_token_timelines, llm_token_events)", ddl.token_events),
    Migration(3, "llm_requests_1m per-minute rollup", ddl.requests_rollup),
    Migration(4, "insert deduplication window, so retried batches are stored once", ddl.deduplication_window),
    Migration(5, "token timelines stored once per request (llm_token_timelines); llm_token_events a view over them",
              ddl.token_events_upgrade, run=_token_timelines_upgrade),
    Migration(6, "timing and token columns also read vLLM's own span attributes and the GenAI cache name",
              ddl.fallback_columns),
    Migration(7, "our receiver inserts into otel_traces_intake: a timeline with its summary is stored once, "
                 "in llm_token_timelines", ddl.trace_intake),
    Migration(8, "llm_token_events cuts a token's timestamp at a year after the request's start, so that one "
                 "absurd offset cannot fail the queries that read it", ddl.token_events_bounded),
    Migration(9, "timings outside 0..a year and cache ratios outside 0..1 are stored as unknown, so that one "
                 "span's nan or inf cannot turn its window's percentiles into NaN or Infinity", ddl.bounded_columns),
    Migration(10, "otel_traces and llm_token_timelines merge their parts in fewer generations "
                  "(merge_selector_base)", ddl.merge_selector),
    Migration(11, "an insert into otel_traces or llm_token_timelines is one Compact part, not a file per column "
                  "(min_bytes_for_wide_part)", ddl.compact_inserts),
)


def ttl_columns(tables: ddl.Tables) -> dict[str, tuple[str, str]]:
    """Table -> (TTL expression, retention field) for reconciling retention with the config."""
    return {
        tables.traces: ("toDateTime(Timestamp)", "traces_days"),
        tables.trace_id_ts: ("toDateTime(Start)", "traces_days"),
        tables.token_timelines: ("toDateTime(Timestamp)", "tokens_days"),
        tables.requests_1m: ("Minute", "rollups_days"),
    }


def render(opts: SchemaOptions) -> list[str]:
    """Every statement of the full schema, in order (what ``infersight db render`` prints)."""
    statements = [ddl.create_database(opts), ddl.migrations_table(opts)]
    for migration in MIGRATIONS:
        statements += migration.statements(opts)
    return statements


def applied_versions(client, opts: SchemaOptions) -> set[int]:
    table = opts.table(opts.tables.migrations)
    return {row[0] for row in client.query(f"SELECT DISTINCT Version FROM {table}").result_rows}


def pending(client, opts: SchemaOptions) -> list[Migration]:
    exists = client.query("SELECT count() FROM system.tables WHERE database = {db:String} AND name = {t:String}",
                          parameters={"db": opts.database, "t": opts.tables.migrations}).result_rows[0][0]
    done = applied_versions(client, opts) if exists else set()
    return [m for m in MIGRATIONS if m.version not in done]


def migrate(client, opts: SchemaOptions) -> list[Migration]:
    """Apply the pending migrations and reconcile TTLs; returns the migrations it applied."""
    client.command(ddl.create_database(opts))
    client.command(ddl.migrations_table(opts))
    todo = pending(client, opts)
    for migration in todo:
        if migration.run is not None:
            migration.run(client, opts)
        else:
            for statement in migration.statements(opts):
                client.command(statement)
        client.command(f"INSERT INTO {opts.table(opts.tables.migrations)} (Version, Name) "
                       "VALUES ({v:UInt32}, {n:String})",
                       parameters={"v": migration.version, "n": migration.name})
    reconcile_retention(client, opts)
    return todo


def reconcile_retention(client, opts: SchemaOptions) -> list[str]:
    """ALTER the TTL of tables whose retention differs from the config; returns the tables altered."""
    altered = []
    for table, (expression, field) in ttl_columns(opts.tables).items():
        days = getattr(opts.retention, field)
        local = table + ("_local" if opts.cluster else "")
        rows = client.query("SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}",
                            parameters={"db": opts.database, "t": local}).result_rows
        if not rows or f"toIntervalDay({days})" in rows[0][0]:
            continue
        client.command(f"ALTER TABLE {opts.table(table, local=True)}{opts.on_cluster} "
                       f"MODIFY TTL {expression} + toIntervalDay({days})")
        altered.append(table)
    return altered
