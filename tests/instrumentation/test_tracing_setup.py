"""setup_tracing(): both silent-loss failure modes of the SDK defaults (queue overflow in a burst,
event eviction on long spans), dropped-span counting, OTEL_* variables, and real OTLP export."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from infersight import attributes as attr
from infersight.config import ConfigError, parse_config
from infersight.instrumentation import RequestTracer, TailSampler, setup_tracing, setup_tracing_from_config
from infersight.instrumentation.tracing_setup import TracingSetupError
from tests.instrumentation.otlp_receivers import GrpcTraceReceiver, HttpTraceReceiver, flatten

BURST = 6000


class GatedExporter(SpanExporter):
    """Holds every export until released: a collector that is slow during the burst."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.exported = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.gate.wait(timeout=30)
        with self._lock:
            self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.gate.set()


class FailingExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.FAILURE

    def shutdown(self):
        pass


def burst(provider, count: int = BURST) -> None:
    tracer = provider.get_tracer("burst")
    for i in range(count):
        tracer.start_span("request", attributes={"i": i}).end()


def test_sdk_default_queue_drops_spans_in_a_burst_silently():
    exporter = GatedExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))  # SDK defaults: 2048-span queue
    burst(provider)
    exporter.gate.set()
    provider.shutdown()
    assert exporter.exported <= 2048 + 512  # the queue plus the one batch in flight; the rest is gone
    assert exporter.exported < BURST


def test_setup_tracing_default_queue_absorbs_the_burst():
    exporter = GatedExporter()
    handle = setup_tracing("gateway", exporter=exporter)
    burst(handle.provider)
    exporter.gate.set()
    handle.shutdown()
    assert exporter.exported == BURST
    assert handle.dropped_spans() == 0
    assert handle.registry.get_sample_value("infersight_tracing_spans_dropped_total",
                                            {"service": "gateway", "reason": "queue_full"}) == 0


def test_dropped_spans_are_counted_when_the_queue_overflows():
    exporter = GatedExporter()
    handle = setup_tracing("gateway", exporter=exporter, max_queue_size=100, max_export_batch_size=50)
    burst(handle.provider, 1000)
    exporter.gate.set()
    handle.shutdown()
    dropped = handle.registry.get_sample_value("infersight_tracing_spans_dropped_total",
                                               {"service": "gateway", "reason": "queue_full"})
    assert dropped > 0
    # Every span is delivered or counted. The count may be high by one when the export thread
    # drains the queue between our check and the SDK's append (the SDK's own log has the same race).
    assert 1000 <= exporter.exported + dropped <= 1003


def test_failed_exports_are_counted():
    handle = setup_tracing("engine", exporter=FailingExporter(), schedule_delay_ms=10)
    burst(handle.provider, 30)
    handle.shutdown()
    assert handle.registry.get_sample_value("infersight_tracing_spans_dropped_total",
                                            {"service": "engine", "reason": "export_failed"}) == 30


def token_event_span(provider, tokens: int = 200) -> ReadableSpan:
    span = provider.get_tracer("events").start_span("request")
    for i in range(tokens):
        span.add_event(f"token {i}")
    span.end()
    return span


def test_sdk_default_span_limits_evict_the_first_tokens():
    span = token_event_span(TracerProvider())
    assert len(span.events) == 128 and span.dropped_events == 72
    assert span.events[0].name == "token 72"  # token 0, the one TTFT depends on, is gone


def test_setup_tracing_keeps_every_event_and_counts_evictions():
    roomy = setup_tracing("gateway", exporter=GatedExporter())
    span = token_event_span(roomy.provider)
    assert len(span.events) == 200 and span.events[0].name == "token 0"
    assert roomy.registry.get_sample_value("infersight_tracing_span_items_dropped_total",
                                           {"service": "gateway", "item": "event"}) == 0

    tight = setup_tracing("gateway", exporter=GatedExporter(), max_span_events=128)
    token_event_span(tight.provider)
    assert tight.registry.get_sample_value("infersight_tracing_span_items_dropped_total",
                                           {"service": "gateway", "item": "event"}) == 72
    for handle in (roomy, tight):
        handle.exporter.gate.set()
        handle.shutdown()


