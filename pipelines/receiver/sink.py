"""The ClickHouse end of the writer: one insert of a framed batch, its errors sorted into kinds.

An insert is one HTTP POST of the batch as the body of ``INSERT ... SELECT ... FROM input() FORMAT
Protobuf`` (the SQL and settings in the URL, as clickhouse-connect sends them), on a keep-alive
connection per writer thread. Not through clickhouse-connect's ``command(sql, data=...)``: that decodes
the whole body as text to classify the SQL as read-only or not, ~5 CPU-us per span of a batch with
token timelines, a third of the receiver's CPU (measured: benchmarks/pipeline_profile.py
``--client``). clickhouse-connect still does the few queries around it. Each carries the batch's
``insert_deduplication_token``: an insert that reached ClickHouse but whose answer was lost, then
retried, is stored once. A plain (non-replicated) MergeTree only deduplicates when the table
setting ``non_replicated_deduplication_window`` is non-zero, so before the first insert the sink
checks the tables it writes (directly or through materialized views) and sets it where missing.
"""

from __future__ import annotations

import base64
import http.client
import re
import ssl
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

from infersight.pipelines.receiver import ingest_sql
from infersight.pipelines.schema import ddl
from infersight.pipelines.schema.connection import CLIENT_DEFAULTS

# Migration 4 sets the window; the sink checks again because tables created by the OTel Collector
# (create_schema: true) or by an older infersight lack it.
DEDUP_WINDOW = ddl.DEDUP_WINDOW

# ClickHouse error codes that mean "this data can never be inserted": parse and type errors, a
# view that cannot take a row (349), a CHECK constraint (469). Everything else (connection refused,
# timeouts, too many parts, memory, a missing table before the migration ...) is transient: retried,
# then kept in the spool. A permanent failure is rare (upb has already checked the request); when a
# view fails, the main table may already hold the batch, so splitting it can store those rows twice
# (ClickHouse has no transaction across a table and its views).
# 691 (unknown Enum element) is how the insert SQL refuses a nested array or map, left to Python (ingest_sql).
PERMANENT_CODES = frozenset({
    6, 26, 27, 32, 33, 38, 41, 53, 69, 70, 72, 117, 131, 190, 321, 349, 407, 469, 691,
    433, 434, 435, 436, 437, 438, 439, 440, 441, 442, 443, 444, 445, 446,
})
_CODE = re.compile(r"Code: (\d+)")


class InsertFailed(Exception):
    def __init__(self, message: str, permanent: bool):
        super().__init__(message)
        self.permanent = permanent


