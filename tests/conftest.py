"""Shared fixtures: real components (promtool, Prometheus, Alertmanager) and the fixture folder.

A test that needs a real component calls :func:`require_tool`. On a developer's laptop without
it the test skips; under ``CI=true`` it fails, so a green CI run never hides a missing install.

Such a test carries the ``real`` marker: tests using a real-component fixture (:data:`REAL_FIXTURES`)
get it here, the others say ``@pytest.mark.real`` themselves. ``make test-fast`` runs the rest
(``-m "not real"``) with ``INFERSIGHT_TEST_FAST=1``, under which :func:`require_tool` and
:func:`require_chdb` fail: a real test left unmarked shows up at once instead of slowing the lane.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
FAST_LANE = os.environ.get("INFERSIGHT_TEST_FAST", "").lower() in ("1", "true", "yes")
# Fixtures that start a real component: a test that uses one is marked `real`.
REAL_FIXTURES = frozenset({"prometheus_server", "clickhouse_server", "clickhouse_database", "clickhouse_schema",
                           "clickhouse_private_server", "vllm", "vllm_session"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if REAL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real)


def _not_in_the_fast_lane(component: str) -> None:
    if FAST_LANE:
        pytest.fail(f"this test needs {component}: mark it @pytest.mark.real (make test-fast runs only the others)")


def require_tool(name: str) -> str:
    """Path of the executable ``name``; skip locally, fail under CI when it is missing."""
    _not_in_the_fast_lane(name)
    path = shutil.which(name)
    if path is None:
        message = (f"{name} not found on PATH (Debian: apt-get install --no-install-recommends "
                   "prometheus prometheus-alertmanager)")
        if IN_CI:
            pytest.fail(message + " -- CI must install it")
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 20.0, expect: bytes | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                body = resp.read()
                if expect is None or expect in body:
                    return
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s: {last}")


class PrometheusServer:
    """A real Prometheus on 127.0.0.1 scraping the given targets every second."""

    def __init__(self, targets: list[str], rule_files: list[str] | None = None, scrape_interval: str = "1s"):
        self.binary = require_tool("prometheus")
        self.dir = Path(tempfile.mkdtemp(prefix="infersight-prom-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": rule_files or [],
            "scrape_configs": [{"job_name": "infersight", "honor_labels": True,
                                "static_configs": [{"targets": targets}]}],
        }
        (self.dir / "prometheus.yml").write_text(json.dumps(config))
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "prometheus.log", "wb"),
        )
        wait_http(self.url + "/-/ready", expect=b"Ready")

    def query(self, promql: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, promql: str, timeout: float = 20.0) -> list[dict]:
        """Poll until the query returns at least one series."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"no result for {promql!r} after {timeout}s; log: {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.dir / "prometheus.log").read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def prometheus_server():
    """Factory: ``prometheus_server(["127.0.0.1:9835"])`` starts a real Prometheus; stopped after the test."""
    started: list[PrometheusServer] = []

    def start(targets: list[str], **kwargs) -> PrometheusServer:
        server = PrometheusServer(targets, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# --- ClickHouse: a real HTTP server from chdb-core (pipelines/clickhouse_server.py) -------------------

def require_chdb() -> None:
    """Skip locally, fail under CI, when chdb-core (the embedded ClickHouse) is not installed."""
    _not_in_the_fast_lane("ClickHouse")
    try:
        import chdb._chdb  # noqa: F401
    except ImportError as exc:
        message = f"chdb-core is not importable ({exc}); pip install -e '.[test]'"
        if IN_CI:
            pytest.fail(message + " -- CI must install it")
        pytest.skip(message)


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory):
    """The session's shared ClickHouse server (a started ``ClickHouseServer``), on 127.0.0.1 and a free port.

    Attributes: ``url`` (http://127.0.0.1:PORT), ``host``, ``port``, ``data_dir``; ``client(database)`` returns
    a clickhouse-connect client over HTTP (as the writer; ``role="reader"``: the reader), ``dsn(database, role)``
    a DSN with the role's user and password file. Share it through :func:`clickhouse_database` (a fresh
    database per test); do not stop it -- fault tests use :func:`clickhouse_private_server` instead.
    """
    require_chdb()
    from infersight.pipelines.clickhouse_server import ClickHouseServer

    server = ClickHouseServer(tmp_path_factory.mktemp("clickhouse")).start()
    yield server
    server.stop()


@pytest.fixture
def clickhouse_database(clickhouse_server, request):
    """Name of a fresh, empty database on the shared server, dropped after the test.

    Connect with ``clickhouse_server.client(clickhouse_database)`` or the DSN
    ``clickhouse_server.dsn(clickhouse_database)`` (the writer; ``dsn(db, "reader")`` for the reader).
    """
    # Only [A-Za-z0-9_]: test ids of parametrized tests can hold any character.
    name = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in f"t_{request.node.name}"[:40])
    name = f"{name}_{os.getpid()}_{int(time.monotonic_ns() % 1_000_000)}"
    admin = clickhouse_server.client()
    admin.command(f"CREATE DATABASE `{name}`")
    yield name
    admin.command(f"DROP DATABASE IF EXISTS `{name}` SYNC")
    admin.close()


@pytest.fixture
def clickhouse_schema(clickhouse_server, clickhouse_database):
    """Name of a fresh database on the shared server with the full infersight schema migrated into it."""
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    migrations.migrate(clickhouse_server.client(), SchemaOptions(database=clickhouse_database))
    return clickhouse_database


@pytest.fixture
def clickhouse_private_server(tmp_path):
    """Factory for fault tests: ``server = clickhouse_private_server()`` starts a dedicated ClickHouse.

    The test owns it: ``server.stop()`` (SIGTERM), ``server.kill()`` (SIGKILL) and ``server.start()`` again
    reopen the same data folder (``server.data_dir``) on the same port, so clients keep their URL.
    ``server.running`` tells whether it is up; ``server.log()`` shows its stderr. Stopped after the test.
    """
    require_chdb()
    from infersight.pipelines.clickhouse_server import ClickHouseServer

    started = []

    def start(port: int = 0):
        server = ClickHouseServer(tmp_path / f"clickhouse-{len(started)}", port=port).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
