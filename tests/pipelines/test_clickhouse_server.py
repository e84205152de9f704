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
