"""Tail sampling of token timelines: keep the full timeline only for requests that matter.

Head and tail sampling together: the head ratio (an OTel sampler) decides at request start whether
spans are recorded; a request it dropped that then fails, times out, is cancelled or turns slow is
still worth its request span and timeline. The tracer then creates that request span at the end,
carrying its decision reason, and :class:`HeadTailSampler` (which ``setup_tracing`` installs
around the head sampler) lets exactly such spans through.

A request matters when it errored, timed out or was cancelled, when its TTFT or e2e latency is
above a rolling p99 of its model, or by a small random share. The rolling p99 comes from a
log-bucketed histogram per model whose counts halve every ``half_life`` observations: memory is
fixed (a few KiB per model, a bounded number of models), old traffic fades out, and the estimate
is within one bucket width (4 % by default) of the true quantile.
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Sequence

from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from infersight import attributes as attr
from infersight.attributes import Outcome, SamplingReason
from infersight.config import Tracing

_TRACING = Tracing()  # the defaults live in the config model (infersight/config.py)

# Decision reasons, written as llm.sampling.reason and as the reason label of the timelines counter.
SLOW_TTFT = SamplingReason.SLOW_TTFT
SLOW_E2E = SamplingReason.SLOW_E2E
ERROR = SamplingReason.ERROR
CANCELLED = SamplingReason.CANCELLED
TIMEOUT = SamplingReason.TIMEOUT
RANDOM = SamplingReason.RANDOM
NOT_KEPT = SamplingReason.NOT_KEPT
REASONS = tuple(SamplingReason)

# Outcomes that always keep their timeline, and the reason they give.
OUTCOME_REASONS = {Outcome.ERROR: ERROR, Outcome.TIMEOUT: TIMEOUT, Outcome.CANCELLED: CANCELLED}
# Reasons that override a head-sampling drop (a random pick does not: it would undo the head ratio).
OVERRIDES_HEAD = frozenset({SLOW_TTFT, SLOW_E2E, ERROR, CANCELLED, TIMEOUT})


class HeadTailSampler(Sampler):
    """The head sampler, except for request spans that the tail decision keeps.

    A span started with ``llm.sampling.reason`` in :data:`OVERRIDES_HEAD` among its attributes is
    recorded and sampled whatever ``head`` says; every other span is ``head``'s decision. Only the
    tracer starts spans with that attribute, at request end, for requests the head ratio dropped.
    """

    def __init__(self, head: Sampler) -> None:
        self.head = head

    def should_sample(self, parent_context, trace_id: int, name: str, kind=None, attributes=None,
                      links: Sequence | None = None, trace_state=None) -> SamplingResult:
        if attributes and attributes.get(attr.SAMPLING_REASON) in OVERRIDES_HEAD:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state)
        return self.head.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"HeadTailSampler{{{self.head.get_description()}}}"


class RollingQuantile:
    """A streaming quantile over recent observations, in bounded memory.

    Values are counted in logarithmic buckets (``growth`` apart) between ``low`` and ``high``;
    every ``half_life`` observations all counts are halved, so the estimate follows the recent
    traffic. The quantile is recomputed every ``refresh`` observations, keeping ``observe`` O(1).
    """

    __slots__ = ("q", "low", "growth", "_log_growth", "_counts", "_total", "_since_halving", "half_life",
                 "refresh", "_since_refresh", "_estimate", "observations")

    def __init__(self, q: float = 0.99, *, low: float = 1e-4, high: float = 1e4, growth: float = 1.04,
                 half_life: int = 2000, refresh: int = 16) -> None:
        if not 0 < q < 1:
            raise ValueError(f"quantile must be between 0 and 1 exclusive, got {q}")
        if not 0 < low < high or growth <= 1 or half_life < 1 or refresh < 1:
            raise ValueError("need 0 < low < high, growth > 1, half_life >= 1 and refresh >= 1")
        self.q = q
        self.low = low
        self.growth = growth
        self._log_growth = math.log(growth)
        self._counts = [0.0] * (int(math.log(high / low) / self._log_growth) + 2)
        self._total = 0.0
        self.half_life = half_life
        self._since_halving = 0
        self.refresh = refresh
        self._since_refresh = 0
        self._estimate: float | None = None
        self.observations = 0

    def _index(self, value: float) -> int:
        if value <= self.low:
            return 0
        return min(int(math.log(value / self.low) / self._log_growth) + 1, len(self._counts) - 1)

    def observe(self, value: float) -> None:
        self._counts[self._index(value)] += 1.0
        self._total += 1.0
        self.observations += 1
        self._since_halving += 1
        if self._since_halving >= self.half_life:
            counts = self._counts
            for index, count in enumerate(counts):
                if count:
                    counts[index] = count * 0.5
            self._total *= 0.5
            self._since_halving = 0
        self._since_refresh += 1
        if self._since_refresh >= self.refresh or self._estimate is None:
            self._estimate = self._compute()
            self._since_refresh = 0

    def _compute(self) -> float:
        # Walk down from the top until more than (1 - q) of the mass lies above: the upper edge of
        # that bucket is the estimate (an upper bound, so "above the estimate" really is in the tail).
        tail = (1.0 - self.q) * self._total
        above = 0.0
        for index in range(len(self._counts) - 1, -1, -1):
            above += self._counts[index]
            if above > tail:
                return self.low * self.growth ** index
        return self.low

    def value(self) -> float | None:
        """The current estimate, or None before the first observation."""
        return self._estimate


class TailSampler:
    """Decides, at request end, whether a request's token timeline is kept, and why.

    ``min_samples`` observations of a model are needed before "slow" can be judged, so a cold
    start does not keep every early request. At most ``max_models`` models are tracked (least
    recently seen dropped first), so memory stays bounded whatever the model label holds.
    """

    def __init__(self, random_share: float = _TRACING.random_timeline_share, *,
                 quantile: float = _TRACING.slow_quantile, min_samples: int = _TRACING.slow_min_samples,
                 half_life: int = 2000, max_models: int = 256, seed: int | None = None) -> None:
        if not 0 <= random_share <= 1:
            raise ValueError(f"random_share must be within 0..1, got {random_share}")
        if min_samples < 1 or max_models < 1:
            raise ValueError("min_samples and max_models must be at least 1")
        self.random_share = random_share
        self.quantile = quantile
        self.min_samples = min_samples
        self.half_life = half_life
        self.max_models = max_models
        self._random = random.Random(seed)
        self._models: OrderedDict[str, tuple[RollingQuantile, RollingQuantile]] = OrderedDict()
        self._lock = threading.Lock()  # gateways call decide() from many threads

    @classmethod
    def from_config(cls, tracing: Tracing, **options) -> TailSampler:
        """The sampler of the config's ``tracing`` section (``random_timeline_share``, ``slow_*``)."""
        return cls(tracing.random_timeline_share, quantile=tracing.slow_quantile,
                   min_samples=tracing.slow_min_samples, **options)

    def _estimators(self, model: str) -> tuple[RollingQuantile, RollingQuantile]:
        pair = self._models.get(model)
        if pair is None:
            pair = (RollingQuantile(self.quantile, half_life=self.half_life),
                    RollingQuantile(self.quantile, half_life=self.half_life))
            self._models[model] = pair
            if len(self._models) > self.max_models:
                self._models.popitem(last=False)
        else:
            self._models.move_to_end(model)
        return pair

    def thresholds(self, model: str) -> tuple[float | None, float | None]:
        """The current (TTFT, e2e) quantile estimates for ``model``, None while warming up."""
        pair = self._models.get(model)
        if pair is None:
            return None, None
        ttft, e2e = pair
        return (ttft.value() if ttft.observations >= self.min_samples else None,
                e2e.value() if e2e.observations >= self.min_samples else None)

    def decide(self, model: str, outcome: str, ttft_s: float | None, e2e_s: float) -> str:
        """The sampling reason for a finished request; :data:`NOT_KEPT` means drop the timeline.

        The request is judged against the estimate *before* it is added, so a slow request is
        not compared with itself. Only successful requests feed the latency estimates: errors and
        timeouts would drag the p99 toward the failure mode it should detect.
        """
        with self._lock:
            return self._decide(model, outcome, ttft_s, e2e_s)

    def _decide(self, model: str, outcome: str, ttft_s: float | None, e2e_s: float) -> str:
        reason = OUTCOME_REASONS.get(outcome)
        ttft_estimator, e2e_estimator = self._estimators(model)
        if reason is None and outcome == Outcome.SUCCESS:
            if ttft_s is not None and ttft_estimator.observations >= self.min_samples \
                    and ttft_s > ttft_estimator.value():
                reason = SLOW_TTFT
            elif e2e_estimator.observations >= self.min_samples and e2e_s > e2e_estimator.value():
                reason = SLOW_E2E
            if ttft_s is not None:
                ttft_estimator.observe(ttft_s)
            e2e_estimator.observe(e2e_s)
        if reason is None:
            reason = RANDOM if self.random_share and self._random.random() < self.random_share else NOT_KEPT
        return reason
