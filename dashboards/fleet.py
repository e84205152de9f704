"""Fleet overview: latency against the SLO, traffic, the gateway queue and instance health.

Everything is split by model and pool; the last row repeats per pool so canary and stable sit side
by side. Lines are the thresholds the alerts use (config ``slo`` and ``thresholds``).
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.limits import Limits
from infersight.config import Config
from infersight.dashboards.panels import RATE, Line, Q, dashboard, layout, timeseries, variable
from infersight.signals import gateway, request

UID = "infersight-fleet"
F = {"model": "=~$model", "pool": "=~$pool"}  # the dashboard variables, on every request/gateway query
BY = ("model", "pool")
LEGEND = "{{model}} {{pool}}"


def recorded(name: str) -> str:
    """A recording rule's series narrowed to the dashboard's model and pool."""
    return f'{name}{{model=~"$model",pool=~"$pool"}}'


def _latency(config: Config, limits: Limits) -> list[dict]:
    ttft = [Q(request.TTFT.quantile(q, BY, RATE, **F), f"p{round(q * 100)} {LEGEND}") for q in rec.QUANTILES]
    tpot = [Q(request.TPOT.quantile(q, BY, RATE, **F), f"p{round(q * 100)} {LEGEND}") for q in rec.QUANTILES]
    over_slo = Q(f'{rec.slo_errors_name("5m")}{{model=~"$model"}}', "{{model}}")
    return [
        timeseries("TTFT p50 / p95 / p99 vs SLO", "s", ttft, line=Line(limits.ttft_slo_seconds),
                   description=f"Time to first token as clients see it; the line is the SLO "
                               f"({limits.ttft_slo_seconds:g}s)."),
        timeseries("TPOT p50 / p95 / p99", "s", tpot, line=Line(config.slo.tpot_p95_seconds),
                   description="Time per output token; the line is slo.tpot_p95_seconds."),
        timeseries("Requests over the TTFT SLO (5m)", "percentunit", [over_slo], line=Line(limits.error_budget),
                   description="Share of requests slower than the SLO; the line is the error budget."),
    ]


def _traffic(limits: Limits) -> list[dict]:
    requests = f"sum by (model, pool, outcome) ({request.REQUESTS.rate(RATE, **F)})"
    rejections = f"sum by (model, pool, reason) ({request.REJECTIONS.rate(RATE, **F)})"
    retries = (f"sum by (model, pool) ({request.RETRIES.rate(RATE, **F)}) "
               f"/ sum by (model, pool) ({request.REQUESTS.rate(RATE, **F)})")
    rejected_share = f'{rec.REJECTION_RATIO}{{model=~"$model"}}'
    return [
        timeseries("Request rate by outcome", "reqps", [Q(requests, LEGEND + " {{outcome}}")], stack=True),
        timeseries("Rejections (503/429) by reason", "reqps", [Q(rejections, LEGEND + " {{reason}}")],
                   width=4),
        timeseries("Rejected share", "percentunit", [Q(rejected_share, "{{model}}")],
                   line=Line(limits.rejection_ratio), width=4),
        timeseries("Retries per request", "percentunit",
                   [Q(retries, LEGEND), Q(rec.RETRIES_PER_REQUEST, "fleet")], line=Line(limits.retry_ratio),
                   description="Retry attempts over finished requests; the line is the retry-storm threshold."),
    ]


def _scale_out(limits: Limits) -> list[dict]:
    depth = [Q(recorded(rec.GATEWAY_QUEUE_SUM), "now " + LEGEND),
             Q(recorded(rec.GATEWAY_QUEUE_AVG30M), "30m mean " + LEGEND)]
    ttft_p95 = Q(f'{rec.TTFT_P95_BY_MODEL}{{model=~"$model"}}', "{{model}}")
    bar = limits.rising_share * limits.ttft_p95_target_seconds
    horizon_s = round(limits.forecast_hours * 3600)
    demand = f'{rec.IN_FLIGHT_SUM}{{model=~"$model"}}'
    capacity = f'{rec.SERVING_INSTANCES}{{model=~"$model"}} * {limits.requests_per_instance}'
    queue_time = request.QUEUE_TIME.quantile(0.95, BY, RATE, **F)
    return [
        timeseries("Gateway queue depth and its 30-minute mean", "short", depth,
                   line=Line(limits.gateway_queue_depth), width=6,
                   description="The 30-minute mean over the line (thresholds.gateway_queue_depth) asks for more "
                               "instances."),
        timeseries("TTFT p95 vs the scale-out bar", "s", [ttft_p95],
                   line=Line(limits.ttft_p95_target_seconds, warn=bar), width=6,
                   description=f"Orange: {limits.rising_share:.0%} of the p95 target; above it and rising asks "
                               "for more instances before the SLO is missed."),
        timeseries("Demand: in flight, forecast and capacity", "short",
                   [Q(demand, "in flight {{model}}"),
                    Q(f"predict_linear({demand}[1h], {horizon_s})", f"in {limits.forecast_hours:g}h {{{{model}}}}"),
                    Q(capacity, "capacity {{model}}")], width=6,
                   description=f"Capacity: serving instances x {limits.requests_per_instance} concurrent requests "
                               "each (capacity model, at the target token rate)."),
        timeseries("Gateway queue time p95", "s", [Q(queue_time, LEGEND)], width=6),
    ]


def _instances(limits: Limits) -> list[dict]:
    states = f"sum by (model, pool, state) ({gateway.INSTANCE_STATE.select(**F)})"
    ejections = f"sum by (model, pool) (increase({gateway.EJECTIONS.select(**F)}[5m]))"
    p99 = Q(recorded(rec.TTFT_P99_BY_INSTANCE), "{{instance}} " + LEGEND)
    return [
        timeseries("Instances by state", "short", [Q(states, LEGEND + " {{state}}")], stack=True, width=6,
                   description="healthy, cold (starting), half_open (breaker: low-priority traffic only), ejected."),
        timeseries("Instance TTFT p99 (circuit breaker)", "s", [p99], line=Line(limits.instance_p99_ttft_seconds),
                   width=6, description="Over the line an instance goes half-open: low-priority traffic only."),
        timeseries("Ejections in 5 minutes", "short", [Q(ejections, LEGEND)], width=6),
        timeseries("Share of instances ejected in 5 minutes", "percentunit", [Q(rec.EJECTED_SHARE, "fleet")],
                   line=Line(limits.ejection_share), max_value=1, width=6,
                   description="An ejection cascade trips the line (thresholds.ejection_share)."),
    ]


def _canary(limits: Limits) -> list[dict]:
    # Full width, repeated horizontally: Grafana splits the row among the pools, so canary and stable
    # sit side by side, one line per question.
    one_pool = {"model": "=~$model", "pool": "=~$pool"}
    ttft = request.TTFT.quantile(0.95, ("model",), RATE, **one_pool)
    errors = (f"sum by (model) ({request.REQUESTS.rate(RATE, outcome='!=success', **one_pool)}) "
              f"/ sum by (model) ({request.REQUESTS.rate(RATE, **one_pool)})")
    return [
        timeseries("TTFT p95, pool $pool", "s", [Q(ttft, "{{model}}")], line=Line(limits.ttft_slo_seconds),
                   width=24, repeat="pool"),
        timeseries("Failed share, pool $pool", "percentunit", [Q(errors, "{{model}}")], width=24, repeat="pool"),
    ]


def build(config: Config, limits: Limits) -> dict:
    rows = [("Latency vs SLO", _latency(config, limits)), ("Traffic, rejections and retries", _traffic(limits)),
            ("Scale-out signals", _scale_out(limits)), ("Instance health", _instances(limits)),
            ("Canary vs stable (one panel per pool)", _canary(limits))]
    variables = [variable("model", "model", request.REQUESTS.name, "model"),
                 variable("pool", "pool", request.REQUESTS.name, "pool")]
    return dashboard(UID, "infersight / Fleet overview",
                     "TTFT and TPOT against the SLO, traffic, the gateway queue and instance states, by model and "
                     "pool.", layout(rows), variables)