class ClickHouseSink:
    """Inserts framed OTLP batches into the trace table of ``database`` on a ClickHouse HTTP server."""

    insert_parallelism = 2  # max_insert_threads per insert (pipeline.insert_parallelism)

    def __init__(self, dsn: str, store_content: bool = False, timeout_seconds: float = 30.0,
                 data_dir: str | None = None, tables: ddl.Tables = ddl.DEFAULT_TABLES):
        # Imported now, at start: the import takes a second of CPU, which the first batch would otherwise wait for.
        import clickhouse_connect  # noqa: F401

        from infersight.pipelines.schema.connection import WRITER, ConnectionFailed, resolve

        try:
            self.target = resolve(dsn, WRITER, data_dir)  # the writer of the embedded store unless dsn names a user
            self._password = self.target.resolve_password()
        except (ConnectionFailed, ValueError) as exc:
            raise ValueError(f"clickhouse.dsn: {exc}") from None
        if not self.target.is_http:
            raise ValueError(f"clickhouse.dsn {dsn!r}: expected http(s)://host:port/database (a ClickHouse server, "
                             "e.g. the one `infersight up` starts) or chdb://PATH (in-process)")
        self.dsn = str(self.target)
        self.database = self.target.database
        self.timeout = timeout_seconds
        self.store_content = store_content
        self.tables = tables
        self.query = ingest_sql.insert_query(self.database, store_content, table=tables.trace_intake)
        self._local = threading.local()  # one clickhouse-connect client and one insert connection per writer thread
        self._dedup_ready = False
        credentials = f"{self.target.user or 'default'}:{self._password}".encode()
        self._headers = {"Authorization": "Basic " + base64.b64encode(credentials).decode(),
                         "Content-Type": "application/octet-stream"}

    def insert(self, framed: bytes, token: str) -> float:
        """Insert one batch; returns the seconds it took. Raises :class:`InsertFailed`."""
        try:
            client = self._connect()
            if not self._dedup_ready:
                self.ensure_deduplication(client)
                self._dedup_ready = True
            started = time.perf_counter()
            self._send(client, framed, token)
            return time.perf_counter() - started
        except InsertFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - every client error is sorted into transient or permanent
            raise self._classify(exc) from None

    def _send(self, client, framed: bytes, token: str) -> None:
        settings = ingest_sql.settings(token, self.insert_parallelism)
        path = "/?" + urlencode({"query": self.query, "database": "default", **settings})
        for attempt in range(2):
            connection, reused = self._insert_connection()
            try:
                connection.request("POST", path, body=framed, headers=self._headers)
                response = connection.getresponse()
                answer = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop_insert_connection()
                if reused and attempt == 0:
                    continue  # the server closed the idle keep-alive connection: once more on a new one
                raise
            except BaseException:
                self._drop_insert_connection()
                raise
            if response.status != 200:
                raise RuntimeError(answer.decode("utf-8", "replace") or f"HTTP {response.status} {response.reason}")
            if response.will_close:
                self._drop_insert_connection()
            return

    def _insert_connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's keep-alive connection for inserts, and whether it has served one before."""
        connection = getattr(self._local, "insert", None)
        if connection is not None:
            return connection, True
        t = self.target
        if t.scheme == "https":
            connection = http.client.HTTPSConnection(t.host, t.port, timeout=self.timeout,
                                                     context=ssl.create_default_context())
        else:
            connection = http.client.HTTPConnection(t.host, t.port, timeout=self.timeout)
        self._local.insert = connection
        return connection, False

    def _drop_insert_connection(self) -> None:
        connection = getattr(self._local, "insert", None)
        self._local.insert = None
        if connection is not None:
            connection.close()

    def ensure_deduplication(self, client) -> list[str]:
        """Set ``non_replicated_deduplication_window`` on plain MergeTree tables that lack it."""
        rows = client.query(
            "SELECT name, engine, create_table_query FROM system.tables WHERE database = {db:String} "
            "AND name IN {names:Array(String)}",
            parameters={"db": self.database, "names": list(self.tables.deduplicated)},
        ).result_rows
        altered = []
        for name, engine, create in rows:
            if engine.startswith("Replicated") or "MergeTree" not in engine:
                continue  # replicated tables deduplicate by default
            if "non_replicated_deduplication_window" in create:
                continue
            client.command(f"ALTER TABLE {ddl.identifier(self.database)}.{ddl.identifier(name)} "
                           f"MODIFY SETTING non_replicated_deduplication_window = {DEDUP_WINDOW}")
            altered.append(name)
        return altered

    def close(self) -> None:
        self._drop_insert_connection()
        client = getattr(self._local, "client", None)
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self._local.client = None

    def _connect(self):
        if getattr(self._local, "client", None) is None:
            import clickhouse_connect

            t = self.target
            self._local.client = clickhouse_connect.get_client(
                interface=t.scheme, host=t.host, port=t.port,
                username=t.user or "default", password=self._password, database="default",
                connect_timeout=5, send_receive_timeout=self.timeout, **CLIENT_DEFAULTS,
            )
        return self._local.client

    def _classify(self, exc: Exception) -> InsertFailed:
        text = str(exc)
        match = _CODE.search(text)
        permanent = bool(match) and int(match.group(1)) in PERMANENT_CODES
        if not permanent:
            # The server may be a new process: reconnect and check deduplication again next time.
            self.close()
            self._dedup_ready = False
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return InsertFailed(first[:500], permanent)


class InProcessSink(ClickHouseSink):
    """``chdb://PATH``: the same insert on the in-process engine, which reads the batch from a file.

    One engine per process and one data folder per engine: the receiver then owns the folder (no
    server may have it open), and inserts are serialized (the engine runs one query at a time).
    """

    def __init__(self, dsn: str, store_content: bool = False, timeout_seconds: float = 30.0,
                 tables: ddl.Tables = ddl.DEFAULT_TABLES):
        from infersight.pipelines.schema.connection import database_of

        self.dsn = dsn
        self.database = database_of(dsn)
        self.timeout = timeout_seconds
        self.store_content = store_content
        self.tables = tables
        self._lock = threading.Lock()
        self._client = None
        self._dedup_ready = False
        self._scratch = Path(tempfile.mkdtemp(prefix="infersight-batches-"))

    def _connect(self):
        if self._client is None:
            from infersight.pipelines.schema.connection import connect

            self._client = connect(self.dsn, role="writer")
        return self._client

    def _send(self, client, framed: bytes, token: str) -> None:
        with self._lock:
            path = self._scratch / "batch.pb"
            path.write_bytes(framed)
            source = f"file({ddl.literal(str(path))}, 'Protobuf', {ddl.literal(ingest_sql.STRUCTURE)})"
            client.command(ingest_sql.insert_query(self.database, self.store_content, source=source,
                                                   table=self.tables.trace_intake),
                           settings=ingest_sql.settings(token, self.insert_parallelism))

    def close(self) -> None:
        pass  # the in-process engine lives as long as the process


def make_sink(dsn: str, store_content: bool = False, data_dir: str | None = None,
              tables: ddl.Tables = ddl.DEFAULT_TABLES) -> ClickHouseSink:
    """The sink for a DSN: HTTP to a server, or the in-process engine for ``chdb://``."""
    from infersight.dsn import DsnError, parse

    try:
        scheme = parse(dsn, must_exist=False).scheme  # the folder is checked when it is opened
    except DsnError as exc:
        raise ValueError(f"clickhouse.dsn: {exc}") from None
    if scheme == "chdb":
        return InProcessSink(dsn, store_content, tables=tables)
    return ClickHouseSink(dsn, store_content, data_dir=data_dir, tables=tables)
