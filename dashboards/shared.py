"""Panels that more than one dashboard shows, built once so that their query, unit, legend and threshold
line agree wherever they appear; each dashboard keeps its own width and words. (Two copies drift: the
breaker's copies of these two once ignored the $model and $pool its Fleet twins followed.)"""

from __future__ import annotations

from collections.abc import Mapping

from infersight.alerts import recording as rec
from infersight.alerts.promql import ratio
from infersight.dashboards.panels import RATE, Line, Q, recorded, timeseries
from infersight.signals import request
from infersight.thresholds import Thresholds

BY_POOL = ("model", "pool")


def retries_per_request(limits: Thresholds, matchers: Mapping[str, str], *, description: str, good: str,
                        width: int = 8) -> dict:
    """Gateway re-attempts per request by model and pool, and per model with the clients' own retries (what
    the retry-storm alert reads), against thresholds.retry_ratio."""
    gateway = ratio(request.RETRIES.rate(RATE, **matchers), request.REQUESTS.rate(RATE, **matchers), BY_POOL)
    return timeseries("Retries per request", "percentunit",
                      [Q(gateway, "{{model}} {{pool}}"),
                       Q(recorded(rec.RETRIES_PER_REQUEST, matchers), "{{model}} with client retries")],
                      line=Line(limits.retry_ratio), width=width, description=description, good=good)


def ejected_share(limits: Thresholds, matchers: Mapping[str, str], *, description: str, good: str,
                  width: int) -> dict:
    """The ejection-cascade alert's share of a pool's established instances ejected in 5 minutes."""
    return timeseries("Share of instances ejected in 5 minutes", "percentunit",
                      [Q(recorded(rec.EJECTED_SHARE, matchers), "{{model}} {{pool}}")],
                      line=Line(limits.ejection_share), max_value=1, width=width, description=description, good=good)
