"""Faults: ClickHouse stops mid-stream; the receiver is SIGKILLed with acknowledged spans in its spool.

The promise under test: every span whose request was answered 200 / OK is in ClickHouse exactly
once (counted by SpanId) after the fault is over.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import yaml

from tests.pipelines.receiver_payloads import metric, migrate, post, request, span_ids, start_receiver

DB = "faults"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
FAST_RETRIES = {"batch_seconds": 0.2, "insert_attempts": 2, "retry_initial_seconds": 0.05, "retry_max_seconds": 0.3}


def stored_counts(server) -> dict[str, int]:
    client = server.client(DB)
    try:
        return dict(client.query("SELECT SpanId, count() FROM otel_traces GROUP BY SpanId").result_rows)
    finally:
        client.close()


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def send(handle_http: str, grpc_target: str, n: int, acked: set[str]) -> int:
    """Send n requests alternating HTTP and gRPC; remember the span ids of those acknowledged."""
    refused = 0
    with grpc.insecure_channel(grpc_target) as channel:
        export = channel.unary_unary(EXPORT)
        for i in range(n):
            req = request(spans=25)
            body = req.SerializeToString()
            if i % 2:
                ok = post(handle_http + "/v1/traces", body)[0] == 200
            else:
                try:
                    export(body, timeout=30)
                    ok = True
                except grpc.RpcError:
                    ok = False
            if ok:
                acked |= span_ids(req)
            else:
                refused += 1
    return refused


def test_clickhouse_stops_mid_stream_and_every_acknowledged_span_lands_once(clickhouse_private_server, tmp_path):
    server = clickhouse_private_server()
    migrate(server, DB)
    handle = start_receiver(server.dsn(DB), tmp_path / "spool", **FAST_RETRIES)
    acked: set[str] = set()
    try:
        send(handle.http_url, handle.grpc_target, 10, acked)
        server.stop()  # ClickHouse goes away mid-stream
        refused = send(handle.http_url, handle.grpc_target, 10, acked)
        assert refused == 0  # acknowledged from the spool
        assert handle.receiver.spool.batches > 0
        server.start()  # same data folder, same port
        send(handle.http_url, handle.grpc_target, 10, acked)
        wait_until(lambda: handle.receiver.spool.batches == 0, 60, "the spool to drain")
        wait_until(lambda: handle.receiver.writer.pending_spans == 0, 30, "the queue to drain")
        text = urllib.request.urlopen(handle.http_url + "/metrics").read().decode()
    finally:
        handle.stop()
    counts = stored_counts(server)
    assert len(acked) == 30 * 25
    assert acked <= set(counts), f"{len(acked - set(counts))} acknowledged spans missing"
    assert max(counts.values()) == 1, "a span was stored twice"
    assert metric(text, "infersight_pipeline_spooled_batches_total") > 0
    assert metric(text, "infersight_pipeline_replayed_batches_total") > 0
    assert metric(text, "infersight_pipeline_insert_retries_total") > 0
    assert metric(text, "infersight_pipeline_spool_batches") == 0


def start_receiver_process(dsn: str, spool_dir, tmp_path) -> tuple[subprocess.Popen, dict]:
    config = tmp_path / "infersight.yaml"
    config.write_text(yaml.safe_dump({"pipeline": FAST_RETRIES}))
    ports_file = tmp_path / "ports.json"
    ports_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "infersight", "--config", str(config), "receive", "--dsn", dsn,
         "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(spool_dir),
         "--ports-file", str(ports_file)],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "receiver.log", "ab"))
    wait_until(lambda: ports_file.exists() or proc.poll() is not None, 30, "the receiver to listen")
    assert proc.poll() is None, (tmp_path / "receiver.log").read_text()[-2000:]
    return proc, json.loads(ports_file.read_text())


def test_sigkill_with_acknowledged_spans_in_the_spool_loses_and_doubles_nothing(clickhouse_private_server, tmp_path):
    server = clickhouse_private_server()
    migrate(server, DB)
    server.stop()  # ClickHouse down: everything acknowledged now is acknowledged from the spool
    spool_dir = tmp_path / "spool"
    proc, ports = start_receiver_process(server.dsn(DB), spool_dir, tmp_path)
    acked: set[str] = set()
    try:
        assert send(f"http://127.0.0.1:{ports['http']}", f"127.0.0.1:{ports['grpc']}", 8, acked) == 0
    finally:
        proc.send_signal(signal.SIGKILL)  # no flush, no goodbye
        proc.wait(10)
    spooled = sorted(spool_dir.glob("*.batch"))
    assert spooled, "acknowledged spans must be in the spool"
    keep = tmp_path / "copy-of-first-batch"
    shutil.copy(spooled[0], keep)

    server.start()
    proc, ports = start_receiver_process(server.dsn(DB), spool_dir, tmp_path)
    try:
        wait_until(lambda: not list(spool_dir.glob("*.batch")), 60, "the restarted receiver to replay the spool")
        counts = stored_counts(server)
        assert acked <= set(counts) and len(acked) == 8 * 25
        assert max(counts.values()) == 1
        # the same batch replayed again (as after a crash between insert and unlink) is stored once
        shutil.copy(keep, spool_dir / "9999999999999999.batch")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
    proc, ports = start_receiver_process(server.dsn(DB), spool_dir, tmp_path)
    try:
        wait_until(lambda: not list(spool_dir.glob("*.batch")), 60, "the replay of the copied batch")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    counts = stored_counts(server)
    assert len(counts) == len(acked) and max(counts.values()) == 1


def test_a_full_spool_refuses_instead_of_acknowledging(clickhouse_private_server, tmp_path):
    """ClickHouse down and the spool at its bound: 503 + Retry-After (the client keeps the data), never a 200."""
    server = clickhouse_private_server()
    migrate(server, DB)
    server.stop()
    handle = start_receiver(server.dsn(DB), tmp_path / "spool", spool_max_bytes=6000, **FAST_RETRIES)
    try:
        url = handle.http_url + "/v1/traces"
        assert post(url, request(spans=10).SerializeToString())[0] == 200  # fits: acknowledged from the spool
        status, headers, _ = post(url, request(spans=200).SerializeToString())  # ~12 kB: over the bound
        assert status == 503 and int(headers["Retry-After"]) >= 1
        assert handle.receiver.spool.batches == 1
        text = urllib.request.urlopen(handle.http_url + "/metrics").read().decode()
        assert metric(text, "infersight_pipeline_spans_rejected_total", reason="unavailable") == 200
        assert metric(text, "infersight_pipeline_spool_bytes") > 0
    finally:
        handle.stop()
