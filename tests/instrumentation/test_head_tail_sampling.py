"""Head and tail sampling together: a head-dropped request that fails or turns slow keeps its request
span and timeline; the rest of the head-dropped requests export nothing."""

from __future__ import annotations

import json
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry

from infersight import attributes as attr
from infersight.instrumentation import RequestTracer, TailSampler, setup_tracing
from infersight.instrumentation.propagation import format_traceparent
from infersight.instrumentation.sampling import HeadTailSampler

MODEL = "llama-3-8b"


def head_dropping(sampler=None, random_share: float = 0.0, min_samples: int = 100):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler or HeadTailSampler(ParentBased(TraceIdRatioBased(0.0))))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    tracer = RequestTracer(registry=registry, tracer_provider=provider,
                           sampler=TailSampler(random_share=random_share, min_samples=min_samples, seed=3))
    return tracer, exporter, registry


def test_a_head_dropped_request_that_fails_keeps_its_span_and_timeline():
    tracer, exporter, registry = head_dropping()
    req = tracer.start(MODEL, instance="10.0.0.7:8000", max_tokens=64)
    assert not req.span.is_recording()  # the head ratio dropped it at the start
    dropped_trace = req.trace_id
    for _ in range(3):
        req.token()
    summary = req.fail("upstream_5xx", output_tokens=3)
    (span,) = exporter.get_finished_spans()
    a = span.attributes
    assert span.name == f"chat {MODEL}" and f"{span.context.trace_id:032x}" == dropped_trace == summary.trace_id
    assert a[attr.SAMPLING_REASON] == "error" and a[attr.SAMPLING_HEAD_DROPPED] is True
    assert a[attr.REQUEST_OUTCOME] == "error" and a[attr.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert json.loads(a[attr.TOKEN_OFFSETS_US]) == summary.offsets_us and len(summary.offsets_us) == 3
    assert span.start_time == req._start_wall_ns and span.end_time > span.start_time
    assert span.status.is_ok is False
    assert registry.get_sample_value("infersight_tracing_timelines_total", {"model": MODEL, "reason": "error"}) == 1


def test_a_head_dropped_request_that_turns_slow_keeps_its_span():
    tracer, exporter, _ = head_dropping(min_samples=20)
    for _ in range(40):
        tracer.sampler.decide(MODEL, "success", 0.001, 0.002)  # a fast history
    req = tracer.start(MODEL)
    while time.perf_counter_ns() < req._start_ns + 5_000_000:  # first token after 5 ms
        pass
    req.token()
    assert req.finish().sampling_reason == "slow_ttft"
    (span,) = exporter.get_finished_spans()
    assert span.attributes[attr.SAMPLING_REASON] == "slow_ttft" and attr.TOKEN_OFFSETS_US in span.attributes


def test_other_head_dropped_requests_export_nothing_and_are_not_counted_as_random_timelines():
    tracer, exporter, registry = head_dropping(random_share=1.0)
    for _ in range(5):
        with tracer.start(MODEL) as req:
            req.token()
    assert exporter.get_finished_spans() == ()
    assert req.summary.sampling_reason == "not_kept" and req.summary.offsets_us is None
    assert registry.get_sample_value("infersight_tracing_timelines_total", {"model": MODEL, "reason": "random"}) is None
    assert registry.get_sample_value("infersight_tracing_timelines_total", {"model": MODEL, "reason": "not_kept"}) == 5


def test_the_kept_span_is_a_child_of_the_callers_span():
    tracer, exporter, _ = head_dropping()
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"  # not sampled upstream
    req = tracer.start(MODEL, headers={"traceparent": caller})
    req.timeout("idle")
    (span,) = exporter.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert format_traceparent(span.context).endswith("-01")  # exported as sampled


def test_without_the_head_tail_sampler_the_head_decision_stands():
    tracer, exporter, _ = head_dropping(sampler=ALWAYS_OFF)
    tracer.start(MODEL).fail("upstream_5xx")
    assert exporter.get_finished_spans() == ()


def test_setup_tracing_installs_it_around_the_head_ratio():
    handle = setup_tracing("gw", exporter=InMemorySpanExporter(), head_ratio=0.25)
    try:
        sampler = handle.provider.sampler
        assert isinstance(sampler, HeadTailSampler) and "TraceIdRatioBased{0.25}" in sampler.get_description()
    finally:
        handle.shutdown()
    handle = setup_tracing("gw", exporter=InMemorySpanExporter())
    try:
        assert isinstance(handle.provider.sampler, HeadTailSampler)
    finally:
        handle.shutdown()
