"""Rendering the schema: single server and cluster (no cluster runs here, so cluster DDL is checked as text)."""

from __future__ import annotations

import re

import pytest

from infersight.cli import main
from infersight.pipelines.schema import ddl
from infersight.pipelines.schema.ddl import SchemaOptions
from infersight.pipelines.schema.migrations import MIGRATIONS, render

TABLES = ddl.DEFAULT_TABLES  # the schema's table names


def test_single_server_uses_plain_engines_and_public_names():
    statements = render(SchemaOptions(database="obs"))
    text = "\n".join(statements)
    assert "ON CLUSTER" not in text and "Replicated" not in text and "Distributed" not in text
    assert "_local" not in text
    assert "CREATE TABLE IF NOT EXISTS `obs`.`otel_traces` (" in text
    # Every statement can run twice: CREATE ... IF NOT EXISTS, CREATE OR REPLACE VIEW, DROP ... IF EXISTS, or an
    # ALTER that only sets a setting, a column's whole definition or a view's whole query.
    assert all("IF NOT EXISTS" in s or s.startswith(("DROP TABLE IF EXISTS", "CREATE OR REPLACE VIEW"))
               or (s.startswith("ALTER TABLE") and ("MODIFY SETTING" in s or "MODIFY COLUMN" in s
                                                    or "MODIFY QUERY" in s)) for s in statements)


def test_cluster_rendering():
    statements = render(SchemaOptions(database="obs", cluster="llm"))
    assert all(" ON CLUSTER `llm`" in s for s in statements)
    tables = [s for s in statements if s.startswith("CREATE TABLE") and "Distributed(" not in s]
    stored = [s for s in tables if not s.endswith("ENGINE = Null")]
    assert stored and all(re.search(r"ENGINE = Replicated\w*MergeTree\('/clickhouse/tables/\{shard\}/obs/", s)
                          for s in stored)
    # The intake stores nothing: one Null table per shard, behind a Distributed one like the others.
    assert [s.split(" (")[0] for s in tables if s.endswith("ENGINE = Null")] == [
        "CREATE TABLE IF NOT EXISTS `obs`.`otel_traces_intake_local` ON CLUSTER `llm`"]
    for name in (TABLES.traces, TABLES.trace_id_ts, TABLES.token_timelines, TABLES.requests_1m, TABLES.trace_intake):
        distributed = [s for s in statements if s.startswith(f"CREATE TABLE IF NOT EXISTS `obs`.`{name}` ON CLUSTER")]
        assert len(distributed) == 1 and f"ENGINE = Distributed('llm', 'obs', '{name}_local'" in distributed[0]
    # Versions 6 and 9 give the shards' tables and the Distributed one the same column expressions, and
    # version 9 the rollup's view on every shard its bounded query.
    altered = [s.split("\n")[0] for s in statements if s.startswith("ALTER TABLE") and "MODIFY COLUMN TtftMs" in s]
    assert altered == ["ALTER TABLE `obs`.`otel_traces_local` ON CLUSTER `llm`",
                       "ALTER TABLE `obs`.`otel_traces` ON CLUSTER `llm`"] * 2
    requeried = [s.split("\n")[0] for s in statements if "MODIFY QUERY" in s]
    assert requeried == ["ALTER TABLE `obs`.`llm_requests_1m_mv_local` ON CLUSTER `llm`"]
    views = [s for s in statements if "MATERIALIZED VIEW" in s]
    assert len(views) == 5
    # Materialized views read and write the per-shard tables: each shard explodes its own inserts.
    assert all(re.search(r"FROM `obs`\.`otel_traces(_intake)?_local`", v) and re.search(r"TO `obs`\.`\w+_local`", v)
               for v in views)
    assert sum("FROM `obs`.`otel_traces_intake_local`" in v for v in views) == 2


