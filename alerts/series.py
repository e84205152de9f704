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


# -- counters absent until their first event (DESIGN 8) ------------------------------------------

def expand(values: str) -> list[float | None]:
    """promtool's expanding notation as one value per step (None: no sample).

    ``a+bxn`` and ``a-bxn`` are n+1 values, ``axn`` is n+1 copies, ``_xn`` n missing samples.
    """
    out: list[float | None] = []
    for token in values.split():
        head, sep, count = token.rpartition("x")
        if not sep:
            out.append(None if token == "_" else float(token))
            continue
        n = int(count)
        if head == "_":
            out.extend([None] * n)
            continue
        op = next((i for i in range(1, len(head)) if head[i] in "+-" and head[i - 1] not in "eE"), None)
        start, step = (float(head), 0.0) if op is None else (float(head[:op]), float(head[op:]))
        out.extend(start + step * i for i in range(n + 1))
    return out


def _encode(values: Sequence[float | None]) -> str:
    parts, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        token = "_" if values[i] is None else _num(values[i])
        if j > i:
            parts.append(f"_x{j - i + 1}" if values[i] is None else f"{token}x{j - i}")
        else:
            parts.append(token)
        i = j + 1
    return " ".join(parts)


def _split(selector: str) -> tuple[str, str]:
    name, _, labels = selector.partition("{")
    return name, labels


def _unit(selector: str, counters: Mapping[str, Signal]) -> str | None:
    """The producer-side child a counter series belongs to: a histogram's buckets, sum and count
    are created together at its first observation. None for series that are not counters."""
    from infersight.signals import Kind

    name, labels = _split(selector)
    if name in counters:
        return selector
    for suffix in ("_bucket", "_count", "_sum"):
        base = name.removesuffix(suffix)
        if base != name and base in counters and counters[base].kind is Kind.HISTOGRAM:
            kept = ",".join(p for p in labels.rstrip("}").split(",") if p and not p.startswith("le="))
            return f"{base}{{{kept}}}"
    return None


def absent_until_first_event(series: Sequence[Series]) -> list[Series]:
    """The same input with every counter as a producer that does not create it at 0 exposes it:
    absent until its first event, then at its first value. A histogram child appears whole at its
    first observation; a counter that never moves is not there at all."""
    from infersight.signals import CATALOG, Kind

    counters = {s.name: s for s in CATALOG.values() if s.kind in (Kind.COUNTER, Kind.HISTOGRAM)}
    expanded = {s.selector: expand(s.values) for s in series}
    first: dict[str, int | None] = {}
    for s in series:
        unit = _unit(s.selector, counters)
        if unit is None or (unit != s.selector and not _split(s.selector)[0].endswith("_count")):
            continue
        values = expanded[s.selector]
        first[unit] = next((i for i, v in enumerate(values) if v is not None and v != 0), None)
    out = []
    for s in series:
        unit = _unit(s.selector, counters)
        if unit is None:
            out.append(s)
            continue
        k = first.get(unit)
        if k is None:
            continue  # never incremented: a producer that creates at first event never shows it
        values = expanded[s.selector]
        out.append(Series(s.selector, _encode([None] * k + values[k:])))
    return out
