"""Scale-out alerts: add capacity before latency falls off its cliff. Routed to the autoscaler."""

from __future__ import annotations

import math

from infersight.alerts import recording as rec
from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.promql import num
from infersight.alerts.rules.common import MODEL, POOL, instance_labels, lab, pct, request_labels, require, val
from infersight.alerts.series import gauge, histogram, observations_near, quantile, ramp
from infersight.signals import gateway, request
from infersight.thresholds import Thresholds

SIGNAL = SignalClass.SCALE_OUT
RISING_HORIZON_S = 3600  # how far ahead LLMTTFTNearSLORising projects the 30-minute p95


def gateway_queue_high(limits: Thresholds) -> Alert:
    t = limits.gateway_queue_depth
    labels = {"model": MODEL, "pool": POOL}

    def queue(total: float, minutes: int = 45):
        # two gateway strategies share the queue: the rule must sum them
        return [gauge(gateway.QUEUE_DEPTH, {**labels, "strategy": s}, [(total / 2, minutes)]) for s in ("a", "b")]

    return Alert(
        name="LLMGatewayQueueHigh",
        expr=f"{rec.GATEWAY_QUEUE_AVG30M} > {num(t)}",
        # The 30-minute mean is the persistence filter already; a further 5m wait fired 9.5 min after
        # the SLO breach in sustained growth.
        for_="1m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="Gateway queue has stayed deep for 30 minutes: scale out.",
        description=(f"The gateway queue of {lab('model')} (pool {lab('pool')}) averaged {val(1)} waiting "
                     f"requests over 30 minutes, above the scale-out threshold of {num(t)}."),
        cases=[
            Case("mean just over threshold", queue(1.02 * t), 45, [Expected(labels, 1.02 * t)]),
            Case("mean just under threshold", queue(0.95 * t), 45),
        ],
    )


def _merged(per_minute: list[dict[float, int]], first: int, last: int) -> dict[float, int]:
    """Observations of minutes first..last together (what a rate window at ``last`` sees)."""
    out: dict[float, int] = {}
    for obs in per_minute[first:last + 1]:
        for value, n in obs.items():
            out[value] = out.get(value, 0) + n
    return out


def diurnal_p95(minute: int) -> float:
    """The incident account's healthy day: p95 TTFT wandering 0.5-0.8 s (SLO 1 s), a slow diurnal
    swing with minute-to-minute noise, deterministic so the case is the same every build."""
    swing = 0.65 + 0.13 * math.sin(2 * math.pi * minute / 360 - math.pi / 2)
    noise = 0.05 * math.sin(minute * 12.9898) * math.cos(minute * 4.1414)
    return min(0.8, max(0.5, swing + noise))


def ttft_near_slo_rising(limits: Thresholds) -> Alert:
    target = limits.ttft_p95_target_seconds
    bar = limits.rising_ttft_bar_seconds
    buckets = request.TTFT.buckets
    near = lambda p95: observations_near(buckets, 0.95, p95)  # noqa: E731
    # The 5-minute p95 inline, not the recorded one: the recording group may have run before or after
    # this one in the same evaluation, and the value people read should be the current one.
    p5, p30 = request.TTFT.quantile(0.95, by=("model",)), rec.TTFT_P95_30M_BY_MODEL

    # Rollout spike (the incident): p95 0.8 s -> ~9 s at minute 40, then ~80 s (pinned no more).
    healthy, spike, worst = near(0.8 * target), near(9.0), {80.0: 950, 160.0: 50}
    rollout = histogram(request.TTFT, request_labels(), [(healthy, 40), (spike, 20), (worst, 40)])
    at_spike, at_worst = 50, 95
    # Sustained growth: p95 rising 0.5 s an hour from 0.5 s; it breaches the SLO at minute 60.
    growth_minutes = [near(min(0.5 * target + 0.5 * target * m / 60, 0.99 * buckets[-1])) for m in range(90)]
    growth = histogram(request.TTFT, request_labels(), [(obs, 1) for obs in growth_minutes])
    before_breach = 55
    # rate()[5m] at minute 55 sees the increments of minutes 50..54 (a phase adds after its first sample)
    growth_p95 = quantile(buckets, _merged(growth_minutes, before_breach - 5, before_breach - 1), 0.95)
    # A healthy day: six hours wandering under the SLO.
    day_minutes = [near(diurnal_p95(m) * target) for m in range(361)]
    day = histogram(request.TTFT, request_labels(), [(obs, 1) for obs in day_minutes])
    require(quantile(buckets, spike, 0.95) > target and growth_p95 < target, "spike over, growth under the SLO")
    return Alert(
        name="LLMTTFTNearSLORising",
        expr=(f"{p5} > {num(bar)}\n"
              f"and on (model) {p30} > {num(bar)}\n"
              f"and on (model) ({p5} >= {num(target)} or predict_linear({p30}[30m], {RISING_HORIZON_S}) "
              f">= {num(target)})"),
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="p95 TTFT is close to its target and heading over it: scale out.",
        description=(f"p95 TTFT of {lab('model')} is {val(3)}s, above "
                     f"{num(limits.ttft_slo_share_rising * 100)}% of the "
                     f"{num(target)}s target ({num(bar)}s) over 5 and 30 minutes, and is over the target or on "
                     f"course to cross it within {RISING_HORIZON_S // 60} minutes."),
        cases=[
            Case("rollout spike: p95 0.8 s -> 9 s", rollout, at_spike,
                 [Expected({"model": MODEL}, quantile(buckets, spike, 0.95))]),
            Case("rollout spike, p95 now ~80 s: still firing", rollout, at_worst,
                 [Expected({"model": MODEL}, quantile(buckets, worst, 0.95))]),
            Case("sustained growth, 5 minutes before the SLO breach", growth, before_breach,
                 [Expected({"model": MODEL}, growth_p95)]),
            Case("six healthy hours, p95 wandering 0.5-0.8 s", day, 360, quiet_at=range(40, 360, 5)),
        ],
    )


