"""The receiver as one service: writer + spool + OTLP/HTTP + OTLP/gRPC in one asyncio loop.

``Receiver`` is used by ``infersight receive`` / ``infersight up`` and by tests (``ReceiverThread``
runs one in a background thread). Listeners bind to ``config.listeners`` unless overridden; port 0
picks a free port, and :attr:`Receiver.ports` tells which.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from pathlib import Path

from aiohttp import web

from infersight.config import Config
from infersight.listen import Listen, parse_listen
from infersight.pipelines.receiver.grpc_server import build_server
from infersight.pipelines.receiver.http_server import build_app
from infersight.pipelines.receiver.intake import Intake
from infersight.pipelines.receiver.metrics import PipelineMetrics
from infersight.pipelines.receiver.sink import make_sink
from infersight.pipelines.receiver.spool import Spool
from infersight.pipelines.receiver.writer import Writer, WriterOptions
from infersight.pipelines.schema.ddl import Tables

log = logging.getLogger("infersight.receiver")


class SetupError(Exception):
    """A configuration problem found while starting (unreadable token or TLS file, port in use ...)."""


def split_listen(listen: str) -> Listen:
    """:func:`~infersight.listen.parse_listen`, its error as a SetupError (the receiver's CLI reports those)."""
    try:
        return parse_listen(listen, example="127.0.0.1:4318")
    except ValueError as exc:
        raise SetupError(str(exc)) from None


class Receiver:
    def __init__(self, config: Config, dsn: str | None = None, http_listen: str | None = None,
                 grpc_listen: str | None = None, spool_dir: str | None = None):
        p = config.pipeline
        self.config = config
        self.http_listen = http_listen or config.listeners.otlp_http
        self.grpc_listen = grpc_listen or config.listeners.otlp_grpc
        split_listen(self.http_listen), split_listen(self.grpc_listen)  # fail early on a bad address
        tables = Tables.from_config(config)
        self.metrics = PipelineMetrics(table=tables.traces)
        try:
            self.sink = make_sink(dsn or config.clickhouse.dsn, store_content=p.store_content,
                                  data_dir=config.clickhouse.data_dir, tables=tables)
        except ValueError as exc:
            raise SetupError(str(exc)) from None
        self.sink.insert_parallelism = p.insert_parallelism
        try:
            self.spool = Spool(spool_dir or p.spool_dir, p.spool_max_bytes)
        except OSError as exc:
            raise SetupError(f"pipeline.spool_dir {spool_dir or p.spool_dir!r}: {exc.strerror}") from None
        self.writer = Writer(self.sink, self.spool, WriterOptions.from_config(p), self.metrics)
        self.intake = Intake(self.writer, self.metrics, p.max_attribute_length, _read_secret(p.auth_token_file))
        self.ports: dict[str, int] = {}
        self._runner: web.AppRunner | None = None
        self._grpc = None

    async def start(self) -> dict[str, int]:
        p = self.config.pipeline
        tls = _tls(p.tls_cert_file, p.tls_key_file)
        self.writer.start()
        # auto_decompress off: we gunzip ourselves, bounded by max_body_bytes (a gzip bomb stops there).
        self._runner = web.AppRunner(build_app(self.intake, p.max_body_bytes, p.queue_max_bytes), access_log=None,
                                     auto_decompress=False)
        await self._runner.setup()
        http = split_listen(self.http_listen)
        site = web.TCPSite(self._runner, http.host, http.port, ssl_context=tls[0] if tls else None)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise SetupError(f"cannot listen on {self.http_listen} (OTLP/HTTP): {exc.strerror}; "
                             "change listeners.otlp_http or stop what holds the port") from None
        self.ports["http"] = site._server.sockets[0].getsockname()[1]
        self._grpc = build_server(self.intake, p.max_body_bytes)
        try:
            if tls:
                bound = self._grpc.add_secure_port(self.grpc_listen, tls[1])
            else:
                bound = self._grpc.add_insecure_port(self.grpc_listen)
        except RuntimeError as exc:
            await self.stop()
            raise SetupError(f"cannot listen on {self.grpc_listen} (OTLP/gRPC): {exc}") from None
        await self._grpc.start()
        self.ports["grpc"] = bound
        return self.ports

    async def stop(self) -> None:
        """Flush first, while the listeners still answer: requests in flight get their 200 (stored) and
        new ones a 503 (retry elsewhere), so nothing is stored and then re-sent by a client who never heard."""
        await asyncio.get_running_loop().run_in_executor(None, self.writer.stop)
        if self._grpc is not None:
            await self._grpc.stop(grace=2)
        if self._runner is not None:
            await self._runner.cleanup()


def _read_secret(path: str | None) -> str | None:
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise SetupError(f"pipeline.auth_token_file {path!r}: {exc.strerror}") from None
    if not token:
        raise SetupError(f"pipeline.auth_token_file {path!r} is empty")
    return token


def _tls(cert: str | None, key: str | None):
    if not cert and not key:
        return None
    if not (cert and key):
        raise SetupError("TLS needs both pipeline.tls_cert_file and pipeline.tls_key_file")
    import grpc

    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        credentials = grpc.ssl_server_credentials([(Path(key).read_bytes(), Path(cert).read_bytes())])
    except (OSError, ssl.SSLError) as exc:
        raise SetupError(f"TLS files {cert!r}, {key!r}: {exc}") from None
    return context, credentials


class ReceiverThread:
    """A receiver in a background thread with its own event loop (tests, ``infersight up``)."""

    def __init__(self, receiver: Receiver):
        self.receiver = receiver
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="infersight-receiver", daemon=True)

    def start(self) -> ReceiverThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.receiver.start(), self.loop).result(timeout=30)
        return self

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.receiver.ports['http']}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.receiver.ports['grpc']}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.receiver.stop(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if self._thread.is_alive():
            return
        # A connection still discarding the rest of a refused body outlives the listeners' shutdown: end it
        # here, or it is destroyed pending when the process exits ("Task was destroyed but it is pending!").
        leftover = asyncio.all_tasks(self.loop)
        for task in leftover:
            task.cancel()
        if leftover:
            self.loop.run_until_complete(asyncio.wait(leftover, timeout=5))
        self.loop.close()


async def serve_forever(receiver: Receiver, ports_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, then flush the queue (to ClickHouse or the spool) and exit."""
    import signal

    ports = await receiver.start()
    if ports_file:  # written whole then renamed: a reader never sees it half-written
        tmp = Path(f"{ports_file}.tmp")
        tmp.write_text(json.dumps(ports))
        tmp.replace(ports_file)
    print(f"infersight receive: OTLP/HTTP on {split_listen(receiver.http_listen).with_port(ports['http'])} "
          f"(/v1/traces, /metrics), OTLP/gRPC on {split_listen(receiver.grpc_listen).with_port(ports['grpc'])}, "
          f"into {receiver.sink.dsn}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await receiver.stop()
