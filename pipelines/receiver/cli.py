"""``infersight receive`` and ``infersight up``."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    receive = subparsers.add_parser(
        "receive", help="run the OTLP receivers (gRPC 4317, HTTP 4318) into ClickHouse",
        description="Receive OTLP traces over gRPC and HTTP (protobuf, JSON, gzip) and write them to "
                    "ClickHouse's otel_traces in batches. A request is answered 200/OK only once its spans "
                    "are in ClickHouse or in the on-disk spool; a full queue answers 429/RESOURCE_EXHAUSTED. "
                    "Self-metrics are served at http://<otlp_http>/metrics.")
    _listener_flags(receive)
    receive.add_argument("--dsn", help="ClickHouse DSN: http(s)://host:port/database, or chdb://PATH for the "
                                       "in-process engine (default: clickhouse.dsn)")
    receive.set_defaults(func=run_receive)

    up = subparsers.add_parser(
        "up", help="start the embedded stack: local ClickHouse + schema + receivers",
        description="Start ClickHouse embedded (chdb-core, data in clickhouse.data_dir) on the host and port of "
                    "clickhouse.dsn, apply the schema migrations, and run the OTLP receivers into it. It accepts "
                    "only the writer and the reader whose passwords are in DATA_DIR/credentials.json (created on "
                    "first start). Ctrl-C stops everything, flushing the queue.")
    _listener_flags(up)
    up.add_argument("--data-dir", help="ClickHouse data folder (default: clickhouse.data_dir)")
    up.add_argument("--dsn", help="where to serve ClickHouse: http://HOST:PORT/DATABASE (default: clickhouse.dsn)")
    up.add_argument("--clickhouse-port", type=int, metavar="PORT",
                    help="serve on this port instead of the DSN's (0 picks a free one)")
    up.add_argument("--database", help="database for the schema (default: the DSN's)")
    up.set_defaults(func=run_up)


def _listener_flags(parser) -> None:
    parser.add_argument("--otlp-http", metavar="HOST:PORT", help="OTLP/HTTP listener (default: listeners.otlp_http)")
    parser.add_argument("--otlp-grpc", metavar="HOST:PORT", help="OTLP/gRPC listener (default: listeners.otlp_grpc)")
    parser.add_argument("--spool-dir", help="on-disk spool folder (default: pipeline.spool_dir)")
    parser.add_argument("--ports-file", metavar="PATH", help="write the bound ports as JSON here (for port 0)")


def run_receive(args, config) -> int:
    return _serve(args, config, args.dsn or config.clickhouse.dsn)


def run_up(args, config) -> int:
    from infersight.dsn import DsnError, parse
    from infersight.pipelines.clickhouse_server import ClickHouseServer, ClickHouseServerError
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    text = args.dsn or config.clickhouse.dsn
    try:
        dsn = parse(text)
    except DsnError as exc:
        print(f"infersight up: {exc}", file=sys.stderr)
        return 2
    if not dsn.is_http or dsn.scheme != "http":
        print(f"infersight up: cannot serve {dsn}: the embedded ClickHouse speaks plain http://HOST:PORT/DATABASE "
              "(for chdb:// run `infersight receive`; for https put a TLS proxy in front)", file=sys.stderr)
        return 2
    if dsn.user is not None:
        print(f"infersight up: {dsn} names user {dsn.user!r}; the embedded store has its own writer and reader "
              "(credentials in DATA_DIR/credentials.json): drop the user from the DSN", file=sys.stderr)
        return 2
    database = args.database or dsn.database
    port = dsn.port if args.clickhouse_port is None else args.clickhouse_port
    data_dir = args.data_dir or config.clickhouse.data_dir
    server = ClickHouseServer(data_dir, port=port, host=dsn.host)
    try:
        server.start()
    except ClickHouseServerError as exc:
        print(f"infersight up: embedded ClickHouse did not start on {dsn.host}:{port}: {exc}\n"
              "If the port is taken, change clickhouse.dsn or pass --clickhouse-port 0 (a free one).",
              file=sys.stderr)
        return 1
    try:
        client = server.client()
        applied = migrations.migrate(client, SchemaOptions.from_config(config, database))
        client.close()
        print(f"infersight up: ClickHouse at {server.url} (data in {server.data_dir}; writer and reader "
              f"passwords in {server.credentials.path}); {len(applied)} migration(s) applied", flush=True)
        return _serve(args, config, server.dsn(database, "writer"))
    finally:
        server.stop()


def _serve(args, config, dsn: str) -> int:
    import asyncio

    from infersight.pipelines.receiver.service import Receiver, SetupError, serve_forever

    try:
        receiver = Receiver(config, dsn=dsn, http_listen=args.otlp_http, grpc_listen=args.otlp_grpc,
                            spool_dir=args.spool_dir)
        asyncio.run(serve_forever(receiver, args.ports_file))
    except SetupError as exc:
        print(f"infersight: {exc}", file=sys.stderr)
        return 2
    return 0