def morning_ramp(minute: int) -> float:
    """The incident account's ordinary morning, as a share of capacity: from the night's 0.3 a smooth
    ramp over three hours that flattens at 0.86, then the day's plateau; deterministic wander on top."""
    low, peak, ramp_minutes = 0.3, 0.86, 180
    level = low + (peak - low) * (1 - math.cos(math.pi * min(minute, ramp_minutes) / ramp_minutes)) / 2
    wander = 0.004 * math.sin(minute * 12.9898) * math.cos(minute * 4.1414)
    return min(peak, level + wander)


def demand_forecast(limits: Thresholds) -> Alert:
    per_instance = limits.requests_per_instance
    horizon_s = round(limits.forecast_hours * 3600)
    share = limits.forecast_min_demand_share
    instances = 2
    capacity = instances * per_instance
    serving = f"on (model) ({rec.SERVING_INSTANCES} * {per_instance})"

    def fleet(in_flight, minutes: int):
        states = []
        for i in range(instances):
            labels = instance_labels(f"i{i}")
            states += [gauge(gateway.INSTANCE_STATE, {**labels, "state": "healthy"}, [(1, minutes)]),
                       gauge(gateway.INSTANCE_STATE, {**labels, "state": "ejected"}, [(0, minutes)])]
        return [in_flight, *states]

    # Sustained growth: from 40% of capacity, a quarter of capacity more every hour, crossing capacity
    # (where TTFT breaks its SLO) at minute `crossing`; the alert must fire ahead of it.
    start = round(0.4 * capacity)
    slope = 0.25 * capacity / 60
    crossing = math.ceil((capacity - start) / slope)
    over_share = math.floor((share * capacity - start) / slope) + 1  # first minute over the share
    at = over_share + 6  # pending from over_share on, firing 5 minutes later
    forecast = start + slope * at + slope * horizon_s / 60
    rising = ramp(request.IN_FLIGHT, request_labels(), start, slope, crossing + 10)
    # The ordinary morning: the old rule's 1 h forecast crossed capacity for 38 minutes of it.
    day = 300
    morning = [round(morning_ramp(m) * capacity) for m in range(day)]
    require(max(morning) < share * capacity < capacity < forecast and at < crossing,
            f"growth must cross capacity {capacity} after passing {share:g} of it; the morning must stay under")
    flat = gauge(request.IN_FLIGHT, request_labels(), [(round(0.95 * capacity), 70)])
    return Alert(
        name="LLMDemandForecastOverCapacity",
        expr=(f"predict_linear({rec.IN_FLIGHT_SUM}[1h], {horizon_s}) > {serving}\n"
              f"and on (model) {rec.IN_FLIGHT_SUM} > {serving} * {num(share)}"),
        # The share gate keeps a normal ramp quiet; a long wait on top only made the warning late.
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="Demand is over most of serving capacity and forecast to exceed it within the forecast horizon.",
        description=(f"At the trend of the last hour, {lab('model')} will have {val(0)} requests in flight within "
                     f"{num(limits.forecast_hours)}h, more than its serving instances hold ({per_instance} each at "
                     f"{num(limits.target_tokens_per_s)} tok/s, from the capacity model); demand is already over "
                     f"{pct(share)} of that capacity."),
        cases=[
            Case(f"sustained growth (a quarter of capacity an hour): {crossing - at} minutes before it crosses "
                 "capacity", fleet(rising, crossing + 10), at, [Expected({"model": MODEL}, forecast)],
                 quiet_at=[over_share - 1]),
            Case("ordinary morning ramp flattening at 0.86 of capacity",
                 fleet(gauge(request.IN_FLIGHT, request_labels(), [(v, 1) for v in morning]), day), day - 1,
                 quiet_at=range(60, day - 1, 5)),
            Case("flat demand just under capacity", fleet(flat, 70), 69),
        ],
    )


def alerts(limits: Thresholds) -> list[Alert]:
    return [gateway_queue_high(limits), ttft_near_slo_rising(limits), demand_forecast(limits)]

