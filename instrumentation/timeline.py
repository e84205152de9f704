"""The token timeline: token times recorded in the hot path, summarized at request end.

Recording is one ``append(perf_counter_ns())`` per token into a ``collections.deque`` with a
``maxlen`` (benchmarks/instrumentation_timeline.py measures it against a bare ``list.append`` and
OTel span events). The bound costs nothing per token: the deque drops its oldest entry in C when
full, where a Python-level length check would add ~20 ns (measured: 1.6x a bare append instead of
1.4x). So a runaway stream holds at most ``max_tokens`` readings (~40 bytes each) and keeps the
*last* ones, where the stall before a timeout lies; the tracer notes the first token's time
separately, counts the truncation and marks the span. Measured alternatives that lost:
``array('q').append`` is ~50 ns slower per token (it converts each int to a C long), and a
preallocated buffer written by index is slower still. Everything else (offsets, gaps, the longest
stall, the inter-token histogram, the JSON text of a kept timeline) is computed once, at request end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import sub

from infersight.instrumentation.series import bucket_counts

try:  # the request-end work in one C pass (_ctimeline.c); the same in Python below when it is not built
    from infersight.instrumentation._ctimeline import analyze as _c_analyze
except ImportError:  # pragma: no cover - a build without a C compiler
    _c_analyze = None

# Readings kept per request by default: 16,384 tokens (~640 KiB at most), above any usual answer.
DEFAULT_MAX_TOKENS = 16_384


@dataclass(frozen=True)
class TimelineSummary:
    """What a request span always carries about its token stream, kept or not."""

    count: int
    gap_mean_ms: float | None
    gap_max_ms: float | None
    stall_index: int | None  # index of the token that came after the longest gap
    stall_offset_ms: float | None  # when the longest gap started, from request start


def new_buffer(max_tokens: int = DEFAULT_MAX_TOKENS) -> deque[int]:
    """An empty token-time buffer (``perf_counter_ns`` readings) that keeps the last ``max_tokens``.

    One slot more than the cap, so that a buffer found full at the end tells a truncated stream
    from one of exactly ``max_tokens`` tokens (see :func:`kept`).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    return deque(maxlen=max_tokens + 1)


def kept(buffer: deque[int]) -> tuple[list[int], bool]:
    """The readings to use (at most ``max_tokens``, the last ones) and whether any were dropped."""
    times = list(buffer)
    if buffer.maxlen is not None and len(times) >= buffer.maxlen:
        return times[1:], True
    return times, False


def offsets_us(times_ns: Sequence[int], start_ns: int) -> list[int]:
    """Each token's offset from the request start, in whole microseconds."""
    return [(t - start_ns) // 1000 for t in times_ns]


def offsets_json(offsets: Sequence[int]) -> str:
    """The kept timeline as the JSON text the span carries (``[120500,145020,...]``).

    The exact text the OTel Collector's exporter stores for an int array attribute (pdata
    ``AsString()``), so ClickHouse's view parses it the same whoever sent it; set as one string
    attribute, the SDK encodes it as one field instead of one AnyValue per token (DESIGN 5).
    One ``%`` formatting in C: ~20% faster than ``json.dumps`` for a list of ints (same text).
    """
    if not offsets:
        return "[]"
    return "[" + ",".join(("%d",) * len(offsets)) % tuple(offsets) + "]"


def gaps_ns(times_ns: Sequence[int]) -> list[int]:
    """The gaps between consecutive tokens, in nanoseconds (empty for fewer than two tokens)."""
    return list(map(sub, times_ns[1:], times_ns))  # C-level loop: ~35% faster than a comprehension


def summarize(times_ns: Sequence[int], start_ns: int, gaps: Sequence[int] | None = None) -> TimelineSummary:
    """The summary attributes; pass ``gaps`` (from :func:`gaps_ns`) when already computed."""
    count = len(times_ns)
    if count < 2:
        return TimelineSummary(count, None, None, None, None)
    if gaps is None:
        gaps = gaps_ns(times_ns)
    longest = max(gaps)
    longest_at = gaps.index(longest) + 1  # the first longest gap; the token after it
    mean_ns = (times_ns[-1] - times_ns[0]) / (count - 1)
    return TimelineSummary(
        count=count,
        gap_mean_ms=mean_ns / 1e6,
        gap_max_ms=longest / 1e6,
        stall_index=longest_at,
        stall_offset_ms=(times_ns[longest_at - 1] - start_ns) / 1e6,
    )


@dataclass(frozen=True)
class Analysis:
    """Everything the end of a request needs from its token times, computed at once."""

    summary: TimelineSummary
    gap_counts: list[int] | None  # inter-token gaps per histogram bucket (len(bounds) + 1), None below two tokens
    offsets_us: list[int] | None  # the kept timeline, None when not kept
    offsets_json: str | None  # its JSON text (:func:`offsets_json`)


def analyze(times_ns: list[int], start_ns: int, bounds_ns: tuple[float, ...], keep: bool,
            compiled: bool = True) -> Analysis:
    """The summary, the gaps counted into the histogram's buckets (``bounds_ns``: its upper bounds in
    nanoseconds, a gap ``<=`` a bound counts there, as Prometheus' ``le``) and, when ``keep``, the offsets
    and their JSON text. In C when the extension is built (one pass, ~10 ns per token against ~200 for
    the Python passes below, benchmarks/instrumentation_timeline.py); ``compiled=False`` forces Python.
    """
    count = len(times_ns)
    if _c_analyze is not None and compiled:
        longest, stall_index, stall_offset_ns, counts, offsets, text = _c_analyze(times_ns, start_ns, bounds_ns, keep)
    else:
        longest = stall_index = stall_offset_ns = counts = None
        if count >= 2:
            gaps = gaps_ns(times_ns)
            longest = max(gaps)
            stall_index = gaps.index(longest) + 1
            stall_offset_ns = times_ns[stall_index - 1] - start_ns
            counts = bucket_counts(gaps, bounds_ns)
        offsets = offsets_us(times_ns, start_ns) if keep else None
        text = offsets_json(offsets) if keep else None
    if count < 2:
        summary = TimelineSummary(count, None, None, None, None)
    else:
        summary = TimelineSummary(count, (times_ns[-1] - times_ns[0]) / (count - 1) / 1e6, longest / 1e6,
                                  stall_index, stall_offset_ns / 1e6)
    return Analysis(summary, counts, offsets, text)

