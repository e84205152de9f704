"""Shared helpers for the tracer tests: a tracer wired to the OTel SDK's in-memory exporter."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry

from infersight.instrumentation import RequestTracer, TailSampler


@dataclass
class Traced:
    tracer: RequestTracer
    exporter: InMemorySpanExporter
    registry: CollectorRegistry

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def by_name(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.by_name(name)
        assert len(found) == 1, f"expected one {name!r} span, got {[s.name for s in self.spans()]}"
        return found[0]

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


def make_traced(*, random_share: float = 0.0, min_samples: int = 100, head_ratio: float | None = None,
                seed: int = 7, service: str = "gateway", **tracer_options) -> Traced:
    exporter = InMemorySpanExporter()
    kwargs = {}
    if head_ratio is not None:
        kwargs["sampler"] = ParentBased(TraceIdRatioBased(head_ratio))
    provider = TracerProvider(**kwargs)
    # Simple (synchronous) processor: every ended span is visible to the test at once.
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    sampler = TailSampler(random_share=random_share, min_samples=min_samples, seed=seed)
    tracer = RequestTracer(registry=registry, tracer_provider=provider, sampler=sampler, provider_name="vllm",
                           **tracer_options)
    return Traced(tracer, exporter, registry)


def replay_tokens(req, offsets_ms) -> None:
    """Give ``req`` tokens at exact offsets (ms) from its start, without waiting for them: the
    request's start is moved back so that every token lies in the past, as real ones would."""
    shift_ns = (max(offsets_ms) + 1) * 1_000_000
    req._start_ns -= shift_ns
    req._start_wall_ns -= shift_ns
    for offset in offsets_ms:
        req._times.append(req._start_ns + round(offset * 1_000_000))
