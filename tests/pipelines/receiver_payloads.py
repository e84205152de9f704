"""Builders of OTLP trace export requests for the pipeline tests (protobuf messages and OTLP/JSON)."""

from __future__ import annotations

import os
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2


def any_value(value) -> common_pb2.AnyValue:
    out = common_pb2.AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, list):
        for item in value:
            out.array_value.values.append(any_value(item))
    elif isinstance(value, dict):
        for key, item in value.items():
            out.kvlist_value.values.add(key=key).value.CopyFrom(any_value(item))
    else:
        out.string_value = value
    return out


def request(spans: int = 3, service: str = "gateway", attributes: dict | None = None,
            tokens: int = 0, start_ns: int | None = None) -> ExportTraceServiceRequest:
    """One resource, one scope, ``spans`` spans with random ids and the given attributes."""
    req = ExportTraceServiceRequest()
    resource_spans = req.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name").value.string_value = service
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "infersight.tests"
    scope_spans.scope.version = "1.0"
    start = start_ns or time.time_ns()
    for i in range(spans):
        span = scope_spans.spans.add()
        span.trace_id = os.urandom(16)
        span.span_id = os.urandom(8)
        span.name = "chat llama"
        span.kind = 2
        span.start_time_unix_nano = start + i
        span.end_time_unix_nano = start + i + 250_000_000
        for key, value in (attributes or {}).items():
            span.attributes.add(key=key).value.CopyFrom(any_value(value))
        if tokens:
            span.attributes.add(key="llm.token.offsets_us").value.CopyFrom(
                any_value([1000 * (t + 1) for t in range(tokens)]))
    return req


def span_ids(req: ExportTraceServiceRequest) -> set[str]:
    return {s.span_id.hex() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans}


def json_request(span_ids_hex: list[str], trace_id_hex: str = "5b8efff798038103d269b633813fc60c",
                 service: str = "json-client") -> dict:
    """An OTLP/JSON body as written by hand: hex ids, lowerCamelCase, int64 as strings."""
    now = time.time_ns()
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{
            "scope": {"name": "manual", "version": "0.1"},
            "spans": [{
                "traceId": trace_id_hex, "spanId": sid, "parentSpanId": "",
                "name": "manual span", "kind": 2,
                "startTimeUnixNano": str(now), "endTimeUnixNano": str(now + 1_500_000),
                "attributes": [
                    {"key": "gen_ai.request.model", "value": {"stringValue": "llama"}},
                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "42"}},
                    {"key": "llm.ttft_ms", "value": {"doubleValue": 12.5}},
                    {"key": "llm.cached", "value": {"boolValue": True}},
                    {"key": "llm.token.offsets_us", "value": {"arrayValue": {"values": [
                        {"intValue": "100"}, {"intValue": "250"}]}}},
                ],
                "events": [{"timeUnixNano": str(now + 1000), "name": "first_token",
                            "attributes": [{"key": "llm.token.index", "value": {"intValue": "0"}}]}],
                "status": {"code": 2, "message": "upstream timeout"},
            } for sid in span_ids_hex],
        }],
    }]}


# -- running a receiver against a test database ----------------------------------------------------

def migrate(clickhouse_server, database: str) -> None:
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    client = clickhouse_server.client()
    migrations.migrate(client, SchemaOptions(database=database))
    client.close()


def start_receiver(dsn: str, spool_dir, **pipeline):
    """A receiver on free ports in a background thread; ``.stop()`` it after use."""
    from infersight.config import Config
    from infersight.pipelines.receiver.service import Receiver, ReceiverThread

    settings = {"batch_seconds": 0.2, "retry_initial_seconds": 0.05, "retry_max_seconds": 0.5} | pipeline
    config = Config.model_validate({"pipeline": settings})
    receiver = Receiver(config, dsn=dsn, http_listen="127.0.0.1:0", grpc_listen="127.0.0.1:0",
                        spool_dir=str(spool_dir))
    return ReceiverThread(receiver).start()


def post(url: str, body: bytes, content_type: str = "application/x-protobuf", headers: dict | None = None,
         timeout: float = 30):
    """POST and return (status, headers, body) without raising on error statuses."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus exposition text (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
