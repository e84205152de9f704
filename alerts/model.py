"""The vocabulary of alerts as code: recording rules, alerts and the promtool cases that prove them."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class Severity(enum.StrEnum):
    CRITICAL = "critical"  # pages
    WARNING = "warning"  # tickets
    INFO = "info"  # dashboards only


class SignalClass(enum.StrEnum):
    """The ``signal`` label: what kind of trouble, and so who (or what) acts on it."""

    SCALE_OUT = "scale_out"
    CIRCUIT_BREAKER = "circuit_breaker"
    OVERLOAD = "overload"
    SLO = "slo"
    GPU = "gpu"
    CACHE = "cache"
    PIPELINE = "pipeline"


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


@dataclass(frozen=True)
class Series:
    """One promtool input series: a selector and values in promtool's expanding notation."""

    selector: str
    values: str


@dataclass(frozen=True)
class Expected:
    """An alert expected to fire: its labels from the expression and the value its description shows.

    ``alert`` names a sibling rule when the firing one is not the case's own (same alertname, other
    severity); None means the alert that owns the case.
    """

    labels: Mapping[str, str]
    value: float = 0.0
    alert: Alert | None = None


@dataclass(frozen=True)
class Case:
    """A promtool alert test: input series, the minute to evaluate at, and what fires then."""

    name: str
    series: Sequence[Series]
    at_minutes: int
    fires: Sequence[Expected] = ()
    quiet_at: Sequence[int] = ()  # more minutes at which the alert must not be firing


@dataclass(frozen=True)
class Alert:
    """An alerting rule in the monitoring-mixin style.

    ``description`` is a Go template limited to what :mod:`infersight.alerts.templates` can render
    (``$labels.x`` and ``$value`` with printf or humanizePercentage), so the expected annotations of
    every test case are computed here rather than copied from a promtool run.
    """

    name: str
    expr: str
    severity: Severity
    signal: SignalClass
    summary: str
    description: str
    for_: str = "0m"
    labels: Mapping[str, str] = field(default_factory=dict)
    cases: Sequence[Case] = ()

    def static_labels(self, cluster: str) -> dict[str, str]:
        return {"severity": self.severity.value, "signal": self.signal.value, "cluster": cluster, **self.labels}
