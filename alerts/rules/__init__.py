"""Alert definitions by signal class; :func:`all_alerts` is the whole set for one config."""

from __future__ import annotations

from infersight.alerts.model import Alert
from infersight.alerts.rules import circuit_breaker, gpu, overload, pipeline, saturation, scale_out, slo
from infersight.thresholds import Thresholds

# One rule file per entry, in this order.
MODULES = {
    "scale_out": scale_out,
    "circuit_breaker": circuit_breaker,
    "overload": overload,
    "saturation": saturation,
    "slo": slo,
    "gpu": gpu,
    "pipeline": pipeline,
}


def alerts_by_file(limits: Thresholds) -> dict[str, list[Alert]]:
    return {name: module.alerts(limits) for name, module in MODULES.items()}


def all_alerts(limits: Thresholds) -> list[Alert]:
    return [alert for group in alerts_by_file(limits).values() for alert in group]


__all__ = ["all_alerts", "alerts_by_file"]
