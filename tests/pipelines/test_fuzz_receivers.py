"""Fuzz-style: truncated, random and hostile payloads at both receivers, with valid data alongside.

The receivers must answer every request (no crash, no hang), and every valid request sent in
between must be acknowledged and stored. Seeded, bounded in count; runs in a few seconds.
"""

from __future__ import annotations

import json
import random
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from tests.pipelines.receiver_payloads import migrate, post, request, span_ids, start_receiver

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SEED = 20261129
COUNT = 120  # hostile payloads per receiver


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, written by hand (upb refuses to build what we want to send)."""
    from infersight.pipelines.receiver.ingest_sql import frame

    return bytes([number << 3 | 2]) + frame([payload])


def nested_array(depth: int) -> bytes:
    """A request whose one span has an AnyValue array nested ``depth`` deep."""
    value = _field(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue.array_value -> ArrayValue.values
    attribute = _field(1, b"deep") + _field(2, value)
    span = _field(1, bytes(range(1, 17))) + _field(2, bytes(range(1, 9))) + _field(9, attribute)
    return _field(1, _field(2, _field(2, span)))


def hostile_protobuf(rng: random.Random) -> list[bytes]:
    valid = request(spans=5, attributes={"llm.pool": "stable", "n": 3}).SerializeToString()
    odd = request(spans=2)
    span = odd.resource_spans[0].scope_spans[0].spans[0]
    span.kind, span.status.code = 77, 99  # out-of-range enums
    span.start_time_unix_nano, span.end_time_unix_nano = 2**64 - 1, 0  # ends before it starts
    span.attributes.add(key="").value.string_value = "\u202e\u0000\U0001F600" * 50
    for i in range(3000):
        span.attributes.add(key=f"k{i}").value.int_value = -(2**63)
    payloads = [b"", nested_array(150), nested_array(30), odd.SerializeToString(),
                b"\x0a" + b"\xff" * 9 + b"\x01", b"\x0a\x80\x80\x80\x80\x10"]  # huge declared lengths
    for _ in range(COUNT // 3):
        payloads.append(valid[:rng.randrange(1, len(valid))])  # truncated
        payloads.append(rng.randbytes(rng.randrange(1, 400)))  # random
        flipped = bytearray(valid)
        for _ in range(rng.randrange(1, 6)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        payloads.append(bytes(flipped))  # mostly-valid
    return payloads


def hostile_json(rng: random.Random) -> list[bytes]:
    deep = "[" * 5000 + "]" * 5000
    docs = [b"null", b"[]", b"{}", b'{"resourceSpans": null}', deep.encode(), b'{"resourceSpans": [1, 2]}',
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5, "spanId": []}]}]}]}',
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "-1e999"}]}]}]}',
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "x", "value": {
                "kvlistValue": {"values": [{"key": "y", "value": {"arrayValue": {"values": [{"intValue": "9"}]}}}]}
            }}]}]}]}]}).encode()]
    for _ in range(COUNT // 4):
        docs.append(rng.randbytes(rng.randrange(1, 200)))
    return docs


@pytest.fixture
def setup(clickhouse_server, clickhouse_database, tmp_path):
    migrate(clickhouse_server, clickhouse_database)
    handle = start_receiver(clickhouse_server.dsn(clickhouse_database), tmp_path / "spool",
                            max_body_bytes=1024 * 1024)
    yield handle, clickhouse_server.client(clickhouse_database)
    handle.stop()


def test_hostile_payloads_are_answered_and_valid_data_alongside_is_stored(setup):
    handle, ch = setup
    rng = random.Random(SEED)
    url = handle.http_url + "/v1/traces"
    valid_requests = [request(spans=4) for _ in range(24)]
    expected = set().union(*(span_ids(r) for r in valid_requests))
    channel = grpc.insecure_channel(handle.grpc_target, options=[("grpc.max_send_message_length", 64 << 20)])
    export = channel.unary_unary(EXPORT)

    def grpc_call(body: bytes) -> str:
        try:
            export(body, timeout=30)
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name

    jobs = [("http", body, "application/x-protobuf") for body in hostile_protobuf(rng)]
    jobs += [("http", body, "application/json") for body in hostile_json(rng)]
    jobs += [("grpc", body, None) for body in hostile_protobuf(rng)]
    jobs += [("http", b"\x00" * (2 * 1024 * 1024), "application/x-protobuf"),  # over the body limit
             ("grpc", b"\x00" * (2 * 1024 * 1024), None)]
    rng.shuffle(jobs)
    for i, req in enumerate(valid_requests):  # valid data interleaved with the garbage
        jobs.insert(i * len(jobs) // len(valid_requests), ("valid-http" if i % 2 else "valid-grpc",
                                                           req.SerializeToString(), "application/x-protobuf"))

    def run(job):
        kind, body, content_type = job
        if kind in ("grpc", "valid-grpc"):
            return kind, grpc_call(body)
        return kind, post(url, body, content_type)[0]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(run, jobs))
    channel.close()

    valid_answers = [answer for kind, answer in answers if kind.startswith("valid")]
    assert valid_answers == [200 if a == 200 else "OK" for a in valid_answers] and len(valid_answers) == 24
    assert all(a in ("OK", 200) for a in valid_answers)
    http_codes = {answer for kind, answer in answers if kind == "http"}
    grpc_codes = {answer for kind, answer in answers if kind == "grpc"}
    assert http_codes <= {200, 400, 413}, http_codes  # never a 5xx, never a dropped connection
    assert grpc_codes <= {"OK", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}, grpc_codes
    assert 400 in http_codes and "INVALID_ARGUMENT" in grpc_codes

    stored = {row[0] for row in ch.query("SELECT SpanId FROM otel_traces").result_rows}
    assert expected <= stored
    assert handle.receiver.spool.batches == 0  # nothing stuck behind a poison batch
    assert urllib.request.urlopen(handle.http_url + "/healthz").read() == b"ok\n"  # still serving
    ch.close()
