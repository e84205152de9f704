"""The batching writer against a real ClickHouse: batch limits, deduplication, backpressure, refusals."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from infersight.pipelines.receiver.http_server import ARRIVING
from infersight.pipelines.receiver.ingest_sql import frame
from infersight.pipelines.receiver.metrics import PipelineMetrics
from infersight.pipelines.receiver.sink import ClickHouseSink
from infersight.pipelines.receiver.spool import Spool
from infersight.pipelines.receiver.writer import QueueFull, Refused, Writer, WriterOptions, batch_token
from tests.pipelines.receiver_payloads import metric, migrate, post, request, start_receiver


@pytest.fixture
def dsn(clickhouse_server, clickhouse_database):
    migrate(clickhouse_server, clickhouse_database)
    return clickhouse_server.dsn(clickhouse_database)


@pytest.fixture
def ch(clickhouse_server, clickhouse_database):
    client = clickhouse_server.client(clickhouse_database)
    yield client
    client.close()


def make_writer(dsn, tmp_path, **options) -> Writer:
    return Writer(ClickHouseSink(dsn), Spool(tmp_path / "spool", 10**8), WriterOptions(**options), PipelineMetrics())


def queue_one(handle, spans: int) -> tuple[threading.Thread, dict]:
    """POST one request of ``spans`` spans from a thread and return once the receiver has queued it; the
    dict gets its answer's status."""
    url, first = handle.http_url + "/v1/traces", {}
    waiting = threading.Thread(target=lambda: first.update(status=post(url, request(spans).SerializeToString())[0]))
    waiting.start()
    deadline = time.monotonic() + 20
    while handle.receiver.writer.pending_spans < spans:
        assert time.monotonic() < deadline and waiting.is_alive(), first
        waiting.join(0.01)
    return waiting, first


def count(ch, table: str = "otel_traces") -> int:
    return ch.query(f"SELECT count() FROM {table}").result_rows[0][0]


def test_batches_close_at_batch_rows_and_on_time(dsn, ch, tmp_path):
    writer = make_writer(dsn, tmp_path, batch_rows=100, batch_seconds=0.5).start()
    try:
        futures = [writer.submit(request(spans=40).SerializeToString(), 40) for _ in range(5)]
        for future in futures:
            future.result(timeout=30)
    finally:
        writer.stop()
    assert count(ch) == 200
    # 40+40 fill a batch (a third would pass 100 rows), twice; the last 40 leave on the timer
    histogram = writer.metrics.batch_rows
    assert histogram._sum.get() == 200
    assert sum(b.get() for b in histogram._buckets) == 3
    assert writer.pending_spans == 0 and writer.metrics.queue_depth._value.get() == 0


def test_a_retried_batch_is_stored_once_in_the_table_and_its_views(dsn, ch):
    sink = ClickHouseSink(dsn)
    req = request(spans=20, attributes={"llm.request.outcome": "success", "gen_ai.usage.output_tokens": 3,
                                        "llm.ttft_ms": 5.0}, tokens=4)
    framed = frame([req.SerializeToString()])
    token = batch_token(framed)
    for _ in range(3):  # e.g. the answer was lost twice; the writer sends the same batch again
        sink.insert(framed, token)
    assert count(ch) == 20
    assert count(ch, "llm_token_events") == 80
    assert ch.query("SELECT sum(Requests) FROM llm_requests_1m").result_rows[0][0] == 20
    created = dict(ch.query("SELECT name, create_table_query FROM system.tables WHERE database = currentDatabase()")
                   .result_rows)
    assert "non_replicated_deduplication_window" in created["otel_traces"]
    # a different batch with the same spans in another grouping is a new insert
    sink.insert(frame([req.SerializeToString(), request(spans=1).SerializeToString()]), "another-token")
    assert count(ch) == 41
    sink.close()


def test_a_refused_request_fails_alone_and_its_batch_mates_are_stored(dsn, ch, tmp_path):
    ch.command("ALTER TABLE otel_traces ADD CONSTRAINT no_poison CHECK SpanName != 'poison'")
    poisoned = request(spans=2)
    poisoned.resource_spans[0].scope_spans[0].spans[1].name = "poison"
    writer = make_writer(dsn, tmp_path, batch_rows=1000, batch_seconds=0.5).start()
    try:
        good = [writer.submit(request(spans=3).SerializeToString(), 3) for _ in range(2)]
        bad = writer.submit(poisoned.SerializeToString(), 2)
        later = writer.submit(request(spans=3).SerializeToString(), 3)
        for future in good + [later]:
            future.result(timeout=30)
        with pytest.raises(Refused, match="no_poison"):
            bad.result(timeout=30)
    finally:
        writer.stop()
    assert count(ch) == 9
    assert writer.metrics.insert_errors.labels(kind="permanent")._value.get() >= 1


