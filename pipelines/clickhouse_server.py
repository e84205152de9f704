"""A real ClickHouse HTTP server on one machine, without Docker: clickhouse-local from chdb-core.

chdb-core ships clickhouse-local as a Python extension, and clickhouse-local can open ClickHouse's
own HTTP listener. A dedicated child process runs (see DESIGN.md section 6)::

    SYSTEM START LISTEN HTTP;                       -- port from config.xml in the working folder
    SELECT getServerPort('http_port') INTO OUTFILE  -- port 0 picks a free one; this tells which
    SELECT sleepEachRow(1) FROM system.numbers ...  -- a query that never ends keeps it listening

through the *private* ``chdb._chdb.query(sql, "TabSeparated", path=DATA_DIR)`` entry point, which is
why chdb-core is pinned exactly in pyproject.toml and a smoke test guards it. The output format
must be TabSeparated, or clickhouse-connect's handshake fails. One listener per process; SIGTERM
stops it. Clients (receiver, CLI, Grafana) talk to it over HTTP exactly as to a production server.

Usage::

    server = ClickHouseServer("/var/lib/infersight/clickhouse").start()
    client = server.client()          # clickhouse-connect over HTTP
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
LOG_FILE = "clickhouse.log"


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
        self.data_dir.mkdir(parents=True, exist_ok=True)
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

    def client(self, database: str = "default", **kwargs: Any):
        """A clickhouse-connect client over HTTP to this server."""
        import clickhouse_connect

        return clickhouse_connect.get_client(host=self.host, port=self.port, database=database, **kwargs)

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


def serve(data_dir: str, run_dir: str, host: str, port: int) -> None:
    """The child process: open the listener and block forever inside clickhouse-local."""
    from chdb import _chdb  # private entry point of chdb-core; pinned in pyproject.toml

    os.chdir(run_dir)
    Path("config.xml").write_text(
        f"<clickhouse><listen_host>{host}</listen_host><http_port>{port}</http_port></clickhouse>\n")
    _chdb.query(
        "SYSTEM START LISTEN HTTP; "
        f"SELECT getServerPort('http_port') INTO OUTFILE '{PORT_FILE}' TRUNCATE FORMAT TabSeparated; "
        "SELECT sleepEachRow(1) FROM system.numbers FORMAT Null SETTINGS max_block_size = 1",
        "TabSeparated", path=data_dir)


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
