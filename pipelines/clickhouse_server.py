"""A real ClickHouse HTTP server on one machine, without Docker: clickhouse-local from chdb-core.

chdb-core ships clickhouse-local as a Python extension, and clickhouse-local can open ClickHouse's
own HTTP listener. A dedicated child process runs (see DESIGN 6)::

    SYSTEM START LISTEN HTTP;                       -- port from config.xml in the working folder
    SELECT getServerPort('http_port') INTO OUTFILE  -- port 0 picks a free one; this tells which
    SELECT sleepEachRow(1) FROM system.numbers ...  -- a query that never ends keeps it listening

through the *private* ``chdb._chdb.query(sql, "TabSeparated", path=DATA_DIR)`` entry point, which is
why chdb-core is pinned exactly in pyproject.toml and a smoke test guards it. The output format
must be TabSeparated, or clickhouse-connect's handshake fails. One listener per process; SIGTERM
stops it. Clients (receiver, CLI, Grafana) talk to it over HTTP exactly as to a production server.

Security (DESIGN 11): the listener is private (127.0.0.1, a port of its own, queries only
with a per-start secret); the public endpoint is the gate of :mod:`infersight.pipelines.clickhouse_gate`
in the same process, which admits only the writer and the reader of
:mod:`infersight.pipelines.clickhouse_users` (passwords in ``DATA_DIR/credentials.json``, 0600).

Usage::

    server = ClickHouseServer("/var/lib/infersight/clickhouse").start()
    client = server.client()          # clickhouse-connect over HTTP, as the writer
    reader = server.client(role="reader")
    server.dsn("default", "reader")   # a DSN naming the reader and its password file
    server.stop()                     # SIGTERM; start() again reopens the same data on the same port
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PORT_FILE = "http_port.txt"
INTERNAL_PORT_FILE = "internal_port.txt"
LOG_FILE = "clickhouse.log"
UNCOMPRESSED_CACHE_BYTES = 256 << 20


class ClickHouseServerError(RuntimeError):
    """The embedded server did not start (the message carries the tail of its log)."""


class ClickHouseServer:
    """One clickhouse-local process serving HTTP on ``host:port`` over the data folder ``data_dir``.

    ``port=0`` picks a free port at the first start; later starts reuse that port so that clients
    holding the URL (a receiver in a fault test) reconnect to the same address.
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0, host: str = "127.0.0.1",
                 startup_timeout: float = 60.0):
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.run_dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.credentials = None  # clickhouse_users.Credentials, once started

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> ClickHouseServer:
        """Start the child process and wait until ``GET /ping`` answers ``Ok.``."""
        if self.running:
            return self
        from infersight.pipelines import clickhouse_users

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.credentials = clickhouse_users.ensure(self.data_dir)
        adopt_default_database(self.data_dir)
        # clickhouse-local reads config.xml from its working folder: a fresh one per start, so a
        # stale port file or config from an earlier run can never be mistaken for this one.
        self.run_dir = Path(tempfile.mkdtemp(prefix="infersight-clickhouse-"))
        command = [sys.executable, "-m", "infersight.pipelines.clickhouse_server", "--data-dir", str(self.data_dir),
                   "--run-dir", str(self.run_dir), "--host", self.host, "--port", str(self.port)]
        with open(self.run_dir / LOG_FILE, "wb") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # a Ctrl-C in a terminal goes to the parent only
        try:
            self.port = self._wait_for_port()
            self._wait_for_ping()
        except ClickHouseServerError:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._cleanup()

    def log(self) -> str:
        """What the server wrote to stderr (errors only reach stderr)."""
        if self.run_dir is None or not (self.run_dir / LOG_FILE).exists():
            return ""
        return (self.run_dir / LOG_FILE).read_text(errors="replace")

    def client(self, database: str = "default", role: str = "writer", **kwargs: Any):
        """A clickhouse-connect client over HTTP to this server, as ``role`` (writer or reader)."""
        import clickhouse_connect

        from infersight.pipelines.schema.connection import CLIENT_DEFAULTS

        who = self.credentials.role(role)
        return clickhouse_connect.get_client(host=self.host, port=self.port, database=database,
                                             username=who.user, password=who.password, **{**CLIENT_DEFAULTS, **kwargs})

    def dsn(self, database: str = "default", role: str = "writer") -> str:
        """A DSN for ``role`` on ``database``: its user, and the credentials file as its password_file."""
        from infersight.dsn import Dsn

        who = self.credentials.role(role)
        return str(Dsn("http", database=database, host=self.host, port=self.port, user=who.user,
                       password_file=str(self.credentials.path)))

    def __enter__(self) -> ClickHouseServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_for_port(self) -> int:
        port_file = self.run_dir / PORT_FILE
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text.isdigit():
                return int(text)
            if self.proc.poll() is not None:
                raise ClickHouseServerError(self._failure(f"exited with code {self.proc.returncode}"))
            time.sleep(0.05)
        raise ClickHouseServerError(self._failure(f"no port after {self.startup_timeout}s"))

    def _wait_for_ping(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ClickHouseServerError(self._failure(f"exited with code {self.proc.returncode}"))
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=2) as resp:
                    if resp.read().strip() == b"Ok.":
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise ClickHouseServerError(self._failure(f"/ping not answering after {self.startup_timeout}s"))

    def _failure(self, what: str) -> str:
        return f"embedded ClickHouse on {self.data_dir} {what}; its log ends:\n{self.log()[-2000:]}"

    def _cleanup(self) -> None:
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None


