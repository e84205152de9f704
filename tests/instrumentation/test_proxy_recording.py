"""How the proxy's endings map onto the request tracer (a real RequestTracer, in-memory spans)."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from infersight import attributes as attr
from infersight.instrumentation.proxy import recording
from infersight.instrumentation.proxy.sse import ResponseFacts
from infersight.instrumentation.sampling import TailSampler
from infersight.instrumentation.tracer import RequestTracer
from infersight.signals import request as request_signals


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RequestTracer(tracer_provider=provider, sampler=TailSampler(random_share=0.0))

    def span_of(ending, *args, **kwargs):
        request = tracer.start("m", instance="engine:8000")
        ending(request, *args, **kwargs)
        assert request.finished
        return exporter.get_finished_spans()[-1]

    span_of.tracer = tracer
    return span_of


def test_success_takes_the_last_finish_reason_and_usage(traced):
    facts = ResponseFacts(model="m-2", response_id="r1", finish_reasons=["length", "stop"], input_tokens=4,
                          output_tokens=2, cached_input_tokens=1)
    span = traced(recording.completed, facts, streamed=True)
    assert span.attributes[attr.REQUEST_OUTCOME] == "success"
    assert tuple(span.attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert span.attributes[attr.GEN_AI_RESPONSE_MODEL] == "m-2"
    assert span.attributes[attr.CACHED_INPUT_TOKENS] == 1


@pytest.mark.parametrize("status, outcome", [(503, "rejected"), (429, "rejected"), (500, "error"), (404, "error")])
def test_statuses(traced, status, outcome):
    span = traced(recording.answered_status, status, "boom")
    assert span.attributes[attr.REQUEST_OUTCOME] == outcome
    assert span.attributes[attr.ERROR_TYPE] == str(status)


def test_a_refused_ending_still_ends_the_request(traced, caplog):
    """Usage the tracer refuses must not leave the request open (in-flight leak) or reach the client."""
    with caplog.at_level(logging.ERROR):
        span = traced(recording.completed, ResponseFacts(input_tokens=-5), streamed=False)
    assert span.attributes[attr.REQUEST_OUTCOME] == "error"
    assert span.attributes[attr.ERROR_TYPE] == "instrumentation_error"
    assert "input_tokens" in span.status.description
    assert "recording completed failed" in caplog.text
    labels = {"model": "m", "instance": "engine:8000", "pool": "", "strategy": ""}
    assert traced.tracer.registry.get_sample_value(request_signals.IN_FLIGHT.name, labels) == 0
