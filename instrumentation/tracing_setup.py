"""``setup_tracing()``: a TracerProvider with an OTLP exporter and a burst-proof span pipeline.

Two SDK defaults lose data silently, and this module changes both (measured here):

- The BatchSpanProcessor queue holds 2,048 spans; a burst overflows it and the SDK drops the
  overflow with one log line ("Queue full"): 23-33 % of spans in our burst test. We size the queue
  at 65,536 spans (about 100 MiB at worst, bounded) and count every dropped span in
  ``infersight_tracing_spans_dropped_total{reason="queue_full"}``; failed exports count with
  ``reason="export_failed"``.
- SpanLimits keep 128 events per span and evict the *oldest*: a 200-token span with one event per
  token loses its first tokens, the ones TTFT depends on. We raise the event limit and count
  evicted events and attributes in ``infersight_tracing_span_items_dropped_total``. (Our own token
  timelines travel as one attribute, never as events, so they are immune either way.)

Settings come from the arguments, else the standard ``OTEL_*`` environment variables
(``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``/``ENDPOINT``/``HEADERS``/``TIMEOUT``, ``OTEL_BSP_*``,
``OTEL_SPAN_*_LIMIT``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), else our defaults.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry

from infersight.instrumentation.sampling import HeadTailSampler
from infersight.listen import parse_listen
from infersight.signals import request

log = logging.getLogger(__name__)

PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_PROTOCOL = "grpc"
DEFAULT_MAX_QUEUE_SIZE = 65_536
DEFAULT_MAX_EXPORT_BATCH_SIZE = 4_096
DEFAULT_SCHEDULE_DELAY_MS = 500
DEFAULT_MAX_SPAN_EVENTS = 16_384
DEFAULT_MAX_SPAN_ATTRIBUTES = 256


class TracingSetupError(ValueError):
    """A tracing setting is invalid; the message names the setting and what is expected."""


def _setting(value: Any, env_names: Sequence[str], default: Any, convert=int, name: str = "") -> Any:
    """The explicit value, else the first set environment variable, else the default."""
    if value is not None:
        return value
    for env in env_names:
        raw = os.environ.get(env)
        if raw not in (None, ""):
            try:
                return convert(raw)
            except ValueError:
                raise TracingSetupError(f"{env}={raw!r} is not a valid {name or 'value'}") from None
    return default


# The OTLP exporters' own loggers: they log every retry and every failed batch. While an export is
# failing we let their first messages through and hold the rest, until an export succeeds again.
_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.grpc.exporter",
                     "opentelemetry.exporter.otlp.proto.http.trace_exporter",
                     "opentelemetry.exporter.otlp.proto.http._common")


class _QuietWhileFailing(logging.Filter):
    """Holds the exporters' log records while any of our exporters is in a failing spell."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.failing


_QUIET = _QuietWhileFailing()
for _name in _EXPORTER_LOGGERS:
    logging.getLogger(_name).addFilter(_QUIET)


