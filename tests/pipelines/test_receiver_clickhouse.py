"""Both receivers into a real ClickHouse: the OTel SDK's exporters, raw OTLP/JSON, bad input."""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.request

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from tests.pipelines.receiver_payloads import json_request, metric, migrate, post, request, span_ids, start_receiver

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def database(clickhouse_server, clickhouse_database):
    migrate(clickhouse_server, clickhouse_database)
    return clickhouse_database


@pytest.fixture
def receiver(clickhouse_server, database, tmp_path):
    handle = start_receiver(clickhouse_server.dsn(database), tmp_path / "spool", max_attribute_length=64)
    yield handle
    handle.stop()


@pytest.fixture
def ch(clickhouse_server, database):
    client = clickhouse_server.client(database)
    yield client
    client.close()


def rows(ch, sql: str, **params):
    return ch.query(sql, parameters=params).result_rows


def export_with_sdk(exporter, service: str, count: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    tracer = provider.get_tracer("infersight.tests", "2.0")
    for i in range(count):
        with tracer.start_as_current_span("chat llama", kind=SpanKind.SERVER) as span:
            span.set_attribute("gen_ai.request.model", "llama")
            span.set_attribute("gen_ai.usage.output_tokens", i)
            span.set_attribute("llm.ttft_ms", 12.5)
            span.set_attribute("llm.request.outcome", "success")
            span.set_attribute("llm.cached", True)
            span.set_attribute("gen_ai.response.finish_reasons", ["stop", "length"])
            span.set_attribute("llm.token.offsets_us", [1000, 1500, 2600])
            span.set_attribute("gen_ai.prompt", "what is the secret?")
            span.add_event("first_token", {"llm.token.index": 0})
            with tracer.start_as_current_span("engine.decode") as child:
                child.set_status(Status(StatusCode.ERROR, "stalled"))
    assert provider.force_flush(30_000)
    provider.shutdown()


def test_sdk_exporters_over_http_and_grpc_with_gzip_store_every_span_once(receiver, ch):
    from opentelemetry.exporter.otlp.proto.http import Compression

    export_with_sdk(HttpExporter(endpoint=receiver.http_url + "/v1/traces", compression=Compression.Gzip),
                    "gw-http", 40)
    export_with_sdk(GrpcExporter(endpoint=receiver.grpc_target, insecure=True, compression=grpc.Compression.Gzip),
                    "gw-grpc", 40)
    counts = dict(rows(ch, "SELECT ServiceName, uniqExact(SpanId) FROM otel_traces GROUP BY ServiceName"))
    assert counts == {"gw-http": 80, "gw-grpc": 80}
    assert rows(ch, "SELECT count() FROM otel_traces")[0][0] == 160  # nothing doubled

    request_span = rows(ch, "SELECT SpanKind, StatusCode, ScopeName, ScopeVersion, SpanAttributes, Events.Name, "
                            "Events.Attributes, Duration > 0, length(TraceId), length(SpanId), ParentSpanId "
                            "FROM otel_traces WHERE SpanName = 'chat llama' "
                            "AND SpanAttributes['gen_ai.usage.output_tokens'] = '7' AND ServiceName = 'gw-grpc'")[0]
    kind, status, scope, version, attrs, event_names, event_attrs, has_duration, tlen, slen, parent = request_span
    assert (kind, status, scope, version) == ("Server", "Unset", "infersight.tests", "2.0")
    assert attrs["gen_ai.request.model"] == "llama"
    assert attrs["llm.ttft_ms"] == "12.5" and attrs["llm.cached"] == "true"
    assert attrs["gen_ai.response.finish_reasons"] == '["stop","length"]'  # arrays as JSON, like the Collector
    assert attrs["llm.token.offsets_us"] == "[1000,1500,2600]"
    assert "gen_ai.prompt" not in attrs  # no prompt text unless pipeline.store_content
    assert event_names == ["first_token"] and event_attrs == [{"llm.token.index": "0"}]
    assert has_duration and (tlen, slen, parent) == (32, 16, "")
    child = rows(ch, "SELECT StatusCode, StatusMessage, SpanKind FROM otel_traces WHERE SpanName = 'engine.decode' "
                     "LIMIT 1")[0]
    assert child == ("Error", "stalled", "Internal")
    # the schema's views ran on our rows: 3 tokens per request span, trace lookup filled
    assert rows(ch, "SELECT count() FROM llm_token_events")[0][0] == 80 * 3
    assert rows(ch, "SELECT uniqExact(TraceId) FROM otel_traces_trace_id_ts")[0][0] == 80


def test_raw_otlp_json_and_gzip(receiver, ch):
    ids = ["a1a2a3a4a5a6a7a8", "b1b2b3b4b5b6b7b8"]
    status, headers, body = post(receiver.http_url + "/v1/traces", json.dumps(json_request(ids)).encode(),
                                 "application/json")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {}  # full success
    zipped = gzip.compress(json.dumps(json_request(["c1c2c3c4c5c6c7c8"])).encode())
    assert post(receiver.http_url + "/v1/traces", zipped, "application/json", {"Content-Encoding": "gzip"})[0] == 200
    proto = request(spans=4)
    status, _, _ = post(receiver.http_url + "/v1/traces", gzip.compress(proto.SerializeToString()),
                        headers={"Content-Encoding": "gzip"})
    assert status == 200
    stored = {r[0] for r in rows(ch, "SELECT SpanId FROM otel_traces")}
    assert stored == set(ids) | {"c1c2c3c4c5c6c7c8"} | span_ids(proto)
    row = rows(ch, "SELECT TraceId, StatusCode, StatusMessage, SpanKind, Duration, SpanAttributes "
                   "FROM otel_traces WHERE SpanId = {s:String}", s=ids[0])[0]
    assert row[:5] == ("5b8efff798038103d269b633813fc60c", "Error", "upstream timeout", "Server", 1_500_000)
    assert row[5]["gen_ai.usage.output_tokens"] == "42" and row[5]["llm.token.offsets_us"] == "[100,250]"


def test_bad_input_gets_a_clear_answer_and_harms_nothing(receiver, ch):
    url = receiver.http_url + "/v1/traces"
    good = request(spans=2)
    cases = [
        (b"\x0a\xff\xff\xff\x0f", "application/x-protobuf", {}, 400, "malformed OTLP protobuf"),
        (b"{", "application/json", {}, 400, "malformed JSON"),
        (good.SerializeToString(), "text/plain", {}, 415, "not supported"),
        (good.SerializeToString(), "application/x-protobuf", {"Content-Encoding": "br"}, 415, "encoding"),
        (b"not gzip at all", "application/x-protobuf", {"Content-Encoding": "gzip"}, 400, "bad gzip"),
        (gzip.compress(b"\x00" * 20_000_000), "application/x-protobuf", {"Content-Encoding": "gzip"}, 413,
         "decompressed"),
        (b"\x00" * (16 * 1024 * 1024 + 1), "application/x-protobuf", {}, 413, "over the"),
    ]
    for body, content_type, headers, expected, reason in cases:
        status, _, answer = post(url, body, content_type, headers)
        assert status == expected, (content_type, headers, status, answer[:200])
        # the error body is a google.rpc.Status, in JSON when the request was JSON
        if content_type == "application/json":
            message = json.loads(answer)["message"]
        else:
            message = status_pb2.Status.FromString(answer).message
        assert reason in message, message

    # invalid ids: rejected per span, the rest stored, reported as partial success
    mixed = request(spans=3)
    spans = mixed.resource_spans[0].scope_spans[0].spans
    spans[0].span_id = bytes(8)
    status, _, answer = post(url, mixed.SerializeToString())
    assert status == 200
    assert ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans == 1

    # gRPC: malformed -> INVALID_ARGUMENT with the reason
    with grpc.insecure_channel(receiver.grpc_target) as channel:
        export = channel.unary_unary(EXPORT)
        with pytest.raises(grpc.RpcError) as err:
            export(b"\x0a\xff\xff\xff\x0f", timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed" in err.value.details()
        assert export(good.SerializeToString(), timeout=30) == b""

    stored = {r[0] for r in rows(ch, "SELECT SpanId FROM otel_traces")}
    assert stored == span_ids(good) | {s.span_id.hex() for s in spans[1:]}
    text = urllib.request.urlopen(receiver.http_url + "/metrics").read().decode()
    assert metric(text, "infersight_pipeline_spans_rejected_total", reason="invalid_id") == 1
    assert metric(text, "infersight_pipeline_requests_total", protocol="http", outcome="malformed") == 3
    assert metric(text, "infersight_pipeline_requests_total", protocol="http", outcome="too_large") == 2
    assert metric(text, "infersight_pipeline_requests_total", protocol="http", outcome="unsupported") == 2
    assert metric(text, "infersight_pipeline_requests_total", protocol="grpc", outcome="malformed") == 1
    assert metric(text, "infersight_pipeline_spans_accepted_total") == 2 + 2  # the mixed request and gRPC


def test_long_values_are_stored_cut_and_counted(receiver, ch):
    req = request(spans=2, attributes={"llm.error.detail": "e" * 1000, "llm.pool": "stable"}, tokens=100)
    assert post(receiver.http_url + "/v1/traces", req.SerializeToString())[0] == 200
    lengths = rows(ch, "SELECT length(SpanAttributes['llm.error.detail']), SpanAttributes['llm.pool'], "
                       "length(JSONExtract(SpanAttributes['llm.token.offsets_us'], 'Array(UInt64)')) FROM otel_traces")
    assert lengths == [(64, "stable", 100)] * 2  # the token timeline is never cut
    text = urllib.request.urlopen(receiver.http_url + "/metrics").read().decode()
    assert metric(text, "infersight_pipeline_attributes_truncated_total") == 2


def test_prompt_text_is_stored_only_when_enabled(clickhouse_server, database, ch, tmp_path):
    handle = start_receiver(clickhouse_server.dsn(database), tmp_path / "spool", store_content=True)
    try:
        req = request(spans=1, attributes={"gen_ai.prompt": "hello", "gen_ai.completion.0.content": "hi"})
        assert post(handle.http_url + "/v1/traces", req.SerializeToString())[0] == 200
    finally:
        handle.stop()
    attrs = rows(ch, "SELECT SpanAttributes FROM otel_traces")[0][0]
    assert attrs == {"gen_ai.prompt": "hello", "gen_ai.completion.0.content": "hi"}


def test_bearer_token_is_required_when_configured(clickhouse_server, database, ch, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    handle = start_receiver(clickhouse_server.dsn(database), tmp_path / "spool",
                            auth_token_file=str(token_file))
    try:
        body = request(spans=1).SerializeToString()
        url = handle.http_url + "/v1/traces"
        assert post(url, body)[0] == 401
        assert post(url, body, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert post(url, body, headers={"Authorization": "Bearer s3cret"})[0] == 200
        with grpc.insecure_channel(handle.grpc_target) as channel:
            export = channel.unary_unary(EXPORT)
            with pytest.raises(grpc.RpcError) as err:
                export(body, timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            other = request(spans=1).SerializeToString()  # (the same bytes again would be deduplicated)
            export(other, timeout=30, metadata=(("authorization", "Bearer s3cret"),))
    finally:
        handle.stop()
    assert rows(ch, "SELECT count() FROM otel_traces")[0][0] == 2


def test_tls_on_both_receivers(clickhouse_server, database, ch, tmp_path):
    import ssl
    import subprocess

    from tests.conftest import require_tool

    openssl = require_tool("openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    handle = start_receiver(clickhouse_server.dsn(database), tmp_path / "spool",
                            tls_cert_file=str(cert), tls_key_file=str(key))
    try:
        body = request(spans=2).SerializeToString()
        https = handle.http_url.replace("http://", "https://") + "/v1/traces"
        context = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(https, data=body, headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            assert resp.status == 200
        with pytest.raises((OSError, http.client.HTTPException)):  # plain text cannot talk to the TLS listener
            urllib.request.urlopen(urllib.request.Request(handle.http_url + "/v1/traces", data=body), timeout=5)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(handle.grpc_target, credentials) as channel:
            channel.unary_unary(EXPORT)(request(spans=3).SerializeToString(), timeout=30)
    finally:
        handle.stop()
    assert rows(ch, "SELECT count() FROM otel_traces")[0][0] == 5


def test_large_and_chunked_bodies_arrive_whole(receiver, ch):
    """A body spread over many TCP reads (MBs, or chunked without Content-Length) is read to its end."""
    import asyncio

    import aiohttp

    big = request(spans=3000, tokens=120)  # ~2.5 MB
    assert post(receiver.http_url + "/v1/traces", big.SerializeToString())[0] == 200
    chunked = request(spans=500, tokens=120)

    async def send_chunked() -> int:
        body = chunked.SerializeToString()

        async def pieces():
            for i in range(0, len(body), 7000):
                yield body[i:i + 7000]

        async with aiohttp.ClientSession() as session, session.post(
                receiver.http_url + "/v1/traces", data=pieces(),
                headers={"Content-Type": "application/x-protobuf"}) as resp:
            return resp.status

    assert asyncio.run(send_chunked()) == 200
    assert rows(ch, "SELECT count() FROM otel_traces")[0][0] == 3500
    assert rows(ch, "SELECT count() FROM llm_token_events")[0][0] == 3500 * 120


def test_several_resources_and_scopes_in_one_request(receiver, ch):
    req = request(spans=2, service="svc-a")
    req.resource_spans.extend(request(spans=3, service="svc-b").resource_spans)
    extra = req.resource_spans[0].scope_spans.add()
    extra.scope.name, extra.scope.version = "second-scope", "9"
    extra.spans.extend(request(spans=1).resource_spans[0].scope_spans[0].spans)
    assert post(receiver.http_url + "/v1/traces", req.SerializeToString())[0] == 200
    grouped = rows(ch, "SELECT ServiceName, ScopeName, ScopeVersion, ResourceAttributes, count() FROM otel_traces "
                       "GROUP BY ALL ORDER BY ALL")
    assert grouped == [("svc-a", "infersight.tests", "1.0", {"service.name": "svc-a"}, 2),
                       ("svc-a", "second-scope", "9", {"service.name": "svc-a"}, 1),
                       ("svc-b", "infersight.tests", "1.0", {"service.name": "svc-b"}, 3)]


def test_a_timeline_sent_as_json_text_is_stored_whole(receiver, ch):
    """A client may send llm.token.offsets_us as its JSON text (3x cheaper for ClickHouse to take in than an
    OTLP int array); it is never cut, whatever max_attribute_length (64 here) says."""
    offsets = [1000 + 25_000 * i for i in range(40)]
    text = "[" + ",".join(map(str, offsets)) + "]"
    assert len(text) > 64
    req = request(spans=2, attributes={"llm.token.offsets_us": text})
    assert post(receiver.http_url + "/v1/traces", req.SerializeToString())[0] == 200
    assert rows(ch, "SELECT DISTINCT SpanAttributes['llm.token.offsets_us'] FROM otel_traces") == [(text,)]
    assert rows(ch, "SELECT count() FROM llm_token_events")[0][0] == 80
