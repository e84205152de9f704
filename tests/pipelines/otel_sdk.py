"""Send span specs through the real receiver with the real OpenTelemetry SDK and OTLP exporters.

The gateway's spans go over OTLP/HTTP, the engine's (service ``vllm``) over OTLP/gRPC, as two
services would send them. Ids, times, kinds and statuses are set exactly as the specs say (an id
generator hands the SDK the spec's ids), so the tests' known answers hold whichever path loaded
the data.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

KINDS = {"Server": SpanKind.SERVER, "Client": SpanKind.CLIENT, "Internal": SpanKind.INTERNAL}
STATUSES = {"Ok": StatusCode.OK, "Error": StatusCode.ERROR, "Unset": StatusCode.UNSET}


class FixedIds(IdGenerator):
    """Hands out the ids the next span must have."""

    trace_id = 0
    span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


def _ns(moment: dt.datetime) -> int:
    return int(moment.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _otel_value(value: Any) -> Any:
    # OTel attributes are primitives or arrays of primitives; structured values travel as JSON text,
    # as the instrumentation sends the routing candidates.
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return json.dumps(value, separators=(",", ":"))
    return value


def emit(specs: list[dict[str, Any]], endpoints: dict[str, tuple[str, str]]) -> None:
    """Emit ``specs`` through one TracerProvider per service; ``endpoints[service] = ("http"|"grpc", url)``."""
    ids = FixedIds()
    providers: dict[str, TracerProvider] = {}
    for service, (protocol, url) in endpoints.items():
        exporter = HttpExporter(endpoint=f"{url}/v1/traces") if protocol == "http" else GrpcExporter(url, insecure=True)
        provider = TracerProvider(resource=Resource.create({"service.name": service}), id_generator=ids)
        provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=256, schedule_delay_millis=200))
        providers[service] = provider
    try:
        for spec in specs:
            tracer = providers[spec["service"]].get_tracer("infersight.tests", "0.1.0")
            ids.trace_id, ids.span_id = int(spec["trace_id"], 16), int(spec["span_id"], 16)
            context = None
            if spec["parent"]:
                parent = SpanContext(ids.trace_id, int(spec["parent"], 16), is_remote=True,
                                     trace_flags=TraceFlags(TraceFlags.SAMPLED))
                context = trace.set_span_in_context(NonRecordingSpan(parent))
            start = _ns(spec["start"])
            span = tracer.start_span(spec["name"], context=context, kind=KINDS[spec["kind"]], start_time=start,
                                     attributes={k: _otel_value(v) for k, v in spec["attributes"].items()})
            span.set_status(Status(STATUSES[spec["status"]]))
            span.end(end_time=start + int(spec["duration_ms"] * 1_000_000))
    finally:
        for provider in providers.values():
            provider.force_flush()
            provider.shutdown()


def send_via_receiver(server, database: str, incident, timeout: float = 60.0) -> int:
    """Run a real receiver into ``database``, send the incident through it, wait until all spans are stored."""
    from infersight.config import Config
    from infersight.pipelines.receiver.service import Receiver, ReceiverThread
    from tests.pipelines.incident_data import all_specs

    specs = all_specs(incident)
    receiver = Receiver(Config(), dsn=server.dsn(database), http_listen="127.0.0.1:0",
                        grpc_listen="127.0.0.1:0", spool_dir=tempfile.mkdtemp(prefix="infersight-spool-"))
    running = ReceiverThread(receiver).start()
    try:
        emit(specs, {"gateway": ("http", running.http_url), "vllm": ("grpc", running.grpc_target)})
        client = server.client()
        deadline = time.monotonic() + timeout
        stored = 0
        while time.monotonic() < deadline:
            stored = client.query("SELECT count() FROM {db:Identifier}.otel_traces",
                                  parameters={"db": database}).result_rows[0][0]
            if stored >= len(specs):
                break
            time.sleep(0.1)
        if stored != len(specs):
            raise AssertionError(f"the receiver stored {stored} of {len(specs)} spans within {timeout}s")
    finally:
        running.stop()
    return len(specs)