class CountingExporter(SpanExporter):
    """Wraps an exporter and counts the spans of every failed export as dropped.

    A failing collector is logged once when exports start failing (with the exporter's own first
    messages) and once when they recover, not once per batch: the count is in
    ``infersight_tracing_spans_dropped_total{reason="export_failed"}``.
    """

    def __init__(self, inner: SpanExporter, on_failed, target: str = "the collector", on_taken=None) -> None:
        self.inner = inner
        self._on_failed = on_failed
        self._on_taken = on_taken
        self.target = target
        self.failing = False
        self.lost_in_spell = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._on_taken is not None:
            self._on_taken(len(spans))
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - an exporter bug must not kill the export thread
            if not self.failing:
                log.exception("span exporter raised; %d spans lost", len(spans))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._on_failed(len(spans))
            self.lost_in_spell += len(spans)
            if not self.failing:
                self.failing = True
                _QUIET.failing.add(id(self))
                log.warning("infersight: span export to %s failing; spans are dropped and counted in "
                            "%s{reason=\"export_failed\"} (logged again when exports recover)", self.target,
                            request.SPANS_DROPPED.name)
        elif self.failing:
            self.failing = False
            _QUIET.failing.discard(id(self))
            log.warning("infersight: span export to %s recovered after %d spans were lost", self.target,
                        self.lost_in_spell)
            self.lost_in_spell = 0
        return result

    def shutdown(self) -> None:
        _QUIET.failing.discard(id(self))
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class DropCountingSpanProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor that counts what it would otherwise drop silently.

    The SDK drops a span when its queue is full with only a log line. We keep the queue's length
    ourselves, through public behaviour only: +1 for each span handed to the SDK, -N when the SDK
    takes a batch of N out of the queue to export it (our exporter wrapper is called right then), and
    no change when the queue is full (the SDK evicts the oldest span for the new one). The SDK's own
    public count (``meter_provider=`` with its internal metrics) is off unless the process-wide
    ``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`` is set, which a library must not force on its host.
    The count is exact up to a race: it can be one high when the export thread takes a batch between
    our check and the SDK's append (the SDK's own "Queue full" log has the same race). It never
    misses a burst.
    """

    def __init__(self, exporter: SpanExporter, *, service: str, registry: CollectorRegistry, max_queue_size: int,
                 schedule_delay_millis: float, max_export_batch_size: int, target: str = "the collector") -> None:
        dropped = request.SPANS_DROPPED.register(registry)
        items = request.SPAN_ITEMS_DROPPED.register(registry)
        self.queue_full = dropped.labels(service, "queue_full")
        self.export_failed = dropped.labels(service, "export_failed")
        self._events_dropped = items.labels(service, "event")
        self._attributes_dropped = items.labels(service, "attribute")
        self._links_dropped = items.labels(service, "link")
        self.service = service
        self.max_queue_size = max_queue_size
        self._queued = 0  # spans in the SDK's queue, as far as we can tell (see the class docstring)
        self._queued_lock = threading.Lock()
        super().__init__(CountingExporter(exporter, self.export_failed.inc, target, on_taken=self._taken),
                         max_queue_size=max_queue_size, schedule_delay_millis=schedule_delay_millis,
                         max_export_batch_size=max_export_batch_size)

    def _taken(self, count: int) -> None:
        with self._queued_lock:
            self._queued = max(0, self._queued - count)

    def _enqueue(self) -> bool:
        """Count one span into the queue; False when the queue is full (the SDK then drops one)."""
        with self._queued_lock:
            if self._queued >= self.max_queue_size:
                return False
            self._queued += 1
            return True

    def on_end(self, span: ReadableSpan) -> None:
        if span.dropped_events:
            self._events_dropped.inc(span.dropped_events)
        if span.dropped_attributes:
            self._attributes_dropped.inc(span.dropped_attributes)
        if span.dropped_links:
            self._links_dropped.inc(span.dropped_links)
        if span.context is not None and span.context.trace_flags.sampled and not self._enqueue():
            self.queue_full.inc()
        super().on_end(span)


@dataclass
class TracingHandle:
    """What :func:`setup_tracing` built: pass ``provider`` to RequestTracer; shut down at exit."""

    provider: TracerProvider
    processor: DropCountingSpanProcessor
    exporter: SpanExporter
    registry: CollectorRegistry
    protocol: str | None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self, timeout_s: float = 3.0) -> bool:
        """Export the spans still queued and stop, waiting at most ``timeout_s``.

        Without the bound, an unreachable collector holds the process for the exporter's whole retry
        schedule (~7-10 s) on every Ctrl-C. Returns False when it gave up waiting (those spans are lost:
        the collector was not taking them anyway).
        """
        stopper = threading.Thread(target=self.provider.shutdown, name="infersight-tracing-shutdown", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        return not stopper.is_alive()

    def dropped_spans(self) -> float:
        """Spans lost so far (queue full plus failed exports)."""
        return sum(self.registry.get_sample_value(request.SPANS_DROPPED.name,
                                                  {"service": self.processor.service, "reason": reason}) or 0.0
                   for reason in ("queue_full", "export_failed"))


def _protocol(value: str | None) -> str:
    protocol = _setting(value, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
                        DEFAULT_PROTOCOL, str)
    protocol = {"http": "http/protobuf"}.get(protocol, protocol)
    if protocol not in PROTOCOLS:
        raise TracingSetupError(f"OTLP protocol {protocol!r} is not supported; use one of {', '.join(PROTOCOLS)} "
                                "(argument protocol= or OTEL_EXPORTER_OTLP_PROTOCOL)")
    return protocol


def _check_endpoint(endpoint: str) -> None:
    parsed = urlparse(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TracingSetupError(f"OTLP endpoint {endpoint!r} is not a URL; expected e.g. http://127.0.0.1:4317 "
                                "(gRPC) or http://127.0.0.1:4318 (HTTP)")


def make_otlp_exporter(protocol: str, endpoint: str | None = None, headers: Mapping[str, str] | None = None,
                       timeout_s: float | None = None) -> SpanExporter:
    """An OTLP span exporter; ``endpoint`` None leaves it to the ``OTEL_EXPORTER_OTLP_*`` variables.

    For HTTP, a bare ``http://host:4318`` gets the standard ``/v1/traces`` path appended.
    """
    if endpoint is not None:
        _check_endpoint(endpoint)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint, headers=dict(headers) if headers else None, timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    if endpoint is not None and urlparse(endpoint).path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, headers=dict(headers) if headers else None, timeout=timeout_s)


def setup_tracing(service_name: str | None = None, *, protocol: str | None = None, endpoint: str | None = None,
                  headers: Mapping[str, str] | None = None, exporter: SpanExporter | None = None,
                  head_ratio: float | None = None, max_queue_size: int | None = None,
                  max_export_batch_size: int | None = None, schedule_delay_ms: float | None = None,
                  max_span_events: int | None = None, max_span_attributes: int | None = None,
                  export_timeout_s: float | None = None, registry: CollectorRegistry | None = None,
                  resource_attributes: Mapping[str, Any] | None = None, set_global: bool = False) -> TracingHandle:
    """Configure tracing for one service and return the handle (provider, processor, metrics).

    ``exporter`` replaces the OTLP exporter (tests pass the SDK's in-memory exporter).
    ``head_ratio`` is the share of traces whose spans are recorded (ParentBased: an incoming
    sampled traceparent is honored); None leaves the choice to ``OTEL_TRACES_SAMPLER``, default
    all. ``registry`` receives the dropped-span counters (a private one when omitted).
    """
    if head_ratio is not None and not 0 <= head_ratio <= 1:
        raise TracingSetupError(f"head_ratio must be within 0..1, got {head_ratio}")
    queue_size = _setting(max_queue_size, ("OTEL_BSP_MAX_QUEUE_SIZE",), DEFAULT_MAX_QUEUE_SIZE, name="integer")
    batch_size = _setting(max_export_batch_size, ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE",), DEFAULT_MAX_EXPORT_BATCH_SIZE,
                          name="integer")
    delay_ms = _setting(schedule_delay_ms, ("OTEL_BSP_SCHEDULE_DELAY",), DEFAULT_SCHEDULE_DELAY_MS, float, "number")
    events = _setting(max_span_events, ("OTEL_SPAN_EVENT_COUNT_LIMIT",), DEFAULT_MAX_SPAN_EVENTS, name="integer")
    span_attributes = _setting(max_span_attributes, ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",),
                               DEFAULT_MAX_SPAN_ATTRIBUTES, name="integer")
    if queue_size < 1 or batch_size < 1 or delay_ms <= 0 or events < 0 or span_attributes < 1:
        raise TracingSetupError("max_queue_size, max_export_batch_size and max_span_attributes must be >= 1, "
                                "schedule_delay_ms > 0 and max_span_events >= 0")
    if batch_size > queue_size:
        raise TracingSetupError(f"max_export_batch_size ({batch_size}) must not exceed max_queue_size ({queue_size})")

    chosen_protocol = None
    if exporter is None:
        chosen_protocol = _protocol(protocol)
        exporter = make_otlp_exporter(chosen_protocol, endpoint, headers, export_timeout_s)

    resource_values = dict(resource_attributes or {})
    if service_name:
        resource_values[SERVICE_NAME] = service_name
    resource = Resource.create(resource_values)  # merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    service = str(resource.attributes.get(SERVICE_NAME, "unknown_service"))

    provider_args: dict[str, Any] = {
        "resource": resource,
        "span_limits": SpanLimits(max_events=events, max_span_attributes=span_attributes),
    }
    if head_ratio is not None:
        head = ParentBased(TraceIdRatioBased(head_ratio))
    else:
        # What TracerProvider() itself picks without a sampler (OTEL_TRACES_SAMPLER / _ARG, else
        # parentbased_always_on), read through its public ``sampler``: the SDK has no public function for it.
        head = TracerProvider(resource=resource, shutdown_on_exit=False).sampler
    # A request the head drops that then fails or turns slow still gets its request span (sampling.py).
    provider_args["sampler"] = HeadTailSampler(head)
    provider = TracerProvider(**provider_args)
    registry = registry if registry is not None else CollectorRegistry()
    target = endpoint or _env_endpoint() or "the OTLP default endpoint"
    processor = DropCountingSpanProcessor(exporter, service=service, registry=registry, max_queue_size=queue_size,
                                          schedule_delay_millis=delay_ms, max_export_batch_size=batch_size,
                                          target=target)
    provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(provider)
    return TracingHandle(provider, processor, exporter, registry, chosen_protocol)


def _env_endpoint() -> str | None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if os.environ.get(name):
            return os.environ[name]
    return None


def receiver_endpoint(listeners, protocol: str) -> str:
    """Our own receiver's URL from the config's ``listeners`` (a wildcard bind is reached on loopback)."""
    listen = listeners.otlp_grpc if protocol == "grpc" else listeners.otlp_http
    return f"http://{parse_listen(listen).dialable()}"


def setup_tracing_from_config(tracing_config, service_name: str, *, registry: CollectorRegistry | None = None,
                              set_global: bool = False, listeners=None) -> TracingHandle:
    """:func:`setup_tracing` from the ``tracing`` section of infersight.yaml.

    Without ``tracing.otlp_endpoint`` (and no ``OTEL_EXPORTER_OTLP_*ENDPOINT`` variable), spans go to
    our own receiver: ``listeners.otlp_grpc`` (or ``otlp_http`` for HTTP) when ``listeners`` is given.
    """
    endpoint = tracing_config.otlp_endpoint
    if endpoint is None and listeners is not None and _env_endpoint() is None:
        endpoint = receiver_endpoint(listeners, _protocol(tracing_config.otlp_protocol))
    return setup_tracing(service_name, protocol=tracing_config.otlp_protocol, endpoint=endpoint,
                         head_ratio=tracing_config.head_ratio, max_queue_size=tracing_config.max_queue_size,
                         max_export_batch_size=tracing_config.max_export_batch_size,
                         schedule_delay_ms=tracing_config.schedule_delay_ms,
                         max_span_events=tracing_config.max_span_events, registry=registry, set_global=set_global)
