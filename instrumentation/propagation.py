"""W3C traceparent inject/extract, so the gateway's trace id becomes the engine's trace id.

We use the W3C propagator directly rather than the global one: it works whether or not the
application configured OpenTelemetry propagators, and a gateway and an engine always agree.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()
TRACEPARENT = "traceparent"


class _CaseInsensitiveGetter:
    """Reads headers whatever their case (HTTP header names are case-insensitive)."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            lowered = key.lower()
            value = next((v for k, v in carrier.items() if k.lower() == lowered), None)
        if value is None:
            return None
        return [value] if isinstance(value, str) else list(value)

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier.keys())


_GETTER = _CaseInsensitiveGetter()


def extract_context(headers: Mapping[str, str] | None) -> Context | None:
    """The remote parent carried by ``headers`` (``traceparent``/``tracestate``), or None.

    A missing or malformed traceparent yields None: the request then starts a new trace, as the
    W3C spec asks, instead of failing the request.
    """
    if not headers:
        return None
    context = _W3C.extract(headers, getter=_GETTER)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def inject_context(headers: MutableMapping[str, str], span: trace.Span) -> MutableMapping[str, str]:
    """Write ``span``'s traceparent (and tracestate) into ``headers`` and return them."""
    _W3C.inject(headers, context=trace.set_span_in_context(span))
    return headers


def format_traceparent(span_context: trace.SpanContext) -> str:
    """``00-<trace id>-<span id>-<flags>`` for a span context."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"
