"""A histogram that takes an observation with a count: the simulator observes cohorts, not requests one by one."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from functools import lru_cache

from prometheus_client.utils import floatToGoString


class CountingHistogram:
    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # per bucket, the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        if n <= 0:
            return
        self.counts[bisect_left(self.bounds, value)] += n  # le is inclusive: value == bound counts in it
        self.sum += value * n
        self.count += n

    def cumulative(self) -> Iterator[tuple[str, int]]:
        """(le as prometheus_client writes it, cumulative count), +Inf last."""
        running = 0
        for le, n in zip(_les(self.bounds), self.counts, strict=True):
            running += n
            yield le, running


@lru_cache(maxsize=64)
def _les(bounds: tuple[float, ...]) -> tuple[str, ...]:
    return tuple(floatToGoString(b) for b in (*bounds, math.inf))