def test_token_timeline_survives_default_span_limits_because_it_is_one_attribute():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # SDK default limits on purpose
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RequestTracer(tracer_provider=provider, sampler=TailSampler(random_share=1.0))
    with tracer.start("m") as req:
        for _ in range(2000):
            req.token()
    (span,) = exporter.get_finished_spans()
    offsets = json.loads(span.attributes[attr.TOKEN_OFFSETS_US])
    assert len(offsets) == 2000 and abs(offsets[0] - span.attributes[attr.TTFT_MS] * 1000) <= 1
    assert span.dropped_attributes == 0


def finished_request(provider, tokens: int = 3):
    tracer = RequestTracer(tracer_provider=provider, sampler=TailSampler(random_share=1.0))
    with tracer.start("llama-3-8b", instance="e0") as req:
        for _ in range(tokens):
            req.token()
        req.finish("stop", output_tokens=tokens)


def test_real_otlp_grpc_export():
    receiver = GrpcTraceReceiver()
    try:
        handle = setup_tracing("gateway", protocol="grpc", endpoint=f"http://127.0.0.1:{receiver.port}")
        finished_request(handle.provider)
        assert handle.force_flush(10_000)
        assert receiver.received.wait(10)
        handle.shutdown()
    finally:
        receiver.stop()
    ((resource, span),) = flatten(receiver.requests)
    assert resource["service.name"].string_value == "gateway"
    assert span.name == "chat llama-3-8b"
    values = {kv.key: kv.value for kv in span.attributes}
    assert values[attr.REQUEST_OUTCOME].string_value == "success"
    assert values[attr.SAMPLING_REASON].string_value == "random"
    # One string value on the wire (the JSON text), not one AnyValue per token.
    offsets = json.loads(values[attr.TOKEN_OFFSETS_US].string_value)
    assert len(offsets) == 3 and offsets == sorted(offsets)
    assert handle.dropped_spans() == 0


def test_real_otlp_http_export_configured_by_otel_environment(monkeypatch):
    receiver = HttpTraceReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "engine-from-env")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "5000")
    try:
        handle = setup_tracing()
        assert handle.protocol == "http/protobuf" and handle.processor.max_queue_size == 5000
        finished_request(handle.provider)
        assert handle.force_flush(10_000)
        assert receiver.received.wait(10)
        handle.shutdown()
    finally:
        receiver.stop()
    assert receiver.paths == ["/v1/traces"]
    ((resource, span),) = flatten(receiver.requests)
    assert resource["service.name"].string_value == "engine-from-env"
    assert span.name == "chat llama-3-8b"


def test_explicit_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "5000")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    handle = setup_tracing("x", protocol="grpc", max_queue_size=9000, endpoint="http://127.0.0.1:1")
    assert handle.protocol == "grpc" and handle.processor.max_queue_size == 9000
    handle.shutdown()


