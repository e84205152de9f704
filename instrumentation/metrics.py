"""Prometheus request metrics from the signal catalog, kept as cells per label set.

Every request-side catalog metric is a :class:`~.series.Family` (its children are plain number
cells, rendered from cached text templates: a scrape of 1,000 label sets stays in tens of
milliseconds). A request resolves its label set's cells once (a :class:`LabelBundle`); its end is
one :meth:`RequestMetrics.record_end` call: one lock, one bisection per histogram, the
inter-token gaps observed in bulk (one sort, one bisection per bound), never once per token.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from infersight.instrumentation.series import Cell, Family
from infersight.signals import gateway, request

if TYPE_CHECKING:
    from infersight.instrumentation.ending import Ending

Labels = tuple[str, str, str, str]  # model, instance, pool, strategy


class LabelBundle:
    """The cells of one (model, instance, pool, strategy) label set."""

    __slots__ = ("labels", "ttft", "tpot", "e2e", "queue_time", "in_flight", "retries", "input_tokens",
                 "cached_input_tokens", "output_tokens", "client_retries", "outcomes", "timeouts", "rejections",
                 "inter_token")

    def __init__(self, metrics: RequestMetrics, labels: Labels) -> None:
        self.labels = labels
        self.ttft = metrics.ttft.cell(labels)
        self.tpot = metrics.tpot.cell(labels)
        self.e2e = metrics.e2e.cell(labels)
        self.queue_time = metrics.queue_time.cell(labels)
        self.in_flight = metrics.in_flight.cell(labels)
        self.retries = metrics.retries.cell(labels)
        self.input_tokens = metrics.input_tokens.cell(labels)
        self.cached_input_tokens = metrics.cached_input_tokens.cell(labels)
        self.output_tokens = metrics.output_tokens.cell(labels)
        self.client_retries = metrics.client_retries.cell(labels)
        # Every known outcome, timeout kind and rejection reason at 0 from the first request of the
        # label set on (DESIGN 8): the first error is then an increase, visible to rate().
        self.outcomes = {o: metrics.requests.cell((*labels, o)) for o in request.OUTCOMES}
        self.timeouts = {k: metrics.timeouts.cell((*labels, k)) for k in request.TIMEOUT_KINDS}
        self.rejections = {r: metrics.rejections.cell((*labels, r)) for r in request.REJECTION_REASONS}
        self.inter_token: Cell | None = None  # its series appear at the first observed gap


class RequestMetrics:
    """Every request-side catalog metric, registered once in ``registry``.

    Updates go through the methods here, under one lock (an uncontended acquire is ~50 ns; a
    request takes it two or three times in all). Cells hold integers except histogram sums.
    """

    # A guard against a label value that is unbounded by mistake (a request id as "instance"):
    # past this many label sets, bundles are no longer cached (metrics stay correct, just slower).
    MAX_CACHED_BUNDLES = 4096

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.lock = threading.Lock()
        self.ttft = Family(request.TTFT, registry, lock=self.lock)
        self.tpot = Family(request.TPOT, registry, lock=self.lock)
        self.e2e = Family(request.E2E, registry, lock=self.lock)
        self.queue_time = Family(request.QUEUE_TIME, registry, lock=self.lock)
        self.inter_token = Family(request.INTER_TOKEN, registry, lock=self.lock)
        self.requests = Family(request.REQUESTS, registry, lock=self.lock)
        self.in_flight = Family(request.IN_FLIGHT, registry, lock=self.lock)
        self.retries = Family(request.RETRIES, registry, lock=self.lock)
        self.client_retries = Family(request.CLIENT_RETRIES, registry, lock=self.lock)
        self.rejections = Family(request.REJECTIONS, registry, lock=self.lock)
        self.timeouts = Family(request.TIMEOUTS, registry, lock=self.lock)
        self.input_tokens = Family(request.INPUT_TOKENS, registry, lock=self.lock)
        self.cached_input_tokens = Family(request.CACHED_INPUT_TOKENS, registry, lock=self.lock)
        self.output_tokens = Family(request.OUTPUT_TOKENS, registry, lock=self.lock)
        self.timelines = Family(request.TIMELINES_KEPT, registry, lock=self.lock)
        self.timelines_truncated = Family(request.TIMELINES_TRUNCATED, registry, lock=self.lock)
        self.queue_depth = Family(gateway.QUEUE_DEPTH, registry, lock=self.lock)
        self._bundles: dict[Labels, LabelBundle] = {}

    def bundle(self, model: str, instance: str, pool: str, strategy: str) -> LabelBundle:
        key = (model, instance, pool, strategy)
        bundle = self._bundles.get(key)
        if bundle is None:
            bundle = LabelBundle(self, key)
            if len(self._bundles) < self.MAX_CACHED_BUNDLES:
                bundle = self._bundles.setdefault(key, bundle)
        return bundle

    def add_in_flight(self, labels: Labels, delta: int) -> None:
        """Move the in-flight gauge without resolving a whole bundle (a gateway request has no
        instance until routed, and empty histogram series for instance="" would only be noise)."""
        bundle = self._bundles.get(labels)
        cell = bundle.in_flight if bundle is not None else self.in_flight.cell(labels)
        with self.lock:
            cell[0] += delta

    def add_queue_depth(self, model: str, pool: str, strategy: str, delta: int) -> None:
        cell = self.queue_depth.cell((model, pool, strategy))
        with self.lock:
            cell[0] += delta

    def count_retry(self, labels: Labels) -> None:
        cell = self.bundle(*labels).retries
        with self.lock:
            cell[0] += 1

    def count_truncated(self, model: str) -> None:
        cell = self.timelines_truncated.cell((model,))
        with self.lock:
            cell[0] += 1

    def count_timeline(self, model: str, reason: str) -> None:
        cell = self.timelines.cell((model, reason))
        with self.lock:
            cell[0] += 1

    @property
    def gap_bounds_ns(self) -> tuple[float, ...]:
        """The inter-token histogram's bounds in nanoseconds (what :func:`timeline.analyze` counts into)."""
        return self.inter_token.scaled_bounds(1e-9)

    def observe_gap_counts(self, bundle: LabelBundle, counts: Sequence[int], total_ns: int) -> None:
        """One request's inter-token gaps, already counted per bucket of :attr:`gap_bounds_ns`
        (:func:`timeline.analyze`), and their sum (last token time minus first), in one call."""
        if bundle.inter_token is None:
            bundle.inter_token = self.inter_token.cell(bundle.labels)
        self.inter_token.observe_counts(bundle.inter_token, counts, total_ns * 1e-9)

    def record_end(self, bundle: LabelBundle, ending: Ending) -> None:
        """Every metric a finished request moves, sampled or not: in-flight, outcome, latencies,
        tokens, timeouts and rejections, and the inter-token gaps."""
        outcome_cell = bundle.outcomes.get(ending.outcome)
        if outcome_cell is None:
            outcome_cell = bundle.outcomes[ending.outcome] = self.requests.cell((*bundle.labels, ending.outcome))
        extra = None
        if ending.rejection_reason is not None:
            extra = bundle.rejections.get(ending.rejection_reason) or self.rejections.cell(
                (*bundle.labels, ending.rejection_reason))
        elif ending.timeout_kind is not None:
            extra = bundle.timeouts.get(ending.timeout_kind) or self.timeouts.cell(
                (*bundle.labels, ending.timeout_kind))
        rejected = ending.rejected
        bounds = self.ttft.bounds, self.tpot.bounds, self.e2e.bounds, self.queue_time.bounds
        with self.lock:
            bundle.in_flight[0] -= 1
            outcome_cell[0] += 1
            if extra is not None:
                extra[0] += 1
            if ending.client_retry:
                bundle.client_retries[0] += 1
            if not rejected:
                e2e = bundle.e2e
                e2e[bisect_left(bounds[2], ending.e2e_s)] += 1
                e2e[-1] += ending.e2e_s
                if ending.ttft_s is not None:
                    ttft = bundle.ttft
                    ttft[bisect_left(bounds[0], ending.ttft_s)] += 1
                    ttft[-1] += ending.ttft_s
                if ending.tpot_s is not None:
                    tpot = bundle.tpot
                    tpot[bisect_left(bounds[1], ending.tpot_s)] += 1
                    tpot[-1] += ending.tpot_s
            if ending.queue_s is not None:
                queue = bundle.queue_time
                queue[bisect_left(bounds[3], ending.queue_s)] += 1
                queue[-1] += ending.queue_s
            if ending.input_tokens:
                bundle.input_tokens[0] += ending.input_tokens
            if ending.cached_input_tokens:
                bundle.cached_input_tokens[0] += ending.cached_input_tokens
            if ending.produced:
                bundle.output_tokens[0] += ending.produced
        counts = ending.analysis.gap_counts if ending.analysis is not None else None
        if not rejected and counts:
            self.observe_gap_counts(bundle, counts, ending.times[-1] - ending.times[0])