def adopt_default_database(data_dir: Path) -> None:
    """Give a ``default`` database made by clickhouse-local (an overlay, no metadata file) a metadata file.

    Our listener moves clickhouse-local's file-mapping overlay to another database name (see
    ``_config_xml``), so ``default`` is loaded like any other database: from ``metadata/default.sql``,
    which clickhouse-local never writes for its own default. Without it, a folder written by the
    in-process engine or by an older infersight would open with an empty ``default``.
    """
    link = data_dir / "metadata" / "default"
    sql = data_dir / "metadata" / "default.sql"
    if sql.exists() or not link.is_symlink():
        return
    uuid = Path(os.readlink(link)).name
    if len(uuid) == 36:
        sql.write_text(f"ATTACH DATABASE _ UUID '{uuid}'\nENGINE = Atomic\n")


def serve(data_dir: str, run_dir: str, host: str, port: int) -> None:
    """The child process: the private clickhouse-local listener in a thread, the gate in front of it."""
    import asyncio
    import secrets
    import threading

    from chdb import _chdb  # private entry point of chdb-core; pinned in pyproject.toml

    from infersight.pipelines import clickhouse_gate, clickhouse_users

    owner = os.getppid()  # the ClickHouseServer that started us: we stop when it is gone
    credentials = clickhouse_users.load(data_dir)
    if credentials is None:
        raise SystemExit(f"no credentials in {data_dir}; start the server through ClickHouseServer")
    secret = secrets.token_urlsafe(32)
    os.chdir(run_dir)  # mkdtemp: mode 0700, so the secret in config.xml stays the owner's
    Path("users.xml").write_text(clickhouse_users.users_xml(credentials))
    Path("config.xml").write_text(_config_xml(credentials, secret))

    def listen() -> None:
        try:
            _chdb.query(
                "CREATE DATABASE IF NOT EXISTS default ENGINE = Atomic; SYSTEM START LISTEN HTTP; "
                f"SELECT getServerPort('http_port') INTO OUTFILE '{INTERNAL_PORT_FILE}' TRUNCATE FORMAT TabSeparated; "
                "SELECT sleepEachRow(1) FROM system.numbers FORMAT Null SETTINGS max_block_size = 1",
                "TabSeparated", path=data_dir)
        except Exception as exc:  # noqa: BLE001 - reported on stderr, which the parent shows
            print(f"clickhouse-local stopped: {exc}", file=sys.stderr, flush=True)
        os._exit(3)  # the listener is gone: the gate must not outlive it

    threading.Thread(target=listen, name="clickhouse-local", daemon=True).start()
    internal = _wait_internal_port(Path(INTERNAL_PORT_FILE))

    async def run() -> None:
        gate = clickhouse_gate.Gate(credentials, f"http://127.0.0.1:{internal}", secret)
        _runner, bound = await clickhouse_gate.serve(gate, host, port)
        Path(PORT_FILE + ".tmp").write_text(str(bound))
        os.replace(PORT_FILE + ".tmp", PORT_FILE)
        await _until_orphaned(owner)
        # The owner died without stopping us (SIGKILL, the OOM killer): exit as stop() would have made us,
        # so the data folder is free for the next start instead of held by a server nobody knows of.
        print(f"clickhouse server: owner process {owner} is gone; stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    asyncio.run(run())


async def _until_orphaned(owner: int, every: float = 0.5) -> None:
    """Return once this process's parent is no longer ``owner`` (it died and the process was re-parented)."""
    import asyncio

    while os.getppid() == owner:
        await asyncio.sleep(every)


def _config_xml(credentials, secret: str) -> str:
    """clickhouse-local's config: loopback only, users.xml, and handlers that answer only the gate."""
    import base64

    prefixes = "|".join(base64.b64encode(f"{r.user}:".encode()).decode() for r in (credentials.writer,
                                                                                    credentials.reader))
    # Basic credentials of our roles only (a user name of 17 characters plus ':' is 24 fixed base64 characters).
    return f"""<clickhouse>
  <listen_host>127.0.0.1</listen_host>
  <http_port>0</http_port>
  <!-- clickhouse-local makes its default database an overlay that maps unknown table names to files
       (and so asks for the FILE grant on every lookup): keep that overlay away from the data. -->
  <default_database>infersight_local_files</default_database>
  <!-- Decompressed blocks kept for point reads (clickhouse_users.POINT_READ_SETTINGS); 0 in clickhouse-local. -->
  <uncompressed_cache_size>{UNCOMPRESSED_CACHE_BYTES}</uncompressed_cache_size>
  <user_directories><users_xml><path>users.xml</path></users_xml></user_directories>
  <http_handlers>
    <rule><url>/ping</url><methods>GET,HEAD</methods>
      <handler><type>static</type><status>200</status><response_content>Ok.
</response_content></handler></rule>
    <rule>
      <headers>
        <X-Infersight-Gate>{secret}</X-Infersight-Gate>
        <Authorization>regex:Basic ({prefixes}).*</Authorization>
      </headers>
      <handler><type>dynamic_query_handler</type><query_param_name>query</query_param_name></handler>
    </rule>
    <rule><handler><type>static</type><status>401</status>
      <response_content>Code: 516. DB::Exception: connect through the infersight gate. (AUTHENTICATION_FAILED)
</response_content></handler></rule>
  </http_handlers>
</clickhouse>
"""


def _wait_internal_port(port_file: Path, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = port_file.read_text().strip() if port_file.exists() else ""
        if text.isdigit():
            port = int(text)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as resp:
                    if resp.read().strip() == b"Ok.":
                        return port
            except (urllib.error.URLError, OSError):
                pass
        time.sleep(0.05)
    raise SystemExit(f"clickhouse-local did not open its listener within {timeout}s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve ClickHouse HTTP from chdb-core (used by ClickHouseServer).")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.data_dir, args.run_dir, args.host, args.port)


if __name__ == "__main__":
    main()
