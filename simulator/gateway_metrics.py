"""The gateway's request metrics in virtual time: the tracer's series, aggregated in place.

Running every simulated request through :class:`RequestTracer` costs ~95 us (spans, timeline,
sampler) and even its prometheus_client metric calls ~12 us, while virtual time serves hundreds of
thousands of requests. So this module keeps the same series the tracer's :class:`RequestMetrics`
exposes (catalog names, label order, buckets) with the same creation rules: a label set's
histograms, token counters, retries, client retries and every known outcome, rejection reason and
timeout kind appear at 0 when the tracer first resolves its bundle, other values and a sampling
reason at their first event, the inter-token
histogram at its first observation, the in-flight gauge when a request starts (instance "").
``tests/simulator/test_producer_conformance.py`` runs the same requests through the real tracer and
proves both expose the same series. Instance health goes through the real :class:`GatewayHealth`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from infersight.attributes import Outcome, TimeoutKind
from infersight.config import Tracing
from infersight.instrumentation.health import GatewayHealth
from infersight.instrumentation.sampling import NOT_KEPT, OUTCOME_REASONS, RANDOM
from infersight.signals import gateway, request
from infersight.simulator.histogram import CountingHistogram
from infersight.simulator.request import SimRequest

RANDOM_SHARE = Tracing().random_timeline_share  # the config's default
Labels = tuple[str, str, str, str]  # model, instance, pool, strategy


class _Bundle:
    __slots__ = ("ttft", "tpot", "e2e", "queue", "itl", "retries", "client_retries", "input", "cached", "output",
                 "outcomes", "rejections", "timeouts")

    def __init__(self) -> None:
        self.ttft = CountingHistogram(request.TTFT.buckets)
        self.tpot = CountingHistogram(request.TPOT.buckets)
        self.e2e = CountingHistogram(request.E2E.buckets)
        self.queue = CountingHistogram(request.QUEUE_TIME.buckets)
        self.itl: CountingHistogram | None = None
        self.retries = self.client_retries = self.input = self.cached = self.output = 0.0
        self.outcomes: dict[str, float] = dict.fromkeys(request.OUTCOMES, 0.0)
        self.rejections: dict[str, float] = dict.fromkeys(request.REJECTION_REASONS, 0.0)
        self.timeouts: dict[str, float] = dict.fromkeys(request.TIMEOUT_KINDS, 0.0)


class RequestSeries:
    """A prometheus_client collector exposing what RequestMetrics would, from aggregated state."""

    def __init__(self) -> None:
        self.bundles: dict[Labels, _Bundle] = {}
        self.in_flight: dict[Labels, float] = {}
        self.queue_depth: dict[tuple[str, str, str], float] = {}
        self.timelines: dict[tuple[str, str], float] = {}

    def bundle(self, labels: Labels) -> _Bundle:
        b = self.bundles.get(labels)
        if b is None:
            b = self.bundles[labels] = _Bundle()
            self.in_flight.setdefault(labels, 0.0)  # LabelBundle resolves the in-flight child too
        return b

    def collect(self):
        def hist(signal, attr: str):
            family = signal.family()
            for labels, b in self.bundles.items():
                h = getattr(b, attr)
                if h is not None:
                    family.add_metric(list(labels), list(h.cumulative()), h.sum)
            return family

        yield hist(request.TTFT, "ttft")
        yield hist(request.TPOT, "tpot")
        yield hist(request.E2E, "e2e")
        yield hist(request.QUEUE_TIME, "queue")
        yield hist(request.INTER_TOKEN, "itl")
        outcomes = request.REQUESTS.family()
        rejections = request.REJECTIONS.family()
        timeouts = request.TIMEOUTS.family()
        plain = {s: s.family() for s in (request.RETRIES, request.CLIENT_RETRIES, request.INPUT_TOKENS,
                                         request.CACHED_INPUT_TOKENS, request.OUTPUT_TOKENS)}
        for labels, b in self.bundles.items():
            for key, value in b.outcomes.items():
                outcomes.add_metric([*labels, key], value)
            for key, value in b.rejections.items():
                rejections.add_metric([*labels, key], value)
            for key, value in b.timeouts.items():
                timeouts.add_metric([*labels, key], value)
            for signal, value in ((request.RETRIES, b.retries), (request.CLIENT_RETRIES, b.client_retries),
                                  (request.INPUT_TOKENS, b.input),
                                  (request.CACHED_INPUT_TOKENS, b.cached), (request.OUTPUT_TOKENS, b.output)):
                plain[signal].add_metric(list(labels), value)
        in_flight = request.IN_FLIGHT.family()
        for labels, value in self.in_flight.items():
            in_flight.add_metric(list(labels), value)
        depth = gateway.QUEUE_DEPTH.family()
        for labels, value in self.queue_depth.items():
            depth.add_metric(list(labels), value)
        kept = request.TIMELINES_KEPT.family()
        for labels, value in self.timelines.items():
            kept.add_metric(list(labels), value)
        yield from (outcomes, in_flight, *plain.values(), rejections, timeouts, kept, depth)


class GatewayMetrics:
    """Makes, per simulated request, the metric updates the tracer makes for a real one."""

    def __init__(self, seed: int = 0) -> None:
        self.registry = CollectorRegistry()
        self.series = RequestSeries()
        self.registry.register(self.series)
        self.health = GatewayHealth(self.registry)
        self.rng = random.Random(seed)
        # Told about every request as it ends, with what ``ended`` got (the real-time demo replays
        # each one through the real RequestTracer from here).
        self.on_end: Callable[[SimRequest, Outcome, float, dict[str, Any]], None] | None = None

    def _sampling_reason(self, outcome: Outcome) -> str:
        """The tail sampler's reason without its rolling p99 (virtual time keeps no timelines).

        Failures keep theirs and a random share is kept, as the sampler does; ``slow_ttft`` and
        ``slow_e2e`` appear only in real time, where the real sampler judges every request.
        """
        if outcome in OUTCOME_REASONS:
            return OUTCOME_REASONS[outcome]
        if outcome != Outcome.REJECTED and self.rng.random() < RANDOM_SHARE:
            return RANDOM
        return NOT_KEPT

    @staticmethod
    def _labels(req: SimRequest) -> Labels:
        return (req.model, req.instance, req.pool, req.strategy)

    def _add_in_flight(self, labels: Labels, delta: float) -> None:
        self.series.in_flight[labels] = self.series.in_flight.get(labels, 0.0) + delta

    # RequestTracer.start(model, pool=..., strategy=...)
    def started(self, req: SimRequest) -> None:
        self._add_in_flight(self._labels(req), 1.0)

    # RequestContext.queued()
    def queued(self, req: SimRequest) -> None:
        key = (req.model, req.pool, req.strategy)
        self.series.queue_depth[key] = self.series.queue_depth.get(key, 0.0) + 1.0

    def _leave_queue(self, req: SimRequest, now: float) -> None:
        if req.queued_at is not None and req.routed_at is None:
            req.routed_at = now
            key = (req.model, req.pool, req.strategy)
            self.series.queue_depth[key] -= 1.0

    # RequestContext.routed(instance): leaves the queue, moves the in-flight count to the instance
    def routed(self, req: SimRequest, instance: str, now: float) -> None:
        self._leave_queue(req, now)
        if req.routed_at is None:
            req.routed_at = now
        if instance != req.instance:
            self._add_in_flight(self._labels(req), -1.0)
            req.instance = instance
            self._add_in_flight(self._labels(req), 1.0)

    # RequestContext.retry(): the gateway tries again (another attempt of the same request)
    def retried(self, req: SimRequest) -> None:
        self.series.bundle(self._labels(req)).retries += 1

    # RequestContext._end(...)
    def ended(self, req: SimRequest, outcome: Outcome, now: float, *, ttft_s: float | None = None,
              tokens: int = 0, gap_s: float = 0.0, timeout_kind: TimeoutKind | None = None,
              rejection_reason: str | None = None) -> None:
        queued = req.queued_at is not None
        self._leave_queue(req, now)
        labels = self._labels(req)
        b = self.series.bundle(labels)
        e2e_s = now - req.arrival
        self._add_in_flight(labels, -1.0)
        b.outcomes[outcome] = b.outcomes.get(outcome, 0.0) + 1
        if req.client_attempt > 0:  # the SDK's retry header says so (x-stainless-retry-count)
            b.client_retries += 1
        if outcome == Outcome.REJECTED:
            b.rejections[rejection_reason] = b.rejections.get(rejection_reason, 0.0) + 1
        else:
            b.e2e.observe(e2e_s)
            if ttft_s is not None:
                b.ttft.observe(ttft_s)
            if tokens >= 2:
                b.tpot.observe((e2e_s - ttft_s) / (tokens - 1) if ttft_s is not None else gap_s)
                if b.itl is None:
                    b.itl = CountingHistogram(request.INTER_TOKEN.buckets)
                b.itl.observe(gap_s, tokens - 1)
        if queued:
            b.queue.observe(req.routed_at - req.queued_at)
        if timeout_kind is not None:
            b.timeouts[timeout_kind] = b.timeouts.get(timeout_kind, 0.0) + 1
        if outcome == Outcome.SUCCESS:  # usage arrives with the response
            b.input += req.draw.prompt_tokens
            b.cached += req.cached
        b.output += tokens
        key = (req.model, self._sampling_reason(outcome))
        self.series.timelines[key] = self.series.timelines.get(key, 0.0) + 1
        if self.on_end is not None:
            self.on_end(req, outcome, now, {"ttft_s": ttft_s, "tokens": tokens, "gap_s": gap_s,
                                            "timeout_kind": timeout_kind, "rejection_reason": rejection_reason})
