"""Canary and strategies side by side: the same signals split by ``pool`` (canary, stable) and by ``strategy``
(the gateway's balancing policy), on shared axes so the difference is what you see.
"""

from __future__ import annotations

from infersight.alerts.promql import ratio
from infersight.config import Config
from infersight.dashboards.fleet import failed_share
from infersight.dashboards.panels import RATE, Line, Q, dashboard, layout, quantiles, timeseries, variable
from infersight.signals import request
from infersight.thresholds import Thresholds

UID = "infersight-canary"
F = {"model": "=~$model", "pool": "=~$pool", "strategy": "=~$strategy"}


def p95(signal, by: str) -> str:
    return signal.quantile(0.95, (by,), RATE, **F)


def _pools(config: Config, limits: Thresholds) -> list[dict]:
    return [
        timeseries("TTFT p95 by pool", "s", [Q(p95(request.TTFT, "pool"), "{{pool}}")],
                   line=Line(limits.ttft_slo_seconds), width=8,
                   description="Canary and stable on one axis; the line is the TTFT SLO.",
                   good="the canary on top of stable; a canary above stable is the new version's cost."),
        timeseries("TPOT p95 by pool", "s", [Q(p95(request.TPOT, "pool"), "{{pool}}")],
                   line=Line(config.slo.tpot_p95_seconds), width=8,
                   description="Time per output token by pool.", good="canary within a few percent of stable."),
        timeseries("Failed share by pool", "percentunit", [Q(failed_share("pool", **F), "{{pool}}")],
                   line=Line(limits.error_budget), width=8,
                   description="Requests that did not succeed, by pool; the line is the error budget.",
                   good="canary no higher than stable."),
        # One panel per pool, repeated across the row, for the pool's own detail.
        timeseries("TTFT p50 / p95 / p99, pool $pool", "s",
                   quantiles(request.TTFT, ("model",), F, "{{model}}"), line=Line(limits.ttft_slo_seconds), width=24,
                   repeat="pool",
                   description="Repeated per pool, side by side.", good="the same shape in every pool."),
    ]


HOT_SPOT_BY = ("model", "pool", "strategy")  # the pool's strategy in the legend: a policy change shows
HOT_SPOT_LEGEND = "{{pool}} ({{strategy}})"


def busiest_share() -> str:
    """The busiest instance's share of its pool's requests in flight (1/N when spread evenly)."""
    by = ", ".join(HOT_SPOT_BY)
    return (f"max by ({by}) (sum by ({by}, instance) ({request.IN_FLIGHT.select(**F)}))\n"
            f"/ sum by ({by}) ({request.IN_FLIGHT.select(**F)})")


def slowest_instance_p99() -> str:
    """The slowest instance's p99 TTFT in each pool: a hot spot hides in the pool's own quantiles."""
    return f"max by ({', '.join(HOT_SPOT_BY)}) ({request.TTFT.quantile(0.99, (*HOT_SPOT_BY, 'instance'), RATE, **F)})"


def cached_share() -> str:
    """Prompt tokens served from the prefix cache, by pool and strategy."""
    return ratio(request.CACHED_INPUT_TOKENS.rate(RATE, **F), request.INPUT_TOKENS.rate(RATE, **F), HOT_SPOT_BY)


def _hot_spots(config: Config, limits: Thresholds) -> list[dict]:
    return [
        timeseries("Busiest instance's share of its pool's requests in flight", "percentunit",
                   [Q(busiest_share(), HOT_SPOT_LEGEND)], max_value=1, width=8,
                   description="Per pool and strategy: the requests in flight on its busiest instance over the "
                               "pool's. Spread evenly it is 1 / the pool's instances.",
                   good="canary and stable near 1 / their instance count; a canary far above stable piles "
                        "its traffic on one instance (a hot spot: cache affinity outweighing load)."),
        timeseries("Slowest instance's TTFT p99 by pool", "s", [Q(slowest_instance_p99(), HOT_SPOT_LEGEND)],
                   line=Line(limits.instance_p99_ttft_seconds), width=8,
                   description="Per pool and strategy: the p99 of its slowest instance; the line is the "
                               "breaker's floor (LLMInstanceTTFTP99High).",
                   good="canary beside stable, under the line; one canary instance far above is a hot spot."),
        timeseries("Cached prompt share by pool", "percentunit", [Q(cached_share(), HOT_SPOT_LEGEND)], max_value=1,
                   line=Line(limits.cold_cache_hit_ratio, below=True), width=8,
                   description="Prompt tokens served from the prefix cache, per pool and strategy: what a "
                               "cache-chasing policy bought.",
                   good="a cache-aware canary above stable; equal shares mean the policy gained no hits."),
    ]


def _strategies(config: Config, limits: Thresholds) -> list[dict]:
    share = (f"sum by (strategy) ({request.REQUESTS.rate(RATE, **F)}) "
             f"/ scalar(sum({request.REQUESTS.rate(RATE, **F)}))")
    cached = ratio(request.CACHED_INPUT_TOKENS.rate(RATE, **F), request.INPUT_TOKENS.rate(RATE, **F), ("strategy",))
    return [
        timeseries("TTFT p95 by strategy", "s", [Q(p95(request.TTFT, "strategy"), "{{strategy}}")],
                   line=Line(limits.ttft_slo_seconds), width=8,
                   description="Round-robin, least-connection, equal-cost, cache-aware... on one axis.",
                   good="the strategy you run lowest; cache-aware should win on shared prefixes."),
        timeseries("Gateway queue time p95 by strategy", "s", [Q(p95(request.QUEUE_TIME, "strategy"), "{{strategy}}")],
                   width=8, description="How long each policy keeps requests waiting for an instance.",
                   good="near 0 for all; a policy that queues while instances idle routes badly."),
        timeseries("Cached prompt share by strategy", "percentunit", [Q(cached, "{{strategy}}")], max_value=1,
                   line=Line(limits.cold_cache_hit_ratio, below=True), width=8,
                   description="Prompt tokens served from the prefix cache, by the policy that routed them.",
                   good="highest for cache-aware routing; under the line the policy scatters shared prefixes."),
        timeseries("TPOT p95 by strategy", "s", [Q(p95(request.TPOT, "strategy"), "{{strategy}}")],
                   line=Line(config.slo.tpot_p95_seconds), width=8,
                   description="Time per output token by policy (batch sizes it creates).",
                   good="under the line for all."),
        timeseries("Failed share by strategy", "percentunit", [Q(failed_share("strategy", **F), "{{strategy}}")],
                   line=Line(limits.error_budget), width=8, description="Requests that did not succeed, by policy.",
                   good="equal across policies; a higher one sends traffic to failing instances."),
        timeseries("Traffic share by strategy", "percentunit", [Q(share, "{{strategy}}")], max_value=1, width=8,
                   stack=True, description="Share of requests each policy routed.",
                   good="the split you configured (e.g. an A/B test of two policies)."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Canary vs stable (pools)", _pools(config, limits)),
            ("Hot spots: load spread, slowest instance and cache by pool", _hot_spots(config, limits)),
            ("Balancing strategies", _strategies(config, limits))]
    variables = [variable("model", "model", request.REQUESTS.name, "model"),
                 variable("pool", "pool", request.REQUESTS.name, "pool"),
                 variable("strategy", "strategy", request.REQUESTS.name, "strategy")]
    return dashboard(UID, "infersight / Canary and strategies",
                     "The same request signals split by pool (canary vs stable) and by the gateway's balancing "
                     "strategy, side by side on shared axes.", layout(rows), variables)
