"""Smoke tests of the embedded ClickHouse server: chdb-core's private entry point, over real HTTP."""

from __future__ import annotations

import urllib.request

import pytest

from infersight.pipelines.clickhouse_server import ClickHouseServer, ClickHouseServerError


def test_serves_http_with_server_side_parameters(clickhouse_server, clickhouse_database):
    with urllib.request.urlopen(f"{clickhouse_server.url}/ping", timeout=5) as resp:
        assert resp.read() == b"Ok.\n"
    client = clickhouse_server.client(clickhouse_database)
    client.command("CREATE TABLE t (x UInt32, s String) ENGINE = MergeTree ORDER BY x")
    client.insert("t", [[1, "a"], [2, "b'; DROP TABLE t; --"]], column_names=["x", "s"])
    rows = client.query("SELECT x FROM t WHERE s = {s:String}", parameters={"s": "b'; DROP TABLE t; --"}).result_rows
    assert rows == [(2,)]
    assert client.query("SELECT count() FROM t").result_rows == [(2,)]


def test_stop_and_start_keep_data_and_port(clickhouse_private_server):
    server = clickhouse_private_server()
    port = server.port
    server.client().command("CREATE TABLE kept (x UInt64) ENGINE = MergeTree ORDER BY x")
    server.client().insert("kept", [[7], [8]], column_names=["x"])

    server.stop()
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{server.url}/ping", timeout=2)

    server.start()
    assert server.port == port
    assert server.client().query("SELECT sum(x) FROM kept").result_rows == [(15,)]

    server.kill()  # a crash must not lose what was inserted before it
    server.start()
    assert server.client().query("SELECT sum(x) FROM kept").result_rows == [(15,)]


def test_second_server_on_same_folder_fails_clearly(clickhouse_private_server):
    first = clickhouse_private_server()
    with pytest.raises(ClickHouseServerError, match="Another server instance"):
        ClickHouseServer(first.data_dir, startup_timeout=20).start()
    assert first.client().query("SELECT 1").result_rows == [(1,)]  # the first one is unharmed


@pytest.mark.parametrize("role", ["writer", "reader"])
def test_point_reads_keep_decompressed_blocks(clickhouse_server, clickhouse_database, role):
    """Both roles read through the uncompressed cache (clickhouse-local has none by default): the second
    read of the same granule is served from it."""
    writer = clickhouse_server.client(clickhouse_database)
    writer.command("CREATE TABLE t (k UInt32, s String) ENGINE = MergeTree ORDER BY k")
    writer.command("INSERT INTO t SELECT number, repeat(toString(number), 50) FROM numbers(100000)")
    client = clickhouse_server.client(clickhouse_database, role=role)
    assert client.query("SELECT getSetting('use_uncompressed_cache')").result_rows == [(True,)]
    read = "SELECT s FROM t WHERE k = 4242"
    assert client.query(read).result_rows == [("4242" * 50,)]
    hits = "SELECT sum(value) FROM system.events WHERE event = 'UncompressedCacheHits'"
    before = writer.query(hits).result_rows[0][0]
    assert client.query(read).result_rows == [("4242" * 50,)]
    assert writer.query(hits).result_rows[0][0] > before  # (the suite runs one test at a time)


def _exited(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (in a container, PID 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_server_stops_when_its_owner_dies_without_stopping_it(tmp_path):
    """An owner killed by SIGKILL (or the OOM killer) runs no cleanup: the server notices it was orphaned
    and stops, so the data folder can be opened again instead of being held by a server nobody knows of."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import require_chdb

    require_chdb()
    data, pid_file = tmp_path / "clickhouse", tmp_path / "server.pid"
    owner = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path\n"
        "from infersight.pipelines.clickhouse_server import ClickHouseServer\n"
        f"server = ClickHouseServer({str(data)!r}).start()\n"
        f"Path({str(pid_file)!r}).write_text(str(server.proc.pid))\n"
        "time.sleep(600)\n")])
    try:
        deadline = time.monotonic() + 90
        while not pid_file.exists():
            assert owner.poll() is None and time.monotonic() < deadline, "the owner did not start its server"
            time.sleep(0.1)
        server_pid = int(pid_file.read_text())
        assert not _exited(server_pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 15
        while not _exited(server_pid):
            assert time.monotonic() < deadline, "the orphaned server is still running"
            time.sleep(0.1)
    finally:
        if owner.poll() is None:
            owner.kill()
        if pid_file.exists() and not _exited(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    again = ClickHouseServer(data, startup_timeout=30).start()  # the folder is free
    try:
        assert again.client().query("SELECT 1").result_rows == [(1,)]
    finally:
        again.stop()
