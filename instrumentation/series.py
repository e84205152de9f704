"""Label-set series kept as plain cells and rendered from cached text pieces.

The request metrics hold ~110 series per (model, instance, pool, strategy) label set (five
histograms of 13-26 buckets, a dozen counters); a gateway in front of a fleet has a thousand label
sets. prometheus_client renders each of those 110,000 series in Python from a ``Sample`` (labels as
a dict, sorted, validated and escaped, the value formatted) on every scrape: ~2 s. Here each child
is a list of numbers (its *cell*: a counter's value, or a histogram's per-bucket counts and sum)
next to its exposition text, made once when the child appears: the text between its numbers
(name, sorted and escaped labels, line ends). A scrape formats the numbers and joins them with
that text in C (``str`` per number, one slice assignment, one ``join``; benchmarks/exposition_scrape.py).

The text is what prometheus_client writes for the same series (labels sorted, escaped, values as
``floatToGoString`` prints them up to 10^6, integers past that in plain decimal: the same number
to a parser), without ``_created`` series. Everything else (``registry.get_sample_value``,
OpenMetrics, ``?name[]=`` filters, the OTLP push) reads ordinary prometheus_client samples, built
from the same snapshot only when something asks for them.

Cells hold integers (counts, token counts, gauges of requests) except a histogram's sum. Updates
are ``cell[i] += n`` under the owner's lock; a scrape copies each cell in one C call (``tuple``)
without that lock, so a histogram's buckets and sum are always read together.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, pairwise
from operator import itemgetter

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from infersight.exposition import RenderedFamily
from infersight.signals.catalog import Kind, Signal

# The text of small counts, looked up rather than formatted (most buckets of most children).
_SMALL_COUNT = 4096
_SMALL = [str(n) for n in range(_SMALL_COUNT)]

Cell = list  # [value] for a counter or gauge; [count per bucket..., count above the last, sum] for a histogram


def _escape(value: str) -> str:
    # As prometheus_client escapes label values.
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{_escape(value)}"' for name, value in sorted(pairs))


class Family:
    """One catalog signal's children, keyed by their label values in the signal's label order.

    ``cell(labels)`` returns the child's cell, creating it at 0 (the series then exists, as a
    prometheus_client child does after ``.labels()``). Registered in ``registry`` as a collector.
    """

    def __init__(self, signal: Signal, registry: CollectorRegistry | None = None, *,
                 labels: Sequence[str] | None = None, lock: threading.Lock | None = None) -> None:
        self.signal = signal
        self.labelnames = tuple(signal.labels if labels is None else labels)
        self.histogram = signal.kind is Kind.HISTOGRAM
        self.bounds = list(signal.buckets)
        self._le = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self._cells: dict[tuple[str, ...], Cell] = {}
        # (labels, cell) in creation order, the exposition's order. Append-only, like _pieces: a
        # child's pieces are added before the child, so a scrape that copies _children first
        # finds the pieces of every child it copied.
        self._children: list[tuple[tuple[str, ...], Cell]] = []
        # The text before each number of each child, in order. What follows a child's last
        # number (its line end: _tail) opens the next child's first piece.
        self._tail = b"\n" if self.histogram else b".0\n"
        self._pieces: list[bytes] = []
        self._scaled: dict[float, tuple[float, ...]] = {1.0: tuple(float(b) for b in self.bounds)}
        # Guards creation here and every cell update by the owner (one lock for a set of families).
        self.lock = lock if lock is not None else threading.Lock()
        self._header = self._header_text()
        if registry is not None:
            registry.register(self)

    def _header_text(self) -> bytes:
        kind = self.signal.kind.value
        help_text = self.signal.help.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {self.signal.name} {help_text}\n# TYPE {self.signal.name} {kind}\n".encode()

    def _child_pieces(self, labels: tuple[str, ...]) -> list[bytes]:
        pairs = list(zip(self.labelnames, labels, strict=True))
        name = self.signal.name
        if not self.histogram:
            return [self._tail + f"{name}{{{_label_text(pairs)}}} ".encode()]
        pieces = [f"{name}_bucket{{{_label_text([*pairs, ('le', le)])}}} " for le in self._le]
        plain = _label_text(pairs)
        pieces += [f"{name}_count{{{plain}}} ", f"{name}_sum{{{plain}}} "]
        return [self._tail + pieces[0].encode()] + [b".0\n" + piece.encode() for piece in pieces[1:]]

    def cell(self, labels: tuple[str, ...]) -> Cell:
        cell = self._cells.get(labels)
        if cell is None:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self.signal.name}: expected labels {self.labelnames}, got {labels!r}")
            with self.lock:
                cell = self._cells.get(labels)
                if cell is None:
                    cell = [0] * (len(self.bounds) + 1) + [0.0] if self.histogram else [0]
                    self._pieces.extend(self._child_pieces(labels))
                    self._children.append((labels, cell))
                    self._cells[labels] = cell
        return cell

    def observe(self, cell: Cell, value: float) -> None:
        """One observation into a histogram cell: the first bound >= value, as Prometheus' le."""
        with self.lock:
            cell[bisect_left(self.bounds, value)] += 1
            cell[-1] += value

    def observe_many(self, cell: Cell, values: Sequence[float], scale: float = 1.0,
                     total: float | None = None) -> None:
        """Observe every ``value * scale`` into a histogram cell (nanosecond gaps with ``scale=1e-9``).

        One sort in C and one bisection per bucket bound, instead of a Python step per value: about
        30 ns per value for a few hundred values. ``total`` is ``sum(values)`` when the caller
        knows it (the gaps of a token stream add up to its first-to-last time).
        """
        if not values:
            return
        counts = bucket_counts(values, self.scaled_bounds(scale))
        self.observe_counts(cell, counts, (sum(values) if total is None else total) * scale)

    def observe_counts(self, cell: Cell, counts: Sequence[int], total: float) -> None:
        """Add values already counted per bucket (:func:`bucket_counts` over :meth:`scaled_bounds`) and their sum."""
        with self.lock:
            for index, count in enumerate(counts):
                if count:
                    cell[index] += count
            cell[-1] += total

    def scaled_bounds(self, scale: float) -> tuple[float, ...]:
        """The bucket bounds in units of ``scale`` (nanoseconds for 1e-9), as :meth:`observe_many` counts
        into them; made once per scale (the tracer asks for them at every request end)."""
        bounds = self._scaled.get(scale)
        if bounds is None:
            # 0.01 / 1e-9 is 9999999.999999998 in floats: snap near-integers so that a gap of
            # exactly 10 ms lands in le="0.01", as prometheus_client would put it.
            snapped = []
            for bound in self.bounds:
                scaled = bound / scale
                near = abs(scaled - round(scaled)) < 1e-6 * max(1.0, scaled)
                snapped.append(float(round(scaled)) if near else scaled)
            bounds = self._scaled[scale] = tuple(snapped)
        return bounds

    # -- collection ---------------------------------------------------------------------------
    def _snapshot(self) -> tuple[list[tuple[str, ...]], list[tuple]]:
        children = self._children[:]
        # tuple() copies a cell in one C call: a histogram's buckets and sum are read together.
        return [labels for labels, _ in children], [tuple(cell) for _, cell in children]

    def _exposition(self, values: list[tuple]) -> bytes:
        if not values:
            return self._header
        if self.histogram:
            numbers: list[str] = []
            for counts in values:
                cumulative = list(accumulate(counts[:-1]))
                numbers += map(_SMALL.__getitem__ if cumulative[-1] < _SMALL_COUNT else str, cumulative)
                numbers.append(numbers[-1])  # _count: the +Inf bucket
                total = counts[-1]
                # floatToGoString writes repr() below 10^6 (a sum of latencies is never negative).
                numbers.append(repr(total) if 0.0 <= total < 1e6 else floatToGoString(total))
        else:
            numbers = list(map(str, map(itemgetter(0), values)))
        parts = [b""] * (2 * len(numbers))
        parts[0::2] = self._pieces[:len(numbers)]
        parts[1::2] = "\n".join(numbers).encode().split(b"\n")  # every number to bytes in three C calls
        parts[0] = parts[0][len(self._tail):]  # the first child follows the header, not a number
        parts.append(self._tail)
        return self._header + b"".join(parts)

    def _samples(self, keys: list[tuple[str, ...]], values: list[tuple]) -> list:
        family = self.signal.family(self.labelnames)
        for labels, counts in zip(keys, values, strict=True):
            if self.histogram:
                cumulative = accumulate(float(count) for count in counts[:-1])
                family.add_metric(list(labels), list(zip(self._le, cumulative, strict=True)), counts[-1])
            else:
                family.add_metric(list(labels), float(counts[0]))
        return family.samples

    def describe(self) -> Iterator[Metric]:
        # Names for the registry's collision check and ?name[]= filters, without collecting.
        yield self.signal.family(self.labelnames)

    def collect(self) -> Iterator[Metric]:
        keys, values = self._snapshot()
        family = self.signal.family(self.labelnames)
        yield RenderedFamily(family.name, family.documentation, family.type,
                             exposition=lambda: self._exposition(values), samples=lambda: self._samples(keys, values))


def bucket_counts(values: Sequence[float], bounds: Sequence[float]) -> list[int]:
    """How many ``values`` fall in each bucket: ``<= bounds[0]``, each next bound, then above the last."""
    ordered = sorted(values)
    cumulative = [bisect_right(ordered, bound) for bound in bounds]
    return [cumulative[0], *(b - a for a, b in pairwise(cumulative)), len(ordered) - cumulative[-1]]
