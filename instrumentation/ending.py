"""How one request ended: the facts its metrics, its tail-sampling decision and its span are made from.

``RequestContext._end`` builds one :class:`Ending` from what the context recorded (start, first
token, token times, queue wait) and the ending call's arguments, then hands it to the metrics
(:meth:`~.metrics.RequestMetrics.record_end`), the sampler and the span writer in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infersight.attributes import Outcome
from infersight.instrumentation import sampling, timeline

USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")
# What an ending call may say (the rest of an Ending is measured).
DETAIL_FIELDS = frozenset({*USAGE_FIELDS, "finish_reason", "error_type", "message", "timeout_kind",
                           "rejection_reason", "response_model", "response_id"})


def check_details(details: dict[str, object]) -> None:
    """Refuse unknown arguments and bad token counts before anything changes: a half-finished
    request would leak its in-flight count and never end its span."""
    unknown = details.keys() - DETAIL_FIELDS
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    for name in USAGE_FIELDS:
        value = details.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")


@dataclass(slots=True)
class Ending:
    """One request's end. Latencies in seconds; ``times`` are the kept ``perf_counter_ns`` readings."""

    outcome: str
    end_ns: int
    e2e_s: float
    times: list[int]
    truncated: bool = False  # the buffer dropped the first readings (a stream past max_timeline_tokens)
    first_ns: int | None = None  # the first token's reading, kept or not
    ttft_s: float | None = None
    tpot_s: float | None = None
    queue_s: float | None = None
    produced: int | None = None  # output tokens: the usage's count, else the tokens timed
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    error_type: str | None = None
    message: str | None = None
    timeout_kind: str | None = None
    rejection_reason: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    client_retry: bool = False
    analysis: timeline.Analysis | None = None  # the summary, the gaps per bucket, the kept offsets (:meth:`analyze`)
    reason: str = sampling.NOT_KEPT  # the tail-sampling decision
    offsets_us: list[int] | None = field(default=None)  # the kept timeline, None when not kept

    def analyze(self, start_ns: int, gap_bounds_ns: tuple[float, ...]) -> None:
        """After the sampling decision: the timeline's summary and gap counts, and the offsets when kept."""
        keep = self.reason != sampling.NOT_KEPT and bool(self.times)
        self.analysis = timeline.analyze(self.times, start_ns, gap_bounds_ns, keep)
        self.offsets_us = self.analysis.offsets_us

    @property
    def count(self) -> int:
        return len(self.times)

    @property
    def rejected(self) -> bool:
        return self.outcome == Outcome.REJECTED

    @property
    def failed(self) -> bool:
        """An ending whose spans carry an error status."""
        return self.outcome in (Outcome.ERROR, Outcome.TIMEOUT, Outcome.REJECTED)

    def measure(self, start_ns: int, first_mark_ns: int | None) -> None:
        """TTFT, TPOT and the gaps from the token times, the first-token mark and the usage."""
        times, count = self.times, len(self.times)
        first_ns = first_mark_ns
        if count and (first_ns is None or times[0] < first_ns):
            first_ns = times[0]
        self.first_ns = first_ns
        self.ttft_s = (first_ns - start_ns) / 1e9 if first_ns is not None else None
        produced = self.produced = self.output_tokens if self.output_tokens is not None else (count or None)
        if self.truncated and first_ns is not None and produced and produced > count:
            # The buffer kept only the last readings; the usage counts every token, so its gaps run
            # from the first token (noted apart) to the last one.
            self.tpot_s = (times[-1] - first_ns) / 1e9 / (produced - 1)
        elif count >= 2:
            # Usage that counts more tokens than were timed (several per streamed chunk) divides the
            # same first-to-last span by the true number of gaps.
            self.tpot_s = (times[-1] - times[0]) / 1e9 / (max(count, produced or 0) - 1)
        elif produced and produced >= 2 and self.ttft_s is not None:
            self.tpot_s = (self.e2e_s - self.ttft_s) / (produced - 1)
