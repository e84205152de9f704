"""Series recorded scrape by scrape, written as promtool ``input_series`` and as OpenMetrics.

A series exists from the scrape where its producer first exposed it; before that it has no value
(``_`` in promtool's notation), which is how a counter created at its first event looks to
Prometheus. A series that stops being exposed gets a staleness marker, as a scrape would give it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

Key = tuple[str, tuple[tuple[str, str], ...]]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def selector(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


class Recorder:
    def __init__(self, step_s: float = 60.0):
        self.step_s = step_s
        self.steps = 0
        self._raw: dict[tuple, tuple[int, list[float]]] = {}  # (name, labels as produced) -> (first step, values)

    def record(self, samples: Iterable[tuple[str, dict[str, str], float]]) -> None:
        step = self.steps
        raw = self._raw
        for name, labels, value in samples:
            key = (name, *labels.items())
            entry = raw.get(key)
            if entry is None:
                raw[key] = (step, [value])
                continue
            first, values = entry
            have = first + len(values)
            if have > step:
                continue  # the same series twice in one scrape: keep the first, as Prometheus does
            if have < step:
                values.extend([None] * (step - have))
            values.append(value)
        self.steps = step + 1

    @property
    def series(self) -> dict[Key, list[float | None]]:
        out: dict[Key, list[float | None]] = {}
        for (name, *labels), (first, values) in self._raw.items():
            padded = [None] * first + values
            padded += [None] * (self.steps - len(padded))
            out[(name, tuple(sorted(labels)))] = padded
        return out

    def values(self, name: str, **labels: str) -> list[list[float | None]]:
        """Every recorded series named ``name`` whose labels include ``labels`` (for tests)."""
        want = set(labels.items())
        return [v for (n, ls), v in self.series.items() if n == name and want <= set(ls)]

    # -- promtool ---------------------------------------------------------------------------------
    def input_series(self) -> list[dict[str, str]]:
        return [{"series": selector(name, labels), "values": promtool_values(values)}
                for (name, labels), values in sorted(self.series.items())]

    # -- OpenMetrics --------------------------------------------------------------------------------
    def openmetrics(self, start: float) -> Iterator[str]:
        """Lines for ``promtool tsdb create-blocks-from openmetrics``: one untyped family per series name."""
        by_name: dict[str, list[tuple[tuple[tuple[str, str], ...], list[float | None]]]] = {}
        for (name, labels), values in sorted(self.series.items()):
            by_name.setdefault(name, []).append((labels, values))
        for name, series in by_name.items():
            yield f"# TYPE {name} unknown"
            for labels, values in series:
                sel = selector(name, labels)
                for i, v in enumerate(values):
                    if v is not None:
                        yield f"{sel} {_num(v)} {start + i * self.step_s:.3f}"
        yield "# EOF"

    def write_openmetrics(self, path: Path, start: float) -> None:
        with path.open("w") as out:
            for line in self.openmetrics(start):
                out.write(line + "\n")


def promtool_values(values: list[float | None]) -> str:
    """promtool's expanding notation: ``_`` absent, ``stale`` once after a value, ``a+bxN`` runs."""
    parts: list[str] = []
    i, n = 0, len(values)
    while i < n:
        v = values[i]
        if v is None:
            j = i
            while j < n and values[j] is None:
                j += 1
            gap = j - i
            if i > 0:
                parts.append("stale")
                gap -= 1
            if gap == 1:
                parts.append("_")
            elif gap > 1:
                parts.append(f"_x{gap}")
            i = j
            continue
        # the longest run from i with one constant step (integers only: exact in floats)
        j = i + 1
        if j < n and values[j] is not None:
            step = values[j] - v
            exact = v.is_integer() and values[j].is_integer()
            if exact or step == 0:
                while j + 1 < n and values[j + 1] is not None and values[j + 1] - values[j] == step and (
                        step == 0 or values[j + 1].is_integer()):
                    j += 1
                count = j - i
                if count >= 2:
                    sign = "" if step == 0 else f"{'+' if step > 0 else '-'}{_num(abs(step))}"
                    parts.append(f"{_num(v)}{sign}x{count}")
                    i = j + 1
                    continue
        parts.append(_num(v))
        i += 1
    return " ".join(parts)
