"""The request tracer: one context per request, producing catalog metrics and GenAI spans.

Usage in a gateway (an engine or a proxy calls the same methods, minus ``queued``/``routed``; an
engine marks the end of its own queue with ``req.scheduled(cached_input_tokens=...)``)::

    from prometheus_client import CollectorRegistry
    from infersight.instrumentation import Candidate, RequestTracer, TailSampler, setup_tracing

    tracing = setup_tracing("gateway")                     # OTLP exporter from OTEL_* env vars
    registry = CollectorRegistry()                         # serve it on /metrics
    tracer = RequestTracer(registry=registry, tracer_provider=tracing.provider,
                           sampler=TailSampler(random_share=0.01), provider_name="vllm")

    with tracer.start("llama-3-8b", headers=incoming_headers, pool="stable",
                      strategy="cache_aware") as req:     # request arrival
        req.queued()                                       # waits in the gateway queue
        req.routed("10.0.0.7:8000", candidates=[Candidate("10.0.0.7:8000", score=0.2,
                   estimated_finish_ms=840, cache_ratio=0.9)])
        headers = req.inject({})                           # traceparent for the upstream call
        for chunk in upstream_stream(headers):
            req.token()                                    # hot path: one append, ~100 ns
        req.finish("stop", input_tokens=812, output_tokens=256, cached_input_tokens=768)

Leaving the ``with`` block without a finish call finishes the request: as ``success`` on a normal
exit, ``cancelled`` on ``asyncio.CancelledError``, ``error`` on any other exception. Other endings:
``req.retry(backoff_s=0.1)`` then ``req.routed(...)`` again, ``req.timeout("ttft" | "total" |
"idle")``, ``req.cancel()``, ``req.fail("upstream_5xx")``, ``req.reject("overloaded")``. Every
ending returns a :class:`RequestSummary`; a second ending is ignored and returns the first.

The span tree per request and service: the request span ``"<operation> <model>"`` (SERVER) with
children ``gateway.queue``, ``gateway.route`` and one ``upstream`` (CLIENT) span per attempt in a
gateway; ``engine.queue``, ``engine.prefill`` and ``engine.decode`` in an engine that calls
``scheduled``. With traceparent carried between them, one trace holds the whole chain.
Token times are not span events: the tail sampler keeps the whole timeline as one attribute,
``llm.token.offsets_us`` (its JSON text, DESIGN 5), only for the requests that matter (see
:mod:`.sampling`). A stream longer than ``max_timeline_tokens`` keeps its last readings and is
counted in ``infersight_tracing_timelines_truncated_total`` (see :mod:`.timeline`).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CollectorRegistry

from infersight import attributes as attr
from infersight.attributes import Outcome
from infersight.instances import instance_attributes
from infersight.instrumentation import sampling, timeline
from infersight.instrumentation.client_retries import ClientRetryDetector
from infersight.instrumentation.ending import Ending, check_details
from infersight.instrumentation.metrics import RequestMetrics
from infersight.instrumentation.propagation import extract_context, format_traceparent, inject_context
from infersight.signals import request as request_signals

_now = time.perf_counter_ns  # the hot path's clock (token()); other steps read the tracer's clock
log = logging.getLogger(__name__)
OUTCOMES = request_signals.OUTCOMES
TIMEOUT_KINDS = request_signals.TIMEOUT_KINDS
SCOPE = "infersight.instrumentation"


@dataclass(frozen=True)
class Candidate:
    """One instance the router considered, with the figures it decided on."""

    instance: str
    score: float | None = None
    estimated_finish_ms: float | None = None
    cache_ratio: float | None = None  # share of the prompt already in this instance's prefix cache

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"instance": self.instance}
        if self.score is not None:
            out["score"] = self.score
        if self.estimated_finish_ms is not None:
            out["est_finish_ms"] = self.estimated_finish_ms
        if self.cache_ratio is not None:
            out["cache_ratio"] = self.cache_ratio
        return out


@dataclass(frozen=True)
class RequestSummary:
    """How a request ended, as recorded in its metrics and request span."""

    outcome: str
    finish_reason: str | None
    ttft_s: float | None
    e2e_s: float
    queue_s: float | None
    token_count: int
    attempts: int
    sampling_reason: str
    offsets_us: list[int] | None  # the kept timeline, None when not kept
    trace_id: str  # 32 hex digits

    @property
    def timeline_kept(self) -> bool:
        return self.offsets_us is not None


@dataclass(frozen=True)
class TracerClock:
    """Where a tracer reads time: a monotonic reading in ns, and the wall time (Unix ns) of now."""

    perf_ns: Callable[[], int]
    wall_ns: Callable[[], int]


SYSTEM_CLOCK = TracerClock(time.perf_counter_ns, time.time_ns)


class RequestTracer:
    """Creates a :class:`RequestContext` per request; holds the metrics, span tracer and sampler.

    ``registry`` is where the catalog metrics are registered (a private one when omitted, see
    ``.registry``). ``tracer_provider`` defaults to the global OpenTelemetry provider; its sampler
    applies the head ratio to request spans. ``sampler`` makes the tail decision on timelines.
    ``max_timeline_tokens`` bounds each request's token-time buffer (the last ones are kept).
    ``clock`` replaces the process's clocks for a replay of requests that happened elsewhere (the
    simulator's requests in the real-time demo): ``clock.perf_ns()`` is read where the tracer notes a
    step, ``clock.wall_ns()`` once per request for the span timestamps. :meth:`RequestContext.token`
    keeps reading ``time.perf_counter_ns`` (it is the hot path), so a replay records its token times
    through :meth:`RequestContext.token_sink` with ``clock.perf_ns`` readings.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None,
                 tracer_provider: trace.TracerProvider | None = None,
                 sampler: sampling.TailSampler | None = None, provider_name: str | None = None,
                 span_kind: SpanKind = SpanKind.SERVER,
                 max_timeline_tokens: int = timeline.DEFAULT_MAX_TOKENS,
                 clock: TracerClock | None = None) -> None:
        if max_timeline_tokens < 1:
            raise ValueError(f"max_timeline_tokens must be at least 1, got {max_timeline_tokens}")
        self.max_timeline_tokens = max_timeline_tokens
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = RequestMetrics(self.registry)
        self.client_retries = ClientRetryDetector()
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self.otel = provider.get_tracer(SCOPE)
        self.sampler = sampler if sampler is not None else sampling.TailSampler()
        self.provider_name = provider_name
        self.span_kind = span_kind
        self.clock = clock if clock is not None else SYSTEM_CLOCK
        self._perf_ns = self.clock.perf_ns

    def start(self, model: str, *, operation: str = "chat", headers: Mapping[str, str] | None = None,
              request_id: str | None = None, instance: str = "", pool: str = "", strategy: str = "",
              max_tokens: int | None = None, provider_name: str | None = None,
              stream: bool | None = None) -> RequestContext:
        """Begin tracing a request that arrives now.

        ``headers`` are the incoming request's headers: a W3C ``traceparent`` there makes this
        request span a child of the caller's span (same trace id). ``instance`` is known at start
        in an engine or proxy; a gateway leaves it empty and calls :meth:`RequestContext.routed`.
        ``stream`` says whether the client asked for a streamed answer (``gen_ai.request.stream``).
        """
        if not model:
            raise ValueError("model must be a non-empty string (it is the model label)")
        return RequestContext(self, model, operation, headers, request_id, instance, pool, strategy, max_tokens,
                              provider_name or self.provider_name, stream)