@pytest.mark.parametrize(("kwargs", "env", "message"), [
    ({"protocol": "thrift"}, {}, "grpc, http/protobuf"),
    ({}, {"OTEL_EXPORTER_OTLP_PROTOCOL": "zipkin"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"endpoint": "127.0.0.1:4317"}, {}, "not a URL"),
    ({"head_ratio": 1.5}, {}, "head_ratio"),
    ({"max_queue_size": 10, "max_export_batch_size": 20}, {}, "must not exceed"),
    ({"max_queue_size": 0}, {}, ">= 1"),
    ({}, {"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, "OTEL_BSP_MAX_QUEUE_SIZE='lots'"),
])
def test_bad_settings_are_refused_with_a_clear_message(monkeypatch, kwargs, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(TracingSetupError, match=message.replace("(", r"\(")):
        setup_tracing("x", **kwargs)


def test_setup_from_config_section():
    config = parse_config({"tracing": {"head_ratio": 0.0, "max_queue_size": 4096, "otlp_protocol": "http/protobuf",
                                       "otlp_endpoint": "http://127.0.0.1:4318"}})
    handle = setup_tracing_from_config(config.tracing, "gateway")
    assert handle.protocol == "http/protobuf" and handle.processor.max_queue_size == 4096
    span = handle.provider.get_tracer("t").start_span("x")
    assert not span.is_recording()  # head_ratio 0
    handle.shutdown()
    with pytest.raises(ConfigError, match="tracing.otlp_endpoint"):
        parse_config({"tracing": {"otlp_endpoint": "localhost:4317"}})
    with pytest.raises(ConfigError, match="tracing.otlp_protocol"):
        parse_config({"tracing": {"otlp_protocol": "udp"}})


def test_without_head_ratio_the_head_is_the_sdks_choice_from_the_environment(monkeypatch):
    """No head_ratio: the head sampler is what the SDK picks from OTEL_TRACES_SAMPLER, wrapped for the tail."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    handle = setup_tracing("gateway", endpoint="http://127.0.0.1:4318", protocol="http/protobuf")
    assert handle.provider.sampler.get_description() == "HeadTailSampler{TraceIdRatioBased{0.0}}"
    assert not handle.provider.get_tracer("t").start_span("x").is_recording()
    handle.shutdown()
    monkeypatch.delenv("OTEL_TRACES_SAMPLER")
    handle = setup_tracing("gateway", endpoint="http://127.0.0.1:4318", protocol="http/protobuf")
    assert "ParentBased{root:AlwaysOnSampler" in handle.provider.sampler.get_description()
    assert handle.provider.get_tracer("t").start_span("x").is_recording()
    handle.shutdown()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_shutdown_gives_up_on_an_unreachable_collector(protocol):
    """Ctrl-C must not wait out the exporter's whole retry schedule when nobody listens."""
    handle = setup_tracing("unreachable", protocol=protocol, endpoint="http://127.0.0.1:9")  # discard port
    with handle.provider.get_tracer("test").start_as_current_span("request"):
        pass
    assert handle.shutdown(timeout_s=0.5) is False


def test_shutdown_exports_what_is_queued():
    exporter = InMemorySpanExporter()
    handle = setup_tracing("svc", exporter=exporter, schedule_delay_ms=60_000)  # nothing leaves on its own
    with handle.provider.get_tracer("test").start_as_current_span("request"):
        pass
    assert handle.shutdown() is True
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]


def test_without_an_endpoint_spans_go_to_the_configured_receiver(monkeypatch):
    """Not localhost:4317 whatever the config says: listeners.otlp_grpc is where our receiver listens."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    receiver = GrpcTraceReceiver()
    try:
        config = parse_config({"listeners": {"otlp_grpc": f"0.0.0.0:{receiver.port}"}})
        handle = setup_tracing_from_config(config.tracing, "proxy", listeners=config.listeners)
        finished_request(handle.provider)
        assert handle.force_flush(10_000) and receiver.received.wait(10)
        handle.shutdown()
    finally:
        receiver.stop()
    ((_, span),) = flatten(receiver.requests)
    assert span.name == "chat llama-3-8b"
    from infersight.instrumentation.tracing_setup import receiver_endpoint

    listeners = parse_config({"listeners": {"otlp_grpc": "10.0.0.9:5317", "otlp_http": "[::]:5318"}}).listeners
    assert receiver_endpoint(listeners, "grpc") == "http://10.0.0.9:5317"
    assert receiver_endpoint(listeners, "http/protobuf") == "http://[::1]:5318"


def test_an_unreachable_receiver_is_counted_and_logged_once(caplog):
    import logging
    import time

    handle = setup_tracing("proxy", protocol="grpc", endpoint="http://127.0.0.1:9", schedule_delay_ms=10,
                           export_timeout_s=0.5)
    caplog.set_level(logging.INFO)
    tracer = handle.provider.get_tracer("t")
    deadline = time.monotonic() + 30
    while handle.processor.export_failed._value.get() < 3 and time.monotonic() < deadline:
        with tracer.start_as_current_span("request"):
            pass
        time.sleep(0.2)
    handle.shutdown(timeout_s=0.5)
    failed = handle.registry.get_sample_value("infersight_tracing_spans_dropped_total",
                                              {"service": "proxy", "reason": "export_failed"})
    assert failed >= 3  # three failed batches or more
    ours = [r for r in caplog.records if "span export to http://127.0.0.1:9 failing" in r.getMessage()]
    assert len(ours) == 1
    exporter_errors = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")
                       and "Failed to export" in r.getMessage()]
    assert len(exporter_errors) <= 1  # the first batch's own message, then quiet
