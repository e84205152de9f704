"""The incident report's GPU and queue questions, answered by Prometheus over the incident window.

Each panel aggregates to the one label it is read by (pool, instance, node/gpu), so the legend is
short, and carries the threshold the alerts judge it against. A Prometheus that is not configured,
not reachable or has no samples is said so in the report, never skipped in silence.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from infersight.pipelines.queries.window import Window

Series = list[tuple[str, list[tuple[dt.datetime, float]]]]


class PrometheusUnavailable(OSError):
    """Prometheus did not answer, or answered with an error; the message says which."""


@dataclass(frozen=True)
class Panel:
    question: str
    ylabel: str
    promql: str
    file: str
    limit: tuple[float, str] | None = None
    ratio: bool = False


def panels(gateway_queue_limit: float | None, instance_queue_limit: float | None,
           bandwidth_saturation: float | None) -> list[Panel]:
    from infersight.signals import engine, gateway, gpu

    def limit(value: float | None, text: str) -> tuple[float, str] | None:
        return None if value is None else (value, text)

    return [
        Panel("Did requests queue at the gateway? Queue depth per pool", "requests waiting",
              f"sum by (pool) ({gateway.QUEUE_DEPTH.select()})", "gateway_queue.png",
              limit(gateway_queue_limit, f"scale-out threshold {gateway_queue_limit:g} (as a 30 min mean)"
                    if gateway_queue_limit is not None else "")),
        Panel("Did requests queue on the instances? Waiting requests per instance", "requests waiting",
              f"sum by (instance) ({engine.REQUESTS_WAITING.select()})", "instance_queue.png",
              limit(instance_queue_limit, f"overload: twice what an instance drains ({instance_queue_limit:g})"
                    if instance_queue_limit is not None else "")),
        Panel("Was GPU memory bandwidth saturated? DRAM bandwidth utilization per GPU", "bandwidth utilization",
              f"max by (node, gpu) ({gpu.MEMORY_BANDWIDTH_UTILIZATION.select()})", "gpu_bandwidth.png",
              limit(bandwidth_saturation, f"saturation {bandwidth_saturation:.0%}"
                    if bandwidth_saturation is not None else ""), ratio=True),
    ]


def query_range(url: str, promql: str, window: Window, timeout: float = 10.0) -> Series:
    """``promql`` over the window, about 300 points per series; raises PrometheusUnavailable."""
    step = max(window.seconds / 300, 1.0)
    start = window.start.replace(tzinfo=dt.UTC).timestamp()
    end = window.end.replace(tzinfo=dt.UTC).timestamp()
    query = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{query}", timeout=timeout) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise PrometheusUnavailable(f"HTTP {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise PrometheusUnavailable(str(reason)) from None
    if body.get("status") != "success":
        raise PrometheusUnavailable(body.get("error") or "query failed")
    result = []
    for item in body.get("data", {}).get("result", []):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(item["metric"].items()) if k != "__name__")
        points = [(dt.datetime.fromtimestamp(float(t), dt.UTC).replace(tzinfo=None), float(v))
                  for t, v in item["values"]]
        result.append((labels or "(all)", points))
    # the highest series first: those are the ones a limited legend must keep
    return sorted(result, key=lambda s: max((v for _, v in s[1]), default=0), reverse=True)