class RequestContext:
    """The tracing state of one request. Not thread-safe: one request, one task or thread."""

    __slots__ = ("_tracer", "model", "operation", "instance", "pool", "strategy", "_start_ns", "_start_wall_ns",
                 "_times", "_first_token_ns", "_queued_ns", "_queue_s", "_span", "_recording", "_upstream",
                 "attempt", "_backoff_s", "_summary", "request_id", "_scheduled_ns", "_cached_input_tokens",
                 "_route_estimate_ms", "_route_cache_ratio", "_provider", "_stream", "_attempt_ns",
                 "_parent_context", "_start_attributes", "_client_retry", "token")

    def __init__(self, tracer: RequestTracer, model: str, operation: str, headers: Mapping[str, str] | None,
                 request_id: str | None, instance: str, pool: str, strategy: str, max_tokens: int | None,
                 provider_name: str | None, stream: bool | None = None) -> None:
        self._start_wall_ns = tracer.clock.wall_ns()
        self._start_ns = tracer._perf_ns()
        self._tracer = tracer
        self.model, self.operation = model, operation
        self.instance, self.pool, self.strategy = instance, pool, strategy
        self._times = timeline.new_buffer(tracer.max_timeline_tokens)
        # token(): the buffer's own reading of perf_counter_ns (a C call); a stand-in clock set on _now
        # (tests) goes through the Python method instead.
        self.token: Callable[[], None] = self._times.token if _now is time.perf_counter_ns else self._token_from_now
        self._first_token_ns: int | None = None  # a mark without a reading (first_token(), tokens())
        self._queued_ns: int | None = None
        self._queue_s: float | None = None
        self._upstream: trace.Span | None = None
        self.attempt = 0
        self._backoff_s: float | None = None
        self._scheduled_ns: int | None = None
        self._cached_input_tokens: int | None = None
        self._route_estimate_ms: float | None = None
        self._route_cache_ratio: float | None = None
        self._summary: RequestSummary | None = None
        self._provider, self._stream = provider_name, stream
        self._attempt_ns: int | None = None  # when the current upstream attempt started
        # A client's retry (SDK retry header, or its idempotency key / request id seen before):
        # counted at the end, under the instance that served it.
        self._client_retry = tracer.client_retries.is_retry(headers, request_id)
        attributes: dict[str, Any] = {attr.GEN_AI_OPERATION_NAME: operation, attr.GEN_AI_REQUEST_MODEL: model}
        if provider_name:
            attributes[attr.GEN_AI_PROVIDER_NAME] = provider_name
        if max_tokens is not None:
            attributes[attr.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
        if stream is not None:
            attributes[attr.GEN_AI_REQUEST_STREAM] = stream
        self._parent_context = extract_context(headers)
        self._start_attributes = attributes  # for a request span made at the end (head-dropped, tail-kept)
        self._span = tracer.otel.start_span(f"{operation} {model}", context=self._parent_context,
                                            kind=tracer.span_kind, start_time=self._start_wall_ns,
                                            attributes=attributes)
        self._recording = self._span.is_recording()
        # The gateway's request id: the caller's, else the trace id (which travels in traceparent).
        self.request_id = request_id or self.trace_id
        if self._recording:
            self._span.set_attribute(attr.REQUEST_ID, self.request_id)
        tracer.metrics.add_in_flight((model, instance, pool, strategy), 1)

    # -- identity and propagation ------------------------------------------------------------------
    @property
    def span(self) -> trace.Span:
        """The request span (for extra attributes; end it only through this context)."""
        return self._span

    @property
    def trace_id(self) -> str:
        return f"{self._span.get_span_context().trace_id:032x}"

    @property
    def traceparent(self) -> str:
        """The traceparent to send upstream: the current attempt's span, else the request span."""
        return format_traceparent((self._upstream or self._span).get_span_context())

    def inject(self, headers: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
        """Add ``traceparent`` (and ``tracestate``) for the upstream call to ``headers``; return them."""
        return inject_context({} if headers is None else headers, self._upstream or self._span)

    def _wall(self, perf_ns: int) -> int:
        return self._start_wall_ns + (perf_ns - self._start_ns)

    # -- gateway steps ------------------------------------------------------------------------------
    def queued(self) -> None:
        """The request entered the gateway queue (counted in the queue-depth gauge until routed)."""
        if self._queued_ns is not None or self._summary is not None:
            return
        self._queued_ns = self._tracer._perf_ns()
        self._tracer.metrics.add_queue_depth(self.model, self.pool, self.strategy, 1)

    def _leave_queue(self, now_ns: int) -> None:
        if self._queued_ns is None or self._queue_s is not None:
            return
        self._queue_s = (now_ns - self._queued_ns) / 1e9
        self._tracer.metrics.add_queue_depth(self.model, self.pool, self.strategy, -1)
        if self._recording:
            span = self._tracer.otel.start_span(attr.SPAN_GATEWAY_QUEUE, context=trace.set_span_in_context(self._span),
                                                start_time=self._wall(self._queued_ns))
            span.end(end_time=self._wall(now_ns))

    def routed(self, instance: str, *, strategy: str | None = None, pool: str | None = None,
               candidates: Sequence[Candidate] = (), estimated_finish_ms: float | None = None,
               prefix_cache_ratio: float | None = None) -> None:
        """The router picked ``instance``: ends the queue wait and starts the upstream attempt.

        ``candidates`` are the instances it weighed (scores, estimated finish, prefix-cache ratio);
        ``estimated_finish_ms``/``prefix_cache_ratio`` describe the chosen one. After a
        :meth:`retry`, call ``routed`` again for the next attempt (same or another instance).
        """
        if self._summary is not None:
            return
        now_ns = self._tracer._perf_ns()
        self._leave_queue(now_ns)
        self._route_estimate_ms = float(estimated_finish_ms) if estimated_finish_ms is not None else None
        self._route_cache_ratio = float(prefix_cache_ratio) if prefix_cache_ratio is not None else None
        self._relabel(instance, pool if pool is not None else self.pool,
                      strategy if strategy is not None else self.strategy)
        if self._recording:
            route_attrs: dict[str, Any] = {**instance_attributes(instance), attr.RETRY_ATTEMPT: self.attempt}
            if self.strategy:
                route_attrs[attr.ROUTING_STRATEGY] = self.strategy
            if self.pool:
                route_attrs[attr.POOL] = self.pool
            if candidates:
                route_attrs[attr.ROUTING_CANDIDATES] = json.dumps([c.as_dict() for c in candidates])
            if estimated_finish_ms is not None:
                route_attrs[attr.ROUTING_ESTIMATED_FINISH_MS] = float(estimated_finish_ms)
            if prefix_cache_ratio is not None:
                route_attrs[attr.ROUTING_PREFIX_CACHE_RATIO] = float(prefix_cache_ratio)
            wall = self._wall(now_ns)
            span = self._tracer.otel.start_span(attr.SPAN_ROUTING, context=trace.set_span_in_context(self._span),
                                                start_time=wall, attributes=route_attrs)
            span.end(end_time=wall)
        self._start_upstream(now_ns)

    def upstream(self, instance: str | None = None) -> None:
        """Start an upstream attempt without a routing decision (a proxy or a fixed backend)."""
        if self._summary is not None:
            return
        if instance is not None and instance != self.instance:
            self._relabel(instance, self.pool, self.strategy)
        self._start_upstream(self._tracer._perf_ns())

    def _relabel(self, instance: str, pool: str, strategy: str) -> None:
        if (instance, pool, strategy) == (self.instance, self.pool, self.strategy):
            return
        metrics = self._tracer.metrics
        metrics.add_in_flight((self.model, self.instance, self.pool, self.strategy), -1)
        self.instance, self.pool, self.strategy = instance, pool, strategy
        metrics.add_in_flight((self.model, instance, pool, strategy), 1)

    def _start_upstream(self, now_ns: int) -> None:
        self._end_upstream(now_ns, None)
        self._attempt_ns = now_ns
        if not self._recording:
            return
        # The CLIENT span is the GenAI conventions' inference span: operation, model, provider, server.*.
        upstream_attrs: dict[str, Any] = {attr.GEN_AI_OPERATION_NAME: self.operation,
                                          attr.GEN_AI_REQUEST_MODEL: self.model,
                                          **instance_attributes(self.instance), attr.RETRY_ATTEMPT: self.attempt}
        if self._provider:
            upstream_attrs[attr.GEN_AI_PROVIDER_NAME] = self._provider
        if self._stream is not None:
            upstream_attrs[attr.GEN_AI_REQUEST_STREAM] = self._stream
        if self._backoff_s is not None:
            upstream_attrs[attr.RETRY_BACKOFF_MS] = self._backoff_s * 1000.0
        self._upstream = self._tracer.otel.start_span(attr.SPAN_UPSTREAM, context=trace.set_span_in_context(self._span),
                                                      kind=SpanKind.CLIENT, start_time=self._wall(now_ns),
                                                      attributes=upstream_attrs)

    def _end_upstream(self, now_ns: int, error_type: str | None) -> None:
        span, self._upstream = self._upstream, None
        if span is None:
            return
        if error_type:
            span.set_attribute(attr.ERROR_TYPE, error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.end(end_time=self._wall(now_ns))

    def retry(self, *, backoff_s: float = 0.0, error_type: str = "upstream_error") -> None:
        """The current attempt failed and will be retried after ``backoff_s`` seconds.

        Ends the attempt's upstream span as an error and counts a retry; the next attempt starts
        with :meth:`routed` (or :meth:`upstream`) and records the attempt number and backoff.
        """
        if self._summary is not None:
            return
        if backoff_s < 0:
            raise ValueError(f"backoff_s must be >= 0, got {backoff_s}")
        self._end_upstream(self._tracer._perf_ns(), error_type)
        self.attempt += 1
        self._backoff_s = backoff_s
        self._tracer.metrics.count_retry((self.model, self.instance, self.pool, self.strategy))

    # -- token stream (hot path) --------------------------------------------------------------------
    # ``req.token()``: one output token (or one streamed chunk) arrived now. An attribute, not a method:
    # the timeline buffer's own C ``token`` (see timeline.py), so a token costs one C call and no Python
    # frame (benchmarks/instrumentation_timeline.py); the buffer notes the first reading apart.
    def _token_from_now(self) -> None:
        self._times.append(_now())

    def token_sink(self) -> Callable[[int], None]:
        """The buffer's append, for readings taken elsewhere (a replay, a batch of chunk times)::

            record = req.token_sink()
            for chunk in stream:
                record(time.perf_counter_ns())   # must be perf_counter_ns: the tracer's clock

        Where the reading is now, ``req.token()`` is cheaper (no Python call for the clock).
        Readings from another clock are detected at the end (outside the request's time span),
        logged, and the timeline is discarded rather than exported as nonsense. Without the C
        extension the sink does not note the first token's time: call :meth:`first_token` with the
        first one if a stream may exceed ``max_timeline_tokens`` (beyond it the buffer keeps only the
        last readings).
        """
        return self._times.append

    def tokens(self, count: int) -> None:
        """``count`` tokens arrived together now (a chunk carrying several tokens)."""
        if count > 0:
            now = self._tracer._perf_ns()
            self._times.extend((now,) * count)
            if self._first_token_ns is None:
                self._first_token_ns = now

    def scheduled(self, *, cached_input_tokens: int | None = None) -> None:
        """Engine: the request left the engine's own queue and prefill starts now.

        ``cached_input_tokens`` are the prompt tokens found in the prefix cache. With this mark
        the request span gets ``engine.queue``, ``engine.prefill`` (up to the first token) and
        ``engine.decode`` (first token to end) children.
        """
        if self._scheduled_ns is None and self._summary is None:
            self._scheduled_ns = self._tracer._perf_ns()
            self._cached_input_tokens = cached_input_tokens

    def first_token(self) -> None:
        """Mark the first token without recording one (e.g. a non-streaming engine ends prefill)."""
        if self._first_token_ns is None:
            self._first_token_ns = self._tracer._perf_ns()

    # -- endings ---------------------------------------------------------------------------------
    def finish(self, reason: str | None = "stop", *, input_tokens: int | None = None,
               output_tokens: int | None = None, cached_input_tokens: int | None = None,
               reasoning_tokens: int | None = None, response_model: str | None = None,
               response_id: str | None = None) -> RequestSummary:
        """The request completed; ``reason`` is the finish reason (stop, length, tool_calls ...).

        ``cached_input_tokens`` (prompt tokens served from the prefix cache) is part of
        ``input_tokens``, ``reasoning_tokens`` part of ``output_tokens``, as the usage of
        OpenAI-compatible engines reports them.
        """
        return self._end(Outcome.SUCCESS, finish_reason=reason, input_tokens=input_tokens, output_tokens=output_tokens,
                         cached_input_tokens=cached_input_tokens, reasoning_tokens=reasoning_tokens,
                         response_model=response_model, response_id=response_id)

    def fail(self, error_type: str, *, message: str | None = None, **usage: Any) -> RequestSummary:
        """The request failed (upstream error, malformed stream ...); ``error_type`` is low-cardinality."""
        if not error_type:
            raise ValueError("error_type must be a short non-empty string, e.g. 'upstream_5xx'")
        return self._end(Outcome.ERROR, error_type=error_type, message=message, **usage)

    def timeout(self, kind: str, **usage: Any) -> RequestSummary:
        """The request timed out: ``kind`` is ``ttft``, ``total`` or ``idle`` (stream stalled)."""
        if kind not in TIMEOUT_KINDS:
            raise ValueError(f"timeout kind must be one of {', '.join(TIMEOUT_KINDS)}, got {kind!r}")
        return self._end(Outcome.TIMEOUT, error_type="timeout", timeout_kind=kind, **usage)

    def cancel(self, **usage: Any) -> RequestSummary:
        """The client went away (disconnect) before the request completed."""
        return self._end(Outcome.CANCELLED, error_type="cancelled", **usage)

    def reject(self, reason: str = "overloaded", *, status: int = 503) -> RequestSummary:
        """The request was turned away without service (HTTP ``status``, 503 or 429)."""
        return self._end(Outcome.REJECTED, error_type=str(status), rejection_reason=reason)

    @property
    def finished(self) -> bool:
        return self._summary is not None

    @property
    def summary(self) -> RequestSummary | None:
        return self._summary

    def __enter__(self) -> RequestContext:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._summary is None:
            if exc_type is None:
                self.finish(None)
            elif issubclass(exc_type, asyncio.CancelledError):
                self.cancel()
            else:
                if self._recording:
                    self._span.record_exception(exc)
                self.fail(exc_type.__qualname__, message=str(exc))
        return False

    def _end(self, outcome: str, **details: Any) -> RequestSummary:
        """End the request once: the tail-sampling decision, then its metrics and its spans."""
        if self._summary is not None:
            return self._summary
        check_details(details)
        end_ns = self._tracer._perf_ns()
        self._leave_queue(end_ns)
        ending = self._ending(outcome, end_ns, details)
        metrics = self._tracer.metrics
        if ending.truncated:
            metrics.count_truncated(self.model)
        self._decide(ending)
        ending.analyze(self._start_ns, metrics.gap_bounds_ns)
        metrics.record_end(metrics.bundle(self.model, self.instance, self.pool, self.strategy), ending)
        self._end_spans(ending)
        self._summary = RequestSummary(outcome, ending.finish_reason, ending.ttft_s, ending.e2e_s, self._queue_s,
                                       ending.count, self.attempt + 1, ending.reason, ending.offsets_us,
                                       self.trace_id)
        return self._summary

    def _ending(self, outcome: str, end_ns: int, details: dict[str, Any]) -> Ending:
        first_reading = self._times.first
        times, truncated = timeline.kept(self._times)
        if times and (times[0] < self._start_ns or times[-1] > end_ns):
            log.warning("%s: token times outside the request (not time.perf_counter_ns readings?); "
                        "timeline discarded", self.model)
            times, truncated, first_reading = [], False, None
        self._times = times  # a plain list from here on
        ending = Ending(outcome, end_ns, (end_ns - self._start_ns) / 1e9, times, truncated, queue_s=self._queue_s,
                        client_retry=self._client_retry, **details)
        if ending.cached_input_tokens is None:
            ending.cached_input_tokens = self._cached_input_tokens
        marks = [mark for mark in (self._first_token_ns, first_reading) if mark is not None]
        ending.measure(self._start_ns, min(marks) if marks else None)
        return ending

    def _decide(self, ending: Ending) -> None:
        """Tail sampling: keep the timeline only for the requests that matter (sets the reason)."""
        if ending.rejected:
            reason = sampling.NOT_KEPT
        else:
            reason = self._tracer.sampler.decide(self.model, ending.outcome, ending.ttft_s, ending.e2e_s)
            if not self._recording:
                if reason in sampling.OVERRIDES_HEAD:
                    self._start_tail_kept_span(reason)  # failed or slow: worth its span after all
                elif reason == sampling.RANDOM:
                    reason = sampling.NOT_KEPT  # the head ratio already drew this request's lot
        self._tracer.metrics.count_timeline(self.model, reason)
        ending.reason = reason

    def _end_spans(self, ending: Ending) -> None:
        if self._recording:
            usage = {attr.GEN_AI_USAGE_INPUT_TOKENS: ending.input_tokens,
                     attr.GEN_AI_USAGE_OUTPUT_TOKENS: ending.produced,
                     attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: ending.cached_input_tokens,
                     attr.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: ending.reasoning_tokens,
                     attr.GEN_AI_RESPONSE_FINISH_REASONS: [ending.finish_reason] if ending.finish_reason else None,
                     attr.GEN_AI_RESPONSE_MODEL: ending.response_model, attr.GEN_AI_RESPONSE_ID: ending.response_id}
            usage = {key: value for key, value in usage.items() if value is not None}
            self._record_span(ending, usage)
            if self._upstream is not None:
                self._record_attempt(usage, ending.times, ending.first_ns)
        failed = ending.outcome in (Outcome.ERROR, Outcome.TIMEOUT)
        self._end_upstream(ending.end_ns, ending.error_type if failed else None)
        if self._recording and self._scheduled_ns is not None:
            self._record_engine_phases(ending.first_ns, ending.end_ns, ending.count)
        self._span.end(end_time=self._wall(ending.end_ns))

    def _start_tail_kept_span(self, reason: str) -> None:
        """The request span of a request the head ratio dropped and the tail decision keeps.

        Started now with the request's own start time and trace id (the dropped span's, which went
        upstream in traceparent), as a child of the caller's span when there was one. Its reason
        attribute is what :class:`~.sampling.HeadTailSampler` lets through; with another sampler in
        the provider the span is simply dropped again. The children the request never recorded
        (queue, route, attempts) stay absent; ``llm.sampling.head_dropped`` says why.
        """
        parent = self._parent_context
        if parent is None or not trace.get_current_span(parent).get_span_context().is_valid:
            parent = trace.set_span_in_context(self._span)
        span = self._tracer.otel.start_span(
            f"{self.operation} {self.model}", context=parent, kind=self._tracer.span_kind,
            start_time=self._start_wall_ns,
            attributes={**self._start_attributes, attr.SAMPLING_REASON: reason, attr.SAMPLING_HEAD_DROPPED: True,
                        attr.REQUEST_ID: self.request_id})
        if span.is_recording():
            self._span, self._recording = span, True

    def _record_engine_phases(self, first_ns: int | None, end_ns: int, token_count: int) -> None:
        parent = trace.set_span_in_context(self._span)
        otel, wall = self._tracer.otel, self._wall
        scheduled = self._scheduled_ns
        # The engine's queue begins when the request reached it: at the last upstream attempt's start
        # when a gateway traced the attempts, not while it waited in the gateway's own queue.
        arrived = self._attempt_ns if self._attempt_ns is not None and self._attempt_ns <= scheduled else self._start_ns
        otel.start_span(attr.SPAN_ENGINE_QUEUE, context=parent, start_time=wall(arrived)).end(wall(scheduled))
        prefill_end = first_ns if first_ns is not None and first_ns >= scheduled else end_ns
        prefill_attrs = {}
        if self._cached_input_tokens is not None:
            prefill_attrs[attr.CACHED_INPUT_TOKENS] = self._cached_input_tokens
        otel.start_span(attr.SPAN_PREFILL, context=parent, start_time=wall(scheduled),
                        attributes=prefill_attrs).end(wall(prefill_end))
        if first_ns is not None and first_ns >= scheduled:
            otel.start_span(attr.SPAN_DECODE, context=parent, start_time=wall(first_ns),
                            attributes={attr.TOKEN_COUNT: token_count}).end(wall(end_ns))

    def _record_attempt(self, usage: dict[str, Any], times: list[int], first_ns: int | None) -> None:
        """The last attempt's answer on its CLIENT span: the response's usage, and the time to its first
        chunk (from the attempt's start: a retried request's earlier attempts do not count)."""
        values = dict(usage)
        started = self._attempt_ns
        if started is not None and self._stream is not False:  # a streaming measure (GenAI conventions)
            first = first_ns if first_ns is not None and first_ns >= started else None
            if first is None and times and times[-1] >= started:
                first = times[bisect.bisect_left(times, started)]
            if first is not None:
                values[attr.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = (first - started) / 1e9
        self._upstream.set_attributes(values)

    def _record_span(self, ending: Ending, usage: dict[str, Any]) -> None:
        summary, offsets_json = ending.analysis.summary, ending.analysis.offsets_json
        values: dict[str, Any] = {
            attr.REQUEST_OUTCOME: ending.outcome,
            attr.SAMPLING_REASON: ending.reason,
            attr.TOKEN_COUNT: summary.count,
            attr.RETRY_ATTEMPT: self.attempt,
        }
        optional = {
            attr.POOL: self.pool or None,
            attr.ROUTING_STRATEGY: self.strategy or None,
            attr.ROUTING_ESTIMATED_FINISH_MS: self._route_estimate_ms,
            attr.ROUTING_PREFIX_CACHE_RATIO: self._route_cache_ratio,
            attr.CACHED_INPUT_TOKENS: ending.cached_input_tokens,
            attr.TTFT_MS: ending.ttft_s * 1000.0 if ending.ttft_s is not None else None,
            attr.TPOT_MS: ending.tpot_s * 1000.0 if ending.tpot_s is not None else None,
            attr.QUEUE_MS: self._queue_s * 1000.0 if self._queue_s is not None else None,
            attr.TIMEOUT_KIND: ending.timeout_kind,
            attr.ERROR_TYPE: ending.error_type,
            attr.TOKEN_GAP_MEAN_MS: summary.gap_mean_ms,
            attr.TOKEN_GAP_MAX_MS: summary.gap_max_ms,
            attr.TOKEN_STALL_INDEX: summary.stall_index,
            attr.TOKEN_STALL_OFFSET_MS: summary.stall_offset_ms,
            attr.TOKEN_OFFSETS_US: offsets_json,
            attr.TOKEN_TRUNCATED: True if ending.truncated else None,
        }
        values.update((key, value) for key, value in optional.items() if value is not None)
        values.update(usage)
        values.update(instance_attributes(self.instance))
        self._span.set_attributes(values)
        if ending.failed:
            self._span.set_status(Status(StatusCode.ERROR, ending.message or ending.error_type))
