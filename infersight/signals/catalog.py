"""The Signal type, the catalog that holds every declared signal, and its helpers."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
ALLOWED_PREFIXES = ("llm_", "gpu_", "infersight_")
# Labels that would explode cardinality or leak user data: never allowed on any signal.
# Base units and the name part that must carry them (Prometheus naming conventions).
UNIT_SUFFIX = {
    "seconds": "_seconds",
    "bytes": "_bytes",
    "ratio": "_ratio",
    "joules": "_joules",
    "watts": "_watts",
    "celsius": "_celsius",
    "hertz": "_hertz",
    "tokens": "_tokens",
}
FORBIDDEN_LABELS = frozenset({"request_id", "trace_id", "span_id", "prompt", "completion", "user"})


class Kind(enum.StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Signal:
    """One metric: its name, kind, unit, labels, help text and producing component."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str
    producer: str
    buckets: tuple[float, ...] = field(default=())

    # -- PromQL helpers -------------------------------------------------------------------
    def select(self, suffix: str = "", **matchers: str) -> str:
        """A PromQL selector for this signal, e.g. ``gpu_up{node="n1"}``.

        Matcher values are used as written; a value starting with ``=~``, ``!=`` or ``!~``
        picks that operator (``select(instance="=~gw.*")``). ``suffix`` selects histogram
        series: ``"_bucket"``, ``"_sum"`` or ``"_count"``.
        """
        if suffix and self.kind is not Kind.HISTOGRAM:
            raise ValueError(f"{self.name} is a {self.kind.value}; only histograms have {suffix}")
        for label in matchers:
            if label not in self.labels and not (label == "le" and suffix == "_bucket"):
                raise ValueError(f"{self.name} has no label {label!r} (labels: {self.labels})")
        name = self.name + suffix
        if not matchers:
            return name
        parts = []
        for label, value in matchers.items():
            op = "="
            for candidate in ("=~", "!=", "!~"):
                if value.startswith(candidate):
                    op, value = candidate, value[len(candidate):]
                    break
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'{label}{op}"{escaped}"')
        return f"{name}{{{','.join(parts)}}}"

    def bucket(self, **matchers: str) -> str:
        return self.select("_bucket", **matchers)

    def sum(self, **matchers: str) -> str:
        return self.select("_sum", **matchers)

    def count(self, **matchers: str) -> str:
        return self.select("_count", **matchers)

    def quantile(self, q: float, by: Sequence[str], window: str = "5m", **matchers: str) -> str:
        """``histogram_quantile(q, sum by (le, ...) (rate(<bucket>[window])))``."""
        groups = ", ".join(["le", *by])
        return f"histogram_quantile({q}, sum by ({groups}) (rate({self.bucket(**matchers)}[{window}])))"

    def rate(self, window: str = "5m", **matchers: str) -> str:
        if self.kind is not Kind.COUNTER:
            raise ValueError(f"rate() needs a counter; {self.name} is a {self.kind.value}")
        return f"rate({self.select(**matchers)}[{window}])"

    def series_names(self) -> tuple[str, ...]:
        """The series names this signal exposes in Prometheus text format."""
        if self.kind is Kind.HISTOGRAM:
            return (self.name + "_bucket", self.name + "_sum", self.name + "_count")
        return (self.name,)

    # -- prometheus_client helpers --------------------------------------------------------
    def register(self, registry: CollectorRegistry, extra_labels: Iterable[str] = ()):
        """Create the matching prometheus_client metric in ``registry`` and return it."""
        labels = tuple(self.labels) + tuple(extra_labels)
        if self.kind is Kind.COUNTER:
            return Counter(self.name, self.help, labels, registry=registry)
        if self.kind is Kind.GAUGE:
            return Gauge(self.name, self.help, labels, registry=registry)
        return Histogram(self.name, self.help, labels, buckets=self.buckets, registry=registry)

    def family(self, labels: Sequence[str] | None = None):
        """An empty metric family for a custom Collector's ``collect()``."""
        labels = list(self.labels if labels is None else labels)
        if self.kind is Kind.COUNTER:
            return CounterMetricFamily(self.name, self.help, labels=labels)
        if self.kind is Kind.GAUGE:
            return GaugeMetricFamily(self.name, self.help, labels=labels)
        return HistogramMetricFamily(self.name, self.help, labels=labels)


CATALOG: dict[str, Signal] = {}


def declare(
    name: str,
    kind: Kind,
    unit: str,
    labels: Sequence[str],
    help: str,
    producer: str,
    buckets: Sequence[float] = (),
) -> Signal:
    """Declare a signal and add it to the catalog. Domain modules call this at import."""
    signal = Signal(name, Kind(kind), unit, tuple(labels), help, producer, tuple(buckets))
    if name in CATALOG:
        raise ValueError(f"signal {name!r} declared twice (producers {CATALOG[name].producer}, {producer})")
    CATALOG[name] = signal
    return signal


def get(name: str) -> Signal:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"no signal named {name!r} in the catalog") from None


def all_signals() -> list[Signal]:
    return sorted(CATALOG.values(), key=lambda s: s.name)


def validate_catalog(signals: Iterable[Signal] | Mapping[str, Signal] | None = None) -> list[str]:
    """Return a list of problems with the given signals (the whole catalog by default)."""
    if signals is None:
        signals = CATALOG.values()
    elif isinstance(signals, Mapping):
        signals = signals.values()
    problems: list[str] = []
    seen: set[str] = set()
    exposed: dict[str, str] = {}
    for s in signals:
        if s.name in seen:
            problems.append(f"{s.name}: duplicate name")
        seen.add(s.name)
        if not METRIC_NAME_RE.match(s.name) or ":" in s.name:
            problems.append(f"{s.name}: not a valid Prometheus metric name (no colons in raw metrics)")
        if not s.name.startswith(ALLOWED_PREFIXES):
            problems.append(f"{s.name}: must start with one of {ALLOWED_PREFIXES}")
        if s.kind is Kind.COUNTER and not s.name.endswith("_total"):
            problems.append(f"{s.name}: a counter must end in _total")
        if s.kind is not Kind.COUNTER and s.name.endswith("_total"):
            problems.append(f"{s.name}: only counters end in _total")
        if s.kind is Kind.HISTOGRAM:
            if not s.buckets:
                problems.append(f"{s.name}: a histogram needs buckets")
            elif list(s.buckets) != sorted(set(s.buckets)):
                problems.append(f"{s.name}: buckets must be strictly increasing")
        elif s.buckets:
            problems.append(f"{s.name}: only histograms have buckets")
        for label in s.labels:
            if not LABEL_NAME_RE.match(label) or label.startswith("__"):
                problems.append(f"{s.name}: bad label name {label!r}")
            if label in FORBIDDEN_LABELS:
                problems.append(f"{s.name}: label {label!r} is forbidden (cardinality or privacy)")
        if len(set(s.labels)) != len(s.labels):
            problems.append(f"{s.name}: repeated label")
        suffix = UNIT_SUFFIX.get(s.unit)
        if suffix and suffix not in s.name:
            problems.append(f"{s.name}: unit {s.unit!r} must show in the name as {suffix!r}")
        if not s.help.strip():
            problems.append(f"{s.name}: empty help")
        for series in s.series_names():
            if series in exposed and exposed[series] != s.name:
                problems.append(f"{s.name}: series {series} collides with {exposed[series]}")
            exposed[series] = s.name
    return problems
