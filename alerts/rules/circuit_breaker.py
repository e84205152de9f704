"""Circuit-breaker alerts: one instance misbehaving, or the gateway's own protection turning on the fleet.

Routed to the gateway's webhook, which half-opens breakers; the critical ones page as well.
"""

from __future__ import annotations

import math

from infersight.alerts import recording as rec
from infersight.alerts.limits import Limits, num
from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.rules.common import PCT, instance_labels, lab, pct, request_labels, require, val
from infersight.alerts.series import counter, gauge, histogram, observations_near, quantile, steps
from infersight.signals import gateway, request

SIGNAL = SignalClass.CIRCUIT_BREAKER
ON_INSTANCE = "on (model, instance, pool)"


def instance_p99_high(limits: Limits) -> Alert:
    t = limits.instance_p99_ttft_seconds
    buckets = request.TTFT.buckets
    slow = min(1.5 * t, (t + buckets[-1]) / 2)

    def fleet(i1_target: float):
        obs = observations_near(buckets, 0.99, i1_target)
        ok = observations_near(buckets, 0.99, 0.3 * t)
        series = [*histogram(request.TTFT, request_labels("e1:8000"), [(obs, 30)]),
                  *histogram(request.TTFT, request_labels("e2:8000"), [(ok, 30)])]
        return series, quantile(buckets, obs, 0.99)

    firing, p99 = fleet(slow)
    near, p99_near = fleet(0.95 * t)
    require(p99 > t > p99_near, f"p99 {p99} must exceed {t}, {p99_near} must not")
    return Alert(
        name="LLMInstanceTTFTP99High",
        expr=f"{rec.TTFT_P99_BY_INSTANCE} > {num(t)}",
        for_="2m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        labels={"action": "half_open"},
        summary="One instance's p99 TTFT is over its limit: half-open its breaker.",
        description=(f"p99 TTFT of instance {lab('instance')} ({lab('model')}, pool {lab('pool')}) is {val(2)}s, "
                     f"over {num(t)}s. Half-open its breaker: send it only low-priority traffic, do not eject it."),
        cases=[
            Case("one slow instance among healthy ones", firing, 20, [Expected(instance_labels("e1:8000"), p99)]),
            Case("slow instance just under the limit", near, 20),
        ],
    )


def retry_storm(limits: Limits) -> Alert:
    t = limits.retry_ratio
    per_minute = 1000

    def traffic(retries: int):
        return [counter(request.REQUESTS, request_labels(outcome="success"), [(per_minute, 30)]),
                counter(request.RETRIES, request_labels(), [(retries, 30)])]

    storm = math.floor(t * per_minute) + 10
    near = round(0.95 * t * per_minute)
    require(storm / per_minute > t > near / per_minute, "retry ratios must straddle the threshold")
    return Alert(
        name="LLMRetryStorm",
        expr=f"{rec.RETRIES_PER_REQUEST} > {num(t)}",
        for_="5m",
        severity=Severity.CRITICAL,
        signal=SIGNAL,
        summary="Retries are multiplying load across the fleet: a retry storm.",
        description=(f"The fleet makes {val(2)} retries per request (threshold {num(t)}). Retries amplify load "
                     "on instances that are already slow; make clients back off and cap retry budgets."),
        cases=[
            Case("retries just over the ratio", traffic(storm), 20, [Expected({}, storm / per_minute)]),
            Case("retries just under the ratio", traffic(near), 20),
        ],
    )


def ejection_cascade(limits: Limits) -> Alert:
    share = limits.ejection_share
    fleet_size = 20
    cascade = math.ceil(share * fleet_size - 1e-9)
    quiet = cascade - 1
    require(cascade / fleet_size >= share > quiet / fleet_size, "ejected shares must straddle the threshold")

    def fleet(ejected: int):
        series = []
        for i in range(fleet_size):
            labels = instance_labels(f"i{i}")
            series.append(gauge(gateway.INSTANCE_STATE, {**labels, "state": "healthy"}, [(1, 30)]))
            series.append(steps(gateway.EJECTIONS, labels, 30, [20] if i < ejected else []))
        return series

    return Alert(
        name="LLMEjectionCascade",
        expr=f"{rec.EJECTED_SHARE} >= {num(share)}",
        for_="1m",
        severity=Severity.CRITICAL,
        signal=SIGNAL,
        summary="Health checks ejected a large share of instances within 5 minutes: an ejection cascade.",
        description=(f"{PCT} of instances were ejected within 5 minutes (threshold {pct(share)}). The survivors "
                     "take their load and fail next; stop ejecting (raise health-check tolerance) before "
                     "adding capacity."),
        cases=[
            Case("many instances ejected at once", fleet(cascade), 22, [Expected({}, cascade / fleet_size)]),
            Case("one ejection short of the share", fleet(quiet), 22),
        ],
    )


