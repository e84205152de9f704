"""The embedded ClickHouse serves concurrent queries at the same time, through the gate.

The receiver's insert threads (pipeline.insert_threads) only use a second core if the chdb-core
HTTP listener runs two inserts at once. Proven by events, not durations: while insert A still runs
(a slow SELECT feeds it), insert B writes what system.processes shows about A. A server that ran
one query at a time would start B only after A ended, and B would find A gone.
"""

from __future__ import annotations

import threading
import uuid


def test_two_inserts_run_at_the_same_time(clickhouse_server, clickhouse_database):
    client = clickhouse_server.client(clickhouse_database, send_receive_timeout=120)
    client.command("CREATE TABLE slow (n UInt64) ENGINE = MergeTree ORDER BY n")
    client.command("CREATE TABLE seen (running UInt64, mine UInt64) ENGINE = MergeTree ORDER BY running")
    slow_id = f"slow-{uuid.uuid4()}"
    # ~12 s at most: one row per block, each block asleep 0.2 s; long enough to be seen under load.
    slow_sql = ("INSERT INTO slow SELECT number FROM numbers(60) WHERE sleepEachRow(0.2) = 0 "
                "SETTINGS max_block_size = 1, max_threads = 1")
    errors: list[BaseException] = []

    def slow_insert() -> None:
        try:
            clickhouse_server.client(clickhouse_database, send_receive_timeout=120).command(
                slow_sql, settings={"query_id": slow_id})
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    worker = threading.Thread(target=slow_insert)
    worker.start()
    try:
        for _ in range(600):
            running = client.query("SELECT count() FROM system.processes WHERE query_id = {q:String}",
                                   parameters={"q": slow_id}).result_rows[0][0]
            if running or not worker.is_alive():
                break
        assert running, f"the slow insert never showed in system.processes ({errors})"
        client.command(
            "INSERT INTO seen SELECT countIf(query_id = {q:String}), countIf(query_id = queryID()) "
            "FROM system.processes", parameters={"q": slow_id})
    finally:
        worker.join(timeout=120)
    assert not errors and not worker.is_alive()
    # B ran while A was still running (and B saw itself: the view is of running queries).
    assert client.query("SELECT running, mine FROM seen").result_rows == [(1, 1)]
    assert client.query("SELECT count() FROM slow").result_rows == [(60,)]
