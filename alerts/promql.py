"""PromQL building blocks the rules share."""

from __future__ import annotations

from collections.abc import Sequence


def ratio(numerator: str, denominator: str, by: Sequence[str] = ()) -> str:
    """``sum by (<by>) (numerator) / sum by (<by>) (denominator)``, ``sum(...)`` without ``by``.

    Both sides are grouped alike, so the division matches series one to one; a grouping typed
    twice by hand can differ between the two and silently drop or mismatch series.
    """
    total = f"sum by ({', '.join(by)}) " if by else "sum"
    return f"{total}({numerator}) / {total}({denominator})"


def events(selector: str, window: str) -> str:
    """How many events a counter saw in ``window``, a first appearance included (DESIGN 8).

    A label set that a producer did not create at 0 appears at its first event, already at 1, and
    ``increase()`` reads that first event as 0. So a series that exists now but did not ``window``
    ago counts with its whole value (every event it has seen happened inside the window); one
    that existed counts its ``increase()``. The result keeps each series' labels.
    """
    return f"(({selector} > 0 unless {selector} offset {window}) or increase({selector}[{window}]))"


def larger(a: str, b: str) -> str:
    """Per label set, the larger of two vectors with the same labels, or whichever one exists."""
    return f"(({a}) >= ({b})\nor ({b})\nor ({a}))"


def added(a: str, b: str) -> str:
    """Per label set, ``a + b``, or whichever one exists (a producer that is not there adds nothing)."""
    return f"(({a}) + ({b})\nor ({a})\nor ({b}))"


def younger_than(start_time_selector: str, seconds: float) -> str:
    """Series of instances whose start time is less than ``seconds`` ago (in their cold start)."""
    return f"(time() - {start_time_selector} < {seconds:g})"


def num(value: float) -> str:
    """A threshold as PromQL and people read it: ``0.144`` rather than ``0.14400000000000002``."""
    text = repr(round(float(value), 10))
    return text[:-2] if text.endswith(".0") else text
