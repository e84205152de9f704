"""``infersight db migrate | render | status``: the ClickHouse schema."""

from __future__ import annotations

import sys

from infersight.commands.output import add_format_flag, render
from infersight.pipelines.schema.connection import ConnectionFailed as ConnectionFailedError


def register(subparsers) -> None:
    db = subparsers.add_parser("db", help="ClickHouse schema: migrate, render, status",
                               description="Create and upgrade the ClickHouse schema (the trace table, token "
                                           "events, the per-minute rollup; clickhouse.tables renames them), or "
                                           "print its DDL.")
    commands = db.add_subparsers(dest="db_command", metavar="ACTION", title="actions")
    commands.required = True

    migrate = commands.add_parser("migrate", help="apply pending migrations (idempotent) and the configured TTLs",
                                  description="Apply pending schema migrations to clickhouse.dsn. Safe to run "
                                              "again: applied versions are skipped, retention is reconciled.")
    _target_flags(migrate)
    migrate.set_defaults(func=run_migrate)

    render_cmd = commands.add_parser("render", help="print the schema's DDL (for review or a cluster)",
                                     description="Print every CREATE statement, in order, without connecting. "
                                                 "With --users, print the writer and reader roles instead (the "
                                                 "same ones `infersight up` creates; passwords as SHA-256 hashes, "
                                                 "from clickhouse.data_dir/credentials.json, created if missing).")
    render_cmd.add_argument("--users", action="store_true",
                            help="print CREATE USER / SETTINGS PROFILE / GRANT for the writer and the reader")
    render_cmd.add_argument("--cluster", metavar="NAME",
                            help="render for a ClickHouse cluster: ON CLUSTER, Replicated engines, Distributed tables")
    render_cmd.add_argument("--database", help="database name (default: the one in clickhouse.dsn)")
    render_cmd.set_defaults(func=run_render)

    status = commands.add_parser("status", help="show applied and pending migrations")
    _target_flags(status)
    add_format_flag(status)
    status.set_defaults(func=run_status)


def _target_flags(parser) -> None:
    parser.add_argument("--dsn", help="ClickHouse DSN (default: clickhouse.dsn from the config)")
    parser.add_argument("--cluster", metavar="NAME", help="the schema lives on this ClickHouse cluster")


def _options(args, config, dsn: str):
    from infersight.pipelines.schema.connection import database_of
    from infersight.pipelines.schema.ddl import SchemaOptions

    database = getattr(args, "database", None) or database_of(dsn)
    return SchemaOptions.from_config(config, database, args.cluster)


def run_render(args, config) -> int:
    from infersight.pipelines.schema.migrations import render as render_schema

    try:
        opts = _options(args, config, config.clickhouse.dsn)
    except ConnectionFailedError as exc:
        print(f"infersight: {exc}", file=sys.stderr)
        return 2
    if args.users:
        from infersight.pipelines import clickhouse_users

        try:
            credentials = clickhouse_users.ensure(config.clickhouse.data_dir)
        except (clickhouse_users.CredentialsError, OSError) as exc:
            print(f"infersight: {exc}", file=sys.stderr)
            return 1
        print(f"-- infersight roles for database {opts.database}; the passwords are in {credentials.path}")
        print(";\n".join(clickhouse_users.render_sql(credentials, opts.database, opts.cluster)) + ";")
        return 0
    print(";\n\n".join(render_schema(opts)) + ";")
    return 0


def run_migrate(args, config) -> int:
    from infersight.pipelines.schema import migrations

    dsn = args.dsn or config.clickhouse.dsn
    client = _connect_or_exit(dsn, "writer", config)  # the writer: migrations run DDL
    if client is None:
        return 1
    opts = _options(args, config, dsn)
    try:
        applied = migrations.migrate(client, opts)
    except Exception as exc:  # noqa: BLE001 - a server-side refusal, reported without a traceback
        print(f"infersight db migrate: ClickHouse refused a statement: {str(exc).splitlines()[0][:500]}",
              file=sys.stderr)
        return 1
    if applied:
        for migration in applied:
            print(f"applied {migration.version}: {migration.name}")
    else:
        print(f"schema in database {opts.database!r} is up to date")
    return 0


def run_status(args, config) -> int:
    from infersight.pipelines.schema import migrations

    dsn = args.dsn or config.clickhouse.dsn
    client = _connect_or_exit(dsn, "reader", config)
    if client is None:
        return 1
    opts = _options(args, config, dsn)
    waiting = {m.version for m in migrations.pending(client, opts)}
    rows = [{"version": m.version, "name": m.name, "state": "pending" if m.version in waiting else "applied"}
            for m in migrations.MIGRATIONS]
    print(render(rows, args.format))
    return 0


def _connect_or_exit(dsn: str, role: str, config):
    from infersight.pipelines.schema.connection import ConnectionFailed, connect

    try:
        return connect(dsn, role=role, data_dir=config.clickhouse.data_dir)
    except ConnectionFailed as exc:
        print(f"infersight: {exc}", file=sys.stderr)
        return None
