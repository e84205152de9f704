"""Circuit breaker and retries: each instance's p99 against its peers and the breaker's threshold, half-open
and ejected instances, retries, ejections, health checks, flapping and cold instances.

The thresholds are those of ``alerts/rules/circuit_breaker.py`` (config ``thresholds``).
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.promql import ratio
from infersight.config import Config
from infersight.dashboards import instance, shared
from infersight.dashboards.panels import (
    RATE,
    Line,
    Q,
    dashboard,
    dashboard_url,
    data_link,
    layout,
    recorded,
    stat,
    timeseries,
    variable,
)
from infersight.signals import gateway, request
from infersight.thresholds import Thresholds

UID = "infersight-breaker"
F = {"model": "=~$model", "pool": "=~$pool"}
WHO = "{{instance}} {{pool}}"


def state(name: str) -> str:
    return f"sum by (model, instance, pool) ({gateway.INSTANCE_STATE.select(state=name, **F)})"


def _now(limits: Thresholds) -> list[dict]:
    return [
        stat(f"{name.replace('_', '-').capitalize()} instances", "short",
             [Q(f"sum({gateway.INSTANCE_STATE.select(state=name, **F)})", name)], width=6,
             line=None if name == "healthy" else Line(1), graph=False, description=what, good=good)
        for name, what, good in (
            ("healthy", "Instances in rotation, breaker closed.", "the planned instance count."),
            ("half_open", "Breaker half-open: low-priority traffic only, after a p99 over the threshold.",
             "0; one is the breaker protecting users from a slow instance."),
            ("ejected", "Out of rotation after failed health checks.", "0."),
            ("cold", "Started within thresholds.cold_start_minutes, cache still cold.", "only after a scale-out."),
        )
    ]


def _latency(limits: Thresholds) -> list[dict]:
    # What the breaker judges: each instance's own TTFT inside its engine (the gateway queue not
    # counted) against the median instance of its peers (its pool, or its model and role when the
    # pool is too small), and the floor: the breaker line.
    p99 = recorded(rec.ENGINE_TTFT_P99_BY_INSTANCE, F)
    peers = recorded(rec.ENGINE_TTFT_P99_PEERS, F)
    line = recorded(rec.ENGINE_TTFT_BREAKER_LINE, F)
    k = limits.instance_p99_peer_factor
    drill = data_link("Instance drill-down: ${__field.labels.instance}",
                 dashboard_url(instance.UID, instance="${__field.labels.instance}"))
    return [
        timeseries("Instance TTFT p99 (inside the engine) vs its peers", "s",
                   [Q(p99, WHO), Q(peers, "peer median {{model}} {{pool}}"),
                    Q(line, f"breaker line ({k:g}x peer median) {{{{model}}}} {{{{pool}}}}")],
                   line=Line(limits.instance_p99_ttft_seconds), width=16, data_links=[drill],
                   description="Each instance's p99 TTFT from a request's arrival at its engine (the gateway queue "
                               "is not in it), the median of its peers (its pool's instances; its model's of the "
                               "same role when the pool has fewer than 3 serving) and the breaker line: that times "
                               "thresholds.instance_p99_peer_factor, never under the floor "
                               "(thresholds.instance_p99_ttft_seconds, drawn). An instance with more than 1% of its "
                               "requests over the first bucket bound at or above the line goes half-open.",
                   good="instances bunched around the peer median; one far above its peers and the floor is "
                        "that instance, all above together is load (the breaker then stays closed)."),
        timeseries("Instances half-open or ejected", "short",
                   [Q(f"{state('half_open')} > 0", "half-open " + WHO), Q(f"{state('ejected')} > 0",
                                                                         "ejected " + WHO)], width=8,
                   description="Which instances the breaker or the health checks took out.",
                   good="empty."),
    ]


def _retries(limits: Thresholds) -> list[dict]:
    by_instance = f"sum by (instance, pool) ({request.RETRIES.rate(RATE, **F)})"
    timeouts = f"sum by (model, pool, kind) ({request.TIMEOUTS.rate(RATE, **F)})"
    return [
        shared.retries_per_request(
                   limits, F,
                   description="Retry attempts over finished requests; the line is the retry-storm threshold "
                               "(thresholds.retry_ratio).",
                   good="a few percent; a storm multiplies load on the instances that are still up."),
        timeseries("Retries by the instance that failed first", "ops", [Q(by_instance, WHO)], width=8,
                   description="Retry attempts per second by the instance of the attempt.",
                   good="spread thin; concentrated on one instance means it fails requests."),
        timeseries("Timeouts by kind", "reqps", [Q(timeouts, "{{model}} {{pool}} {{kind}}")], width=8,
                   description="ttft: no first token in time; total: the request ran too long; idle: the stream "
                               "stalled.",
                   good="0; timeouts are what clients retry."),
    ]


def _ejections(limits: Thresholds) -> list[dict]:
    ejections = f"sum by (instance, pool) (increase({gateway.EJECTIONS.select(**F)}[5m]))"
    failures = ratio(gateway.HEALTH_CHECK_FAILURES.rate(RATE, **F), gateway.HEALTH_CHECKS.rate(RATE, **F),
                     ("instance", "pool"))
    flaps = f"sum by (instance, pool) (increase({gateway.STATE_TRANSITIONS.select(**F)}[15m]))"
    age = f"time() - max by (instance, pool) ({gateway.INSTANCE_START_TIME.select(**F)})"
    return [
        timeseries("Ejections in 5 minutes", "short", [Q(ejections, WHO)], width=6,
                   description="Times the gateway ejected each instance in the last 5 minutes.",
                   good="0; the same instance again and again is flapping."),
        shared.ejected_share(
                   limits, F, width=6,
                   description="An ejection cascade trips the line (thresholds.ejection_share).",
                   good="0; many at once means the survivors get overloaded and fail next."),
        timeseries("Health-check failure ratio", "percentunit", [Q(failures, WHO)], max_value=1, width=6,
                   description="Failed health checks over health checks, per instance.",
                   good="0."),
        timeseries("State changes in 15 minutes", "short", [Q(flaps, WHO)], line=Line(limits.flaps_per_15m),
                   width=6, description="Breaker and health state transitions; the line is thresholds.flaps_per_15m.",
                   good="under the line; at it the instance flaps in and out of rotation."),
        timeseries("Instance age", "s", [Q(age, WHO)], line=Line(limits.cold_start_minutes * 60, below=True),
                   width=12, description="Seconds since each instance joined its pool; under the line it is in its "
                                         "cold start (thresholds.cold_start_minutes).",
                   good="young instances are few and leave the red zone without being ejected (else: cold-start "
                        "thrash)."),
        timeseries("Cached share of prompt tokens per instance", "percentunit",
                   [Q(recorded(rec.CACHED_INPUT_RATIO, F), WHO)],
                   line=Line(limits.cold_cache_hit_ratio, below=True), max_value=1, width=12,
                   description="Prompt tokens served from the prefix cache; under the line an instance is "
                               "cache-cold (thresholds.cold_cache_hit_ratio).",
                   good="new instances climb above the line within their cold start."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Now", _now(limits)), ("Breaker: p99 against peers", _latency(limits)),
            ("Retries and timeouts", _retries(limits)), ("Ejections, health checks, flapping, cold starts",
                                                         _ejections(limits))]
    variables = [variable("model", "model", gateway.INSTANCE_STATE.name, "model"),
                 variable("pool", "pool", gateway.INSTANCE_STATE.name, "pool")]
    return dashboard(UID, "infersight / Circuit breaker and retries",
                     "Per-instance p99 against peers and the breaker threshold, half-open and ejected instances, "
                     "retries, ejections, health checks, flapping and cold starts.", layout(rows), variables)
