"""Request tracing for gateways and engines, token timelines, tail sampling, the instrumenting proxy.

The public API (see :mod:`.tracer` for a full example)::

    from infersight.instrumentation import RequestTracer, TailSampler, GatewayHealth, setup_tracing

- :class:`RequestTracer` / :class:`RequestContext`: one context per request; queued, routed, token,
  finish, retry, timeout, cancel, reject; produces catalog metrics and GenAI spans.
- :class:`TailSampler`: keeps token timelines of slow (rolling p99), failed or random requests.
- :class:`GatewayHealth`: upstream instance states, ejections and health checks as metrics.
- :func:`setup_tracing`: TracerProvider + OTLP exporter + a burst-sized BatchSpanProcessor.
- :func:`extract_context` / :func:`inject_context`: W3C traceparent helpers.
"""

from infersight.instrumentation.health import GatewayHealth
from infersight.instrumentation.propagation import extract_context, format_traceparent, inject_context
from infersight.instrumentation.sampling import RollingQuantile, TailSampler
from infersight.instrumentation.tracer import Candidate, RequestContext, RequestSummary, RequestTracer, TracerClock
from infersight.instrumentation.tracing_setup import TracingHandle, setup_tracing, setup_tracing_from_config

__all__ = [
    "Candidate",
    "GatewayHealth",
    "RequestContext",
    "RequestSummary",
    "RequestTracer",
    "TracerClock",
    "RollingQuantile",
    "TailSampler",
    "TracingHandle",
    "extract_context",
    "format_traceparent",
    "inject_context",
    "setup_tracing",
    "setup_tracing_from_config",
]