def test_a_full_queue_answers_429_and_resource_exhausted(dsn, tmp_path):
    handle = start_receiver(dsn, tmp_path / "spool", queue_max_spans=10, batch_seconds=3.0)
    try:
        url = handle.http_url + "/v1/traces"
        waiting, first = queue_one(handle, 8)  # queued, waiting for its batch
        status, headers, body = post(url, request(5).SerializeToString())
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert "queue_max_spans=10" in status_pb2.Status.FromString(body).message
        status, headers, body = post(url, json.dumps({"resourceSpans": []}).encode(), "application/json")
        assert status == 200  # an empty request takes no room
        with grpc.insecure_channel(handle.grpc_target) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as err:
                export(request(5).SerializeToString(), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = dict(err.value.trailing_metadata())["grpc-status-details-bin"]
        retry = error_details_pb2.RetryInfo()
        assert status_pb2.Status.FromString(details).details[0].Unpack(retry)
        assert retry.retry_delay.seconds >= 1
        waiting.join(30)
        assert first["status"] == 200  # the queued request was stored and acknowledged
    finally:
        handle.stop()
    writer = make_writer(dsn, tmp_path / "w2", queue_max_spans=5, queue_max_bytes=100, batch_seconds=60)
    writer.submit(b"x", 4)
    with pytest.raises(QueueFull, match="queue_max_spans=5"):  # the bounds hold for direct callers too
        writer.submit(b"y", 4)
    with pytest.raises(QueueFull, match="queue_max_bytes=100"):
        writer.submit(b"z" * 100, 1)


def test_a_field_clickhouse_cannot_parse_is_dropped_not_the_request(dsn, ch, tmp_path):
    """upb keeps a known field sent with the wrong wire type as unknown; ClickHouse refuses it (436)."""
    from tests.pipelines.test_fuzz_receivers import _field

    now = time.time_ns().to_bytes(8, "little")
    span = (_field(1, bytes(range(1, 17))) + _field(2, bytes(range(1, 9))) + _field(5, b"odd")
            + bytes([7 << 3 | 1]) + now + bytes([8 << 3 | 1]) + now  # start and end, fixed64
            + bytes([1 << 3 | 0, 0x97, 0x01]))  # trace_id again, as a varint: upb keeps it as unknown
    odd = _field(1, _field(2, _field(2, span)))
    writer = make_writer(dsn, tmp_path, batch_seconds=0.2).start()
    try:
        writer.submit(odd, 1).result(timeout=30)
        writer.submit(request(spans=2).SerializeToString(), 2).result(timeout=30)
    finally:
        writer.stop()
    assert ch.query("SELECT SpanName, SpanId FROM otel_traces WHERE SpanName = 'odd'").result_rows == [
        ("odd", "0102030405060708")]
    assert count(ch) == 3



def test_the_queue_admits_what_drains_in_queue_max_seconds(dsn, ch, tmp_path):
    """Beyond the memory bounds, a request waits only if the spans ahead of it drain in time: 429 with the
    rate in the message, and a retry hint of when the excess will have drained."""
    assumed = make_writer(dsn, tmp_path, batch_rows=10, batch_seconds=60, queue_max_seconds=1.0)
    assumed.submit(b"x", 4)  # an empty queue takes any request
    with pytest.raises(QueueFull, match=r"4 spans already waiting, 24.0 s of writing at an assumed 0.167 spans/s "
                                        r"\(pipeline.queue_max_seconds=1\)") as full:
        assumed.submit(b"y", 4)  # before any full batch: one batch (10 spans) per batch_seconds (60 s)
    assert full.value.retry_after == 5.0  # 47 s to drain the excess, capped at retry_max_seconds

    writer = make_writer(dsn, tmp_path / "measured", batch_rows=10, batch_seconds=60, queue_max_seconds=0.001).start()
    try:
        writer.submit(request(spans=10).SerializeToString(), 10).result(timeout=30)  # a full batch: measured
        rate = writer._drain.spans_per_second
        assert writer._drain.measured and rate > 10 / 60
        assert writer.metrics.queue_limit._value.get() == pytest.approx(rate * 0.001)
        waiting = writer.submit(request(spans=4).SerializeToString(), 4)
        with pytest.raises(QueueFull, match=r"4 spans already waiting, [\d.]+ s of writing at the measured"):
            writer.submit(request(spans=4).SerializeToString(), 4)
    finally:
        writer.stop()
    waiting.result(timeout=0)  # the admitted request was written at stop
    assert count(ch) == 14


def test_a_full_queue_refuses_before_reading_or_decoding_the_body(dsn, tmp_path):
    """Once even one more span would be refused, a request gets its 429 before its body is read (HTTP) or
    decoded (gRPC): a flood of retries on a full queue costs neither memory nor a decode. Its spans are
    unknown, so only the request is counted."""
    import socket
    import urllib.request

    handle = start_receiver(dsn, tmp_path / "spool", queue_max_spans=10, batch_seconds=3.0)
    try:
        waiting, first = queue_one(handle, 10)  # the queue is full, its spans waiting for their batch
        host, port = handle.http_url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            # 100 kB announced, 10 bytes sent: the answer comes while the body is still unread
            conn.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                         b"Content-Length: 100000\r\n\r\n" + b"\x0a" * 10)
            head = conn.recv(65536).decode("latin-1")
        assert head.startswith("HTTP/1.1 429 ") and "Retry-After: " in head
        assert "queue_max_spans=10" in head  # the reason, in the google.rpc.Status body
        with grpc.insecure_channel(handle.grpc_target) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as err:
                export(b"not protobuf at all", timeout=10)  # not decoded: refused as full, not as malformed
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "grpc-status-details-bin" in dict(err.value.trailing_metadata())
        with urllib.request.urlopen(handle.http_url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        waiting.join(30)
        assert first["status"] == 200  # the queued request was stored and acknowledged
    finally:
        handle.stop()
    assert metric(text, "infersight_pipeline_requests_total", protocol="http", outcome="queue_full") == 1
    assert metric(text, "infersight_pipeline_requests_total", protocol="grpc", outcome="queue_full") == 1
    assert metric(text, "infersight_pipeline_requests_total", outcome="malformed") == 0
    assert metric(text, "infersight_pipeline_spans_received_total") == 10  # the refused spans were never counted
    assert metric(text, "infersight_pipeline_spans_rejected_total") == 0


def test_bodies_arriving_at_once_are_held_to_queue_max_bytes(dsn, tmp_path):
    """Many connections sending large bodies at once cannot exhaust memory: the bytes of bodies still
    arriving are bound by pipeline.queue_max_bytes (taken as they arrive, not as announced), beyond which
    a request gets 429 and what it sent is dropped; once a body has arrived its bytes are released."""
    import socket

    def head(size: int) -> bytes:
        return (f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                f"Content-Length: {size}\r\n\r\n").encode()

    def answer(conn) -> str:
        return conn.recv(65536).decode("latin-1").split("\r\n", 1)[0]

    slow, other = request(500).SerializeToString(), request(300).SerializeToString()  # ~31 kB and ~19 kB
    handle = start_receiver(dsn, tmp_path / "spool", queue_max_bytes=40_000)
    try:
        host, port = handle.http_url.removeprefix("http://").rsplit(":", 1)
        address = (host, int(port))
        with socket.create_connection(address, timeout=20) as arriving:
            arriving.sendall(head(len(slow)) + slow[:-10])  # held: all but its last 10 bytes
            bodies = handle.receiver._runner.app[ARRIVING]
            deadline = time.monotonic() + 20
            while bodies.bytes < len(slow) - 10:  # the receiver has read what was sent
                assert time.monotonic() < deadline, bodies.bytes
                time.sleep(0.01)
            with socket.create_connection(address, timeout=20) as second:
                second.sendall(head(len(other)) + other)
                assert answer(second) == "HTTP/1.1 429 Too Many Requests"
            with socket.create_connection(address, timeout=20) as announcing:
                announcing.sendall(head(10**6))  # announces much, sends nothing: holds nothing
                time.sleep(0.5)
                assert bodies.bytes == len(slow) - 10
                arriving.sendall(slow[-10:])
                assert answer(arriving) == "HTTP/1.1 200 OK"
        assert post(handle.http_url + "/v1/traces", other)[0] == 200  # nothing held now: taken
    finally:
        handle.stop()
