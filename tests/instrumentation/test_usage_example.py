"""The usage example in instrumentation/tracer.py runs as written, against a real OTLP receiver."""

from __future__ import annotations

import textwrap

from infersight.instrumentation import tracer as tracer_module
from tests.instrumentation.otlp_receivers import GrpcTraceReceiver, flatten


def example_code() -> str:
    doc = tracer_module.__doc__
    block = doc.split("::\n", 1)[1].split("\nLeaving", 1)[0]
    return textwrap.dedent(block)


def test_the_documented_example_runs_and_exports(monkeypatch):
    receiver = GrpcTraceReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    namespace = {"incoming_headers": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                 "upstream_stream": lambda headers: iter(range(256) if "traceparent" in headers else [])}
    try:
        exec(compile(example_code(), "tracer-example", "exec"), namespace)
        namespace["tracing"].force_flush(10_000)
        assert receiver.received.wait(10)
        namespace["tracing"].shutdown()
    finally:
        receiver.stop()
    names = sorted(span.name for _, span in flatten(receiver.requests))
    assert names == ["chat llama-3-8b", "gateway.queue", "gateway.route", "upstream"]
    request_span = next(span for _, span in flatten(receiver.requests) if span.name == "chat llama-3-8b")
    assert request_span.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"  # continued the caller's trace
    registry = namespace["registry"]
    assert registry.get_sample_value("llm_output_tokens_total", {"model": "llama-3-8b", "instance": "10.0.0.7:8000",
                                                                 "pool": "stable", "strategy": "cache_aware"}) == 256
