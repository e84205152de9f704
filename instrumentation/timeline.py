"""The token timeline: token times recorded in the hot path, summarized at request end.

Recording is one C call per token, ``Recorder.token()`` (instrumentation/_ctimeline.c): it reads
CLOCK_MONOTONIC, ``time.perf_counter_ns``'s clock, and stores it as a C integer, with no Python frame
(benchmarks/instrumentation_timeline.py measures it against a bare ``list.append(perf_counter_ns())``
and OTel span events). It keeps the last ``max_tokens`` readings (a ring once full: a runaway stream
holds at most 8 bytes a token, and the *last* ones, where the stall before a timeout lies) and the
first reading apart, for the TTFT; the tracer counts the truncation and marks the span. Everything
else (offsets, gaps, the longest stall, the inter-token histogram, the JSON text of a kept timeline)
is computed once, at request end, by :func:`analyze` in one C pass. Where the extension is not built
(no compiler), :class:`PyRecorder` and the Python passes below do the same: a deque with a ``maxlen``
(its C append drops the oldest entry; a Python-level length check would add ~20 ns a token).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import sub
from time import perf_counter_ns as _perf_ns

from infersight.instrumentation.series import bucket_counts

try:  # the hot path and the request-end work in C (_ctimeline.c); the same in Python below when it is not built
    from infersight.instrumentation._ctimeline import Recorder as _CRecorder
    from infersight.instrumentation._ctimeline import analyze as _c_analyze
except ImportError:  # pragma: no cover - a build without a C compiler
    _CRecorder = _c_analyze = None

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


class PyRecorder:
    """The C ``Recorder``'s interface in Python, where the extension is not built: ``token()`` (a
    ``perf_counter_ns`` reading now), ``append(ns)``, ``extend(readings)``, ``readings()``, ``first``.

    A deque with a ``maxlen`` of one slot more than the cap, so that a buffer found full at the end tells
    a truncated stream from one of exactly ``max_tokens`` tokens.
    """

    __slots__ = ("_buffer", "first", "append", "extend", "maxlen")

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        self._buffer: deque[int] = deque(maxlen=max_tokens + 1)
        self.append, self.extend, self.maxlen = self._buffer.append, self._buffer.extend, max_tokens
        self.first: int | None = None  # noted by token() only; readings() holds the first unless truncated

    def token(self) -> None:
        now = _perf_ns()
        self._buffer.append(now)
        if self.first is None:
            self.first = now

    def readings(self) -> tuple[list[int], bool]:
        times = list(self._buffer)
        return (times[1:], True) if len(times) > self.maxlen else (times, False)

    def __len__(self) -> int:
        return min(len(self._buffer), self.maxlen)


def new_buffer(max_tokens: int = DEFAULT_MAX_TOKENS, compiled: bool = True) -> PyRecorder:
    """An empty token-time buffer (``perf_counter_ns`` readings) that keeps the last ``max_tokens``:
    the C ``Recorder`` when the extension is built (``token()`` a C call, no Python frame), else
    :class:`PyRecorder`; ``compiled=False`` forces Python."""
    if _CRecorder is not None and compiled:
        return _CRecorder(max_tokens)
    return PyRecorder(max_tokens)


def kept(buffer: PyRecorder) -> tuple[list[int], bool]:
    """The readings to use (at most ``max_tokens``, the last ones) and whether any were dropped."""
    return buffer.readings()


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
    if len(times_ns) < 2:
        return _summary(times_ns, None, None, None)
    if gaps is None:
        gaps = gaps_ns(times_ns)
    longest = max(gaps)
    longest_at = gaps.index(longest) + 1  # the first longest gap; the token after it
    return _summary(times_ns, longest, longest_at, times_ns[longest_at - 1] - start_ns)


def _summary(times_ns: Sequence[int], longest_ns: int | None, stall_index: int | None,
             stall_offset_ns: int | None) -> TimelineSummary:
    """The summary from the longest gap and where it was (None below two tokens), in milliseconds."""
    count = len(times_ns)
    if count < 2:
        return TimelineSummary(count, None, None, None, None)
    return TimelineSummary(count=count, gap_mean_ms=(times_ns[-1] - times_ns[0]) / (count - 1) / 1e6,
                           gap_max_ms=longest_ns / 1e6, stall_index=stall_index, stall_offset_ms=stall_offset_ns / 1e6)


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
    if _c_analyze is None or not compiled:
        gaps = gaps_ns(times_ns)
        offsets = offsets_us(times_ns, start_ns) if keep else None
        return Analysis(summarize(times_ns, start_ns, gaps), bucket_counts(gaps, bounds_ns) if gaps else None,
                        offsets, offsets_json(offsets) if keep else None)
    longest, stall_index, stall_offset_ns, counts, offsets, text = _c_analyze(times_ns, start_ns, bounds_ns, keep)
    return Analysis(_summary(times_ns, longest, stall_index, stall_offset_ns), counts, offsets, text)

