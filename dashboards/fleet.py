"""Fleet overview: where the fleet stands now, latency against the SLO, traffic, and instance health.

Everything is split by model and pool. The deeper questions have their own dashboards, linked from
here: scale-out and capacity (``capacity``), the circuit breaker and retries (``breaker``), canary
and strategies side by side (``canary``), one instance (``instance``). Lines are the thresholds the
alerts use (config ``slo`` and ``thresholds``).
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.promql import ratio
from infersight.attributes import Outcome
from infersight.config import Config
from infersight.dashboards import shared
from infersight.dashboards.panels import (
    RATE,
    Line,
    Q,
    dashboard,
    layout,
    quantiles,
    recorded,
    stat,
    timeseries,
    variable,
)
from infersight.signals import gateway, request
from infersight.thresholds import Thresholds

UID = "infersight-fleet"
F = {"model": "=~$model", "pool": "=~$pool"}  # the dashboard variables, on every request/gateway query
BY = ("model", "pool")
LEGEND = "{{model}} {{pool}}"


def failed_share(by: str, **matchers: str) -> str:
    """Share of finished requests that did not succeed."""
    return ratio(request.REQUESTS.rate(RATE, outcome=f"!={Outcome.SUCCESS}", **matchers),
                 request.REQUESTS.rate(RATE, **matchers), (by,))


def _now(limits: Thresholds) -> list[dict]:
    ttft_p95 = f"histogram_quantile(0.95, sum by (le) (rate({request.TTFT.bucket(**F)}[{RATE}])))"
    failed = ratio(request.REQUESTS.rate(RATE, outcome=f"!={Outcome.SUCCESS}", **F), request.REQUESTS.rate(RATE, **F))
    serving = f"sum({gateway.INSTANCE_STATE.select(state='healthy', **F)})"
    return [
        stat("TTFT p95", "s", [Q(ttft_p95, "p95")], line=Line(limits.ttft_p95_target_seconds,
                                                             warn=limits.rising_ttft_bar_seconds),
             description="Time to first token, 95th percentile, over the selection.",
             good="green: under the scale-out bar (orange) and the p95 target (red)."),
        stat("Requests", "reqps", [Q(f"sum({request.REQUESTS.rate(RATE, **F)})", "requests")],
             description="Finished requests per second.", good="follows the day's traffic; a cliff is an outage."),
        stat("Failed share", "percentunit", [Q(failed, "failed")], line=Line(limits.error_budget), decimals=2,
             description="Requests that ended in error, timeout, cancellation or rejection.",
             good="under the SLO's error budget (red)."),
        stat("Healthy instances", "short", [Q(serving, "healthy")],
             description="Instances in rotation with a closed breaker.",
             good="the planned instance count; fewer means ejections or cold starts (see the breaker dashboard)."),
        stat("Gateway queue", "short", [Q(f"sum({gateway.QUEUE_DEPTH.select(**F)})", "queued")],
             line=Line(limits.gateway_queue_depth), description="Requests waiting at the gateway for an instance.",
             good="near 0; the scale-out signal counts it with the engines' queues, in seconds of waiting "
                  "(Capacity dashboard)."),
        stat("Retries per request now", "percentunit",
             [Q(recorded(rec.RETRIES_PER_REQUEST, F), "{{model}} with client retries")],
             line=Line(limits.retry_ratio), decimals=2, description="Retry attempts over finished requests.",
             good="a few percent; at the line it is a retry storm."),
    ]


def _latency(config: Config, limits: Thresholds) -> list[dict]:
    ttft = quantiles(request.TTFT, BY, F, LEGEND)
    tpot = quantiles(request.TPOT, BY, F, LEGEND)
    over_slo = Q(recorded(rec.slo_errors_name("5m"), F), "{{model}}")
    return [
        timeseries("TTFT p50 / p95 / p99 vs SLO", "s", ttft, line=Line(limits.ttft_slo_seconds),
                   description=f"Time to first token as clients see it; the line is the SLO "
                               f"({limits.ttft_slo_seconds:g}s).",
                   good="p99 under the line; p95 climbing towards it is the first sign of a capacity problem."),
        timeseries("TPOT p50 / p95 / p99", "s", tpot, line=Line(config.slo.tpot_p95_seconds),
                   description="Time per output token; the line is slo.tpot_p95_seconds.",
                   good="p95 under the line; TPOT rises with batch size, so some rise under load is expected."),
        timeseries("Requests over the TTFT SLO (5m)", "percentunit", [over_slo], line=Line(limits.error_budget),
                   description="Share of requests slower than the SLO; the line is the error budget.",
                   good="under the line; above it the error budget burns and the burn-rate alerts follow."),
    ]


def _traffic(limits: Thresholds) -> list[dict]:
    requests = f"sum by (model, pool, outcome) ({request.REQUESTS.rate(RATE, **F)})"
    rejections = f"sum by (model, pool, reason) ({request.REJECTIONS.rate(RATE, **F)})"
    rejected_share = recorded(rec.REJECTION_RATIO, F)
    return [
        timeseries("Request rate by outcome", "reqps", [Q(requests, LEGEND + " {{outcome}}")], stack=True,
                   description="Finished requests per second by outcome.",
                   good="almost all success; error and timeout bands are incidents, cancelled is clients leaving."),
        timeseries("Rejections (503/429) by reason", "reqps", [Q(rejections, LEGEND + " {{reason}}")],
                   width=4, description="Requests turned away without service.",
                   good="0; overload rejections mean the fleet is full."),
        timeseries("Rejected share", "percentunit", [Q(rejected_share, "{{model}}")],
                   line=Line(limits.rejection_ratio), width=4,
                   description="Rejected over finished requests; the line is thresholds.rejection_ratio.",
                   good="0, under the line."),
        shared.retries_per_request(
                   limits, F,
                   description="Gateway re-attempts over finished requests, per pool; and per model with the "
                               "clients' own retries (SDK retry headers, repeated request ids), which the "
                               "retry-storm alert reads. The line is the retry-storm threshold.",
                   good="a few percent; retries growing with failures is a storm in the making."),
    ]


def _instances(limits: Thresholds) -> list[dict]:
    states = f"sum by (model, pool, state) ({gateway.INSTANCE_STATE.select(**F)})"
    return [
        timeseries("Instances by state", "short", [Q(states, LEGEND + " {{state}}")], stack=True, width=12,
                   description="healthy, cold (starting), half_open (breaker: low-priority traffic only), ejected.",
                   good="all healthy; cold only right after a scale-out."),
        shared.ejected_share(
                   limits, F, width=12,
                   description="Per model and pool, instances in their cold start apart: an ejection cascade "
                               "trips the line (thresholds.ejection_share).",
                   good="0; single ejections are the breaker working, many at once are a cascade."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Now", _now(limits)), ("Latency vs SLO", _latency(config, limits)),
            ("Traffic, rejections and retries", _traffic(limits)), ("Instance health", _instances(limits))]
    variables = [variable("model", "model", request.REQUESTS.name, "model"),
                 variable("pool", "pool", request.REQUESTS.name, "pool")]
    return dashboard(UID, "infersight / Fleet overview",
                     "TTFT and TPOT against the SLO, traffic, rejections, retries and instance states, by model and "
                     "pool.", layout(rows), variables)