def test_hostile_names_are_quoted():
    statements = render(SchemaOptions(database="x`; DROP TABLE y; --", cluster="c`1"))
    assert "`x\\`; DROP TABLE y; --`.`otel_traces_local`" in statements[2]
    assert "ON CLUSTER `c\\`1`" in statements[0]
    with pytest.raises(ValueError):
        ddl.identifier("")


def test_db_render_cli(capsys):
    assert main(["db", "render", "--cluster", "prod", "--database", "traces"]) == 0
    out = capsys.readouterr().out
    assert "ON CLUSTER `prod`" in out and "`traces`.`llm_token_timelines_local`" in out


def test_db_migrate_cli_reports_unreachable_server(capsys):
    assert main(["db", "migrate", "--dsn", "http://127.0.0.1:9/infer"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach ClickHouse at http://127.0.0.1:9/infer" in err and "Traceback" not in err


def test_db_migrate_cli_on_a_real_server(clickhouse_server, clickhouse_database, capsys):
    dsn = clickhouse_server.dsn(clickhouse_database)
    assert main(["db", "migrate", "--dsn", dsn]) == 0
    assert f"applied {len(MIGRATIONS)}:" in capsys.readouterr().out
    assert main(["db", "migrate", "--dsn", dsn]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["db", "status", "--dsn", dsn, "--format", "csv"]) == 0
    assert capsys.readouterr().out.count(",applied") == len(MIGRATIONS)
    # Migration 4: every table a batch writes deduplicates retried inserts.
    creates = clickhouse_server.client(clickhouse_database).query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String}",
        parameters={"db": clickhouse_database}).result_rows
    dedup = {name for name, create in creates if "non_replicated_deduplication_window" in create}
    assert dedup == set(TABLES.deduplicated)


def test_render_users_prints_the_two_roles_with_hashes_only(tmp_path, capsys):
    """`db render --users` (for a server or cluster): the roles of the embedded store, never a password."""
    import hashlib

    from infersight.pipelines import clickhouse_users

    config = tmp_path / "infersight.yaml"
    config.write_text(f"clickhouse:\n  dsn: http://ch.internal:8123/obs\n  data_dir: {tmp_path / 'data'}\n")
    assert main(["--config", str(config), "db", "render", "--users", "--cluster", "llm"]) == 0
    out = capsys.readouterr().out
    credentials = clickhouse_users.load(tmp_path / "data")  # created on first use
    w, r = credentials.writer, credentials.reader
    assert w.password not in out and r.password not in out
    for role in (w, r):
        assert (f"CREATE USER IF NOT EXISTS `{role.user}` ON CLUSTER `llm` IDENTIFIED WITH sha256_hash BY "
                f"'{hashlib.sha256(role.password.encode()).hexdigest()}' SETTINGS PROFILE {role.user}") in out
    assert "CREATE SETTINGS PROFILE IF NOT EXISTS infersight_reader ON CLUSTER `llm` SETTINGS readonly = 1 CONST" in out
    writer_grants = [line for line in out.splitlines() if line.endswith(f"TO `{w.user}`;")]
    [reader_grant] = [line for line in out.splitlines() if line.endswith(f"TO `{r.user}`;")]
    [tables, database] = writer_grants  # the tables of the one database; creating that database, and engines
    assert "ON `obs`.*" in tables and "INSERT" in tables and "CREATE DATABASE" not in tables
    assert database.startswith("GRANT ON CLUSTER `llm` CREATE DATABASE ON `obs`.*, TABLE ENGINE ON MergeTree")
    assert reader_grant == f"GRANT ON CLUSTER `llm` {clickhouse_users.READER_GRANTS} ON `obs`.* TO `{r.user}`;"
    for role in (w, r):  # authoritative: whatever an existing user had is taken first
        assert out.index(f"REVOKE ON CLUSTER `llm` ALL ON *.* FROM `{role.user}`;") < out.index(f"TO `{role.user}`;")
    assert "INSERT" not in reader_grant and not re.search(r"\b(FILE|SOURCES|URL|S3)\b", out)
