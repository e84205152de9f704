"""Promtool input series built from catalog signals, one sample per minute.

Counters are described by their increase per minute in phases, histograms by how many
observations per minute land in which bucket; the helpers write the cumulative series promtool
expects (``_bucket`` per bound and +Inf, ``_sum``, ``_count``). Integer increments keep every
rate an exact ratio, which matters because promtool 2.42 compares rendered values exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from prometheus_client.utils import floatToGoString

from infersight.alerts.model import Series
from infersight.signals import Signal

Phase = tuple[float, int]  # (value or increase per minute, minutes)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def le(bound: float) -> str:
    """The ``le`` label value exactly as our exporters (prometheus_client) write it."""
    return floatToGoString(bound)


def gauge(signal: Signal, labels: Mapping[str, str], phases: Sequence[Phase]) -> Series:
    """A gauge holding each value for its minutes: ``[(5, 10), (8, 20)]``."""
    parts = [f"{_num(v)}x{minutes - 1}" for v, minutes in phases if minutes > 0]
    return Series(signal.select(**labels), " ".join(parts))


def ramp(signal: Signal, labels: Mapping[str, str], start: float, per_minute: float, minutes: int,
         absent_minutes: int = 0) -> Series:
    """A gauge rising linearly (``start+per_minutexN``), optionally absent for its first minutes."""
    absent = f"_x{absent_minutes} " if absent_minutes else ""
    return Series(signal.select(**labels), f"{absent}{_num(start)}+{_num(per_minute)}x{minutes - 1}")


def _cumulative(phases: Sequence[Phase], suffix_signal: Signal, suffix: str, labels: Mapping[str, str]) -> Series:
    total, parts = 0.0, []
    for per_minute, minutes in phases:
        if minutes <= 0:
            continue
        parts.append(f"{_num(total)}+{_num(per_minute)}x{minutes - 1}")
        total += per_minute * minutes
    return Series(suffix_signal.select(suffix, **labels), " ".join(parts))


def counter(signal: Signal, labels: Mapping[str, str], phases: Sequence[Phase]) -> Series:
    """A counter from 0 growing by ``per_minute`` in each phase: ``[(0, 20), (60, 30)]``."""
    return _cumulative(phases, signal, "", labels)


def steps(signal: Signal, labels: Mapping[str, str], minutes: int, jumps_at: Sequence[int]) -> Series:
    """A counter that goes up by one at each minute in ``jumps_at``."""
    values, count = [], 0
    for minute in range(minutes):
        count += jumps_at.count(minute)
        values.append(str(count))
    return Series(signal.select(**labels), " ".join(values))


def histogram(signal: Signal, labels: Mapping[str, str],
              phases: Sequence[tuple[Mapping[float, int], int]]) -> list[Series]:
    """Histogram series; each phase maps an observed value to observations per minute.

    An observation of value v counts in every bucket with bound >= v (math.inf allowed).
    """
    bounds = [*signal.buckets, math.inf]
    series = []
    for bound in bounds:
        per_bucket = [(sum(n for v, n in obs.items() if v <= bound), minutes) for obs, minutes in phases]
        series.append(_cumulative(per_bucket, signal, "_bucket", {**labels, "le": le(bound)}))
    series.append(_cumulative([(sum(obs.values()), m) for obs, m in phases], signal, "_count", labels))
    finite_sum = [(sum(v * n for v, n in obs.items() if math.isfinite(v)), m) for obs, m in phases]
    series.append(_cumulative(finite_sum, signal, "_sum", labels))
    return series


def quantile(buckets: Sequence[float], observations: Mapping[float, int], q: float) -> float:
    """What PromQL's histogram_quantile returns for a steady rate of these observations.

    Linear interpolation inside the bucket holding the rank; the lowest bucket starts at 0; a rank
    in +Inf returns the highest finite bound.
    """
    bounds = [*buckets, math.inf]
    counts = [sum(n for v, n in observations.items() if v <= b) for b in bounds]
    rank = q * counts[-1]
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if math.isinf(bounds[i]):
        return bounds[-2]
    start = 0.0 if i == 0 else bounds[i - 1]
    below = 0 if i == 0 else counts[i - 1]
    return start + (bounds[i] - start) * ((rank - below) / (counts[i] - below))


def observations_near(buckets: Sequence[float], q: float, target: float, per_minute: int = 1000) -> dict[float, int]:
    """Observations per minute whose q-quantile lands near ``target`` (between two bucket bounds).

    Part of the traffic sits at the bucket bound below ``target`` and the rest inside the bucket
    that holds it, in the share that puts the interpolated quantile at ``target``.
    """
    if not 0 < target < buckets[-1]:
        raise ValueError(f"target {target} outside the finite buckets (0, {buckets[-1]}]")
    i = next(i for i, b in enumerate(buckets) if b >= target)
    lo = 0.0 if i == 0 else buckets[i - 1]
    hi = buckets[i]
    r = (target - lo) / (hi - lo)
    if r <= q:  # some traffic at or below lo, the rest in (lo, hi]
        below = round(per_minute * (q - r) / (1 - r)) if i > 0 else 0
        return {k: v for k, v in {lo: below, hi: per_minute - below}.items() if v}
    # the quantile sits high in the bucket: push a share above hi
    inside = round(per_minute * q / r)
    above = buckets[i + 1] if i + 1 < len(buckets) else math.inf
    return {hi: inside, above: per_minute - inside}
