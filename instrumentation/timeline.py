"""The token timeline: token times recorded in the hot path, summarized at request end.

Recording is one ``array.append(perf_counter_ns())`` per token (see
benchmarks/instrumentation_timeline.py for its cost against OTel span events). The array stores
raw 8-byte integers, so a 4,000-token answer costs 32 KiB, and CPython grows it geometrically:
appends stay amortized O(1) without a per-token capacity check. Everything else (offsets, gaps,
the longest stall, the inter-token histogram) is computed once, when the request ends.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass


@dataclass(frozen=True)
class TimelineSummary:
    """What a request span always carries about its token stream, kept or not."""

    count: int
    gap_mean_ms: float | None
    gap_max_ms: float | None
    stall_index: int | None  # index of the token that came after the longest gap
    stall_offset_ms: float | None  # when the longest gap started, from request start


def new_buffer() -> array:
    """An empty token-time buffer (signed 64-bit nanoseconds from ``perf_counter_ns``)."""
    return array("q")


def offsets_us(times_ns: array, start_ns: int) -> list[int]:
    """Each token's offset from the request start, in whole microseconds."""
    return [(t - start_ns) // 1000 for t in times_ns]


def gaps_seconds(times_ns: array) -> list[float]:
    """The gaps between consecutive tokens, in seconds (empty for fewer than two tokens)."""
    return [(b - a) / 1e9 for a, b in zip(times_ns, times_ns[1:], strict=False)]


def summarize(times_ns: array, start_ns: int) -> TimelineSummary:
    count = len(times_ns)
    if count < 2:
        return TimelineSummary(count, None, None, None, None)
    longest = -1
    longest_at = 0
    previous = times_ns[0]
    for index in range(1, count):
        gap = times_ns[index] - previous
        if gap > longest:
            longest, longest_at = gap, index
        previous = times_ns[index]
    mean_ns = (times_ns[-1] - times_ns[0]) / (count - 1)
    return TimelineSummary(
        count=count,
        gap_mean_ms=mean_ns / 1e6,
        gap_max_ms=longest / 1e6,
        stall_index=longest_at,
        stall_offset_ms=(times_ns[longest_at - 1] - start_ns) / 1e6,
    )