def flapping(limits: Limits) -> Alert:
    t = limits.flaps_per_15m
    labels = instance_labels("e1:8000")

    def changes(count: int):
        minutes = [16 + i for i in range(count)]
        away = minutes[0::2]
        back = minutes[1::2]
        return [steps(gateway.STATE_TRANSITIONS, {**labels, "from_state": "healthy", "to_state": "ejected"}, 40, away),
                steps(gateway.STATE_TRANSITIONS, {**labels, "from_state": "ejected", "to_state": "healthy"}, 40, back)]

    flaps = math.ceil(t)
    near = math.ceil(t) - 1
    require(flaps >= t > near >= 0, "flap counts must straddle the threshold")
    return Alert(
        name="LLMInstanceFlapping",
        expr=(f"sum by (model, instance, pool) (increase({gateway.STATE_TRANSITIONS.select()}[15m])) "
              f">= {num(t)}"),
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="An instance keeps changing health state.",
        description=(f"Instance {lab('instance')} ({lab('model')}, pool {lab('pool')}) changed health state "
                     f"{val(0)} times in 15 minutes (threshold {num(t)}). Its health check is too tight or the "
                     "instance is failing intermittently."),
        cases=[
            Case("state changes reach the limit", changes(flaps), 30, [Expected(labels, flaps)]),
            Case("state changes just under the limit", changes(near), 30),
        ],
    )


def cold_start_thrash(limits: Limits) -> Alert:
    window_s = round(limits.cold_start_minutes * 60)
    slow_bar = limits.ttft_p95_target_seconds
    buckets = request.TTFT.buckets
    at = math.ceil(limits.cold_start_minutes) + 10
    labels = instance_labels("e1:8000")
    slow = observations_near(buckets, 0.95, min(1.5 * slow_bar, (slow_bar + buckets[-1]) / 2))
    p95 = quantile(buckets, slow, 0.95)
    cached = round(0.5 * limits.cold_cache_hit_ratio * 1000)
    require(p95 > slow_bar and cached / 1000 < limits.cold_cache_hit_ratio, "the instance must be slow and cold")

    def instance(age_s: int):
        minutes = at + 5
        return [
            gauge(gateway.INSTANCE_START_TIME, labels, [(at * 60 - age_s, minutes)]),
            *histogram(request.TTFT, request_labels("e1:8000"), [(slow, minutes)]),
            counter(request.INPUT_TOKENS, request_labels("e1:8000"), [(1000, minutes)]),
            counter(request.CACHED_INPUT_TOKENS, request_labels("e1:8000"), [(cached, minutes)]),
            steps(gateway.EJECTIONS, labels, minutes, [at - 3]),
            steps(gateway.STATE_TRANSITIONS, {**labels, "from_state": "healthy", "to_state": "ejected"},
                  minutes, [at - 3]),
            steps(gateway.STATE_TRANSITIONS, {**labels, "from_state": "ejected", "to_state": "healthy"},
                  minutes, [at - 2]),
        ]

    back = gateway.STATE_TRANSITIONS.select(to_state="healthy")
    return Alert(
        name="LLMColdStartThrash",
        expr=(f"{rec.TTFT_P95_BY_INSTANCE} > {num(slow_bar)}\n"
              f"and {ON_INSTANCE} (time() - {gateway.INSTANCE_START_TIME.select()}) < {window_s}\n"
              f"and {ON_INSTANCE} {rec.CACHED_INPUT_RATIO} < {num(limits.cold_cache_hit_ratio)}\n"
              f"and {ON_INSTANCE} increase({gateway.EJECTIONS.select()}[{window_s}s]) > 0\n"
              f"and {ON_INSTANCE} sum by (model, instance, pool) (increase({back}[{window_s}s])) > 0"),
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="A new instance is slow and cache-cold, got ejected and is taking traffic again: cold-start thrash.",
        description=(f"Instance {lab('instance')} ({lab('model')}, pool {lab('pool')}) joined less than "
                     f"{num(limits.cold_start_minutes)} minutes ago, serves p95 TTFT {val(2)}s with a prefix-cache "
                     f"hit ratio under {pct(limits.cold_cache_hit_ratio)}, was ejected and is back in rotation. "
                     "Warm it before it takes full traffic (slow start) instead of ejecting it again."),
        cases=[
            Case("new, slow, cold, ejected and back", instance(window_s // 2), at, [Expected(labels, p95)]),
            Case("same pattern just after the cold-start window", instance(window_s + 60), at),
        ],
    )


def alerts(limits: Limits) -> list[Alert]:
    return [instance_p99_high(limits), retry_storm(limits), ejection_cascade(limits), flapping(limits),
            cold_start_thrash(limits)]
