"""Scale-out alerts: add capacity before latency falls off its cliff. Routed to the autoscaler."""

from __future__ import annotations

import math

from infersight.alerts import recording as rec
from infersight.alerts.limits import Limits, num
from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.rules.common import MODEL, POOL, instance_labels, lab, request_labels, require, val
from infersight.alerts.series import gauge, histogram, observations_near, quantile, ramp
from infersight.signals import gateway, request

SIGNAL = SignalClass.SCALE_OUT


def gateway_queue_high(limits: Limits) -> Alert:
    t = limits.gateway_queue_depth
    labels = {"model": MODEL, "pool": POOL}

    def queue(total: float, minutes: int = 45):
        # two gateway strategies share the queue: the rule must sum them
        return [gauge(gateway.QUEUE_DEPTH, {**labels, "strategy": s}, [(total / 2, minutes)]) for s in ("a", "b")]

    return Alert(
        name="LLMGatewayQueueHigh",
        expr=f"{rec.GATEWAY_QUEUE_AVG30M} > {num(t)}",
        for_="5m",
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


def ttft_near_slo_rising(limits: Limits) -> Alert:
    bar = limits.rising_share * limits.ttft_p95_target_seconds
    buckets = request.TTFT.buckets

    def shift(before: float, after: float):
        first, second = (observations_near(buckets, 0.95, bar * f) for f in (before, after))
        series = histogram(request.TTFT, request_labels(), [(first, 30), (second, 30)])
        return series, quantile(buckets, first, 0.95), quantile(buckets, second, 0.95)

    rising, low, high = shift(1.15, 1.6)
    require(bar < low < high, f"p95 {low} -> {high} must rise from above {bar}")
    flat = histogram(request.TTFT, request_labels(), [(observations_near(buckets, 0.95, bar * 1.15), 60)])
    under, u_low, u_high = shift(0.6, 0.9)
    require(u_low < u_high < bar, f"p95 {u_low} -> {u_high} must rise below {bar}")
    return Alert(
        name="LLMTTFTNearSLORising",
        expr=f"{rec.TTFT_P95_BY_MODEL} > {num(bar)} and deriv({rec.TTFT_P95_BY_MODEL}[15m]) > 0",
        for_="10m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="p95 TTFT is close to its target and still rising: scale out.",
        description=(f"p95 TTFT of {lab('model')} is {val(3)}s, above {num(limits.rising_share * 100)}% of the "
                     f"{num(limits.ttft_p95_target_seconds)}s target ({num(bar)}s), and rose over the last 15 "
                     "minutes."),
        cases=[
            Case("above the bar and rising", rising, 45, [Expected({"model": MODEL}, high)]),
            Case("above the bar but flat", flat, 45),
            Case("rising but just under the bar", under, 45),
        ],
    )


def demand_forecast(limits: Limits) -> Alert:
    per_instance = limits.requests_per_instance
    horizon_s = round(limits.forecast_hours * 3600)
    instances = 2
    capacity = instances * per_instance
    at = 70
    # Demand at 90% of capacity, rising so that the forecast lands at about 120%.
    now = round(0.9 * capacity)
    slope = math.ceil(0.3 * capacity / (limits.forecast_hours * 60))
    ramp_minutes = min(60, now // slope)  # a shorter history still gives predict_linear a line
    start = now - slope * ramp_minutes
    forecast = now + slope * horizon_s / 60
    require(ramp_minutes >= 15 and now < capacity < forecast, f"forecast {forecast} must cross capacity {capacity}")

    def fleet(in_flight):
        states = []
        for i in range(instances):
            labels = instance_labels(f"i{i}")
            states += [gauge(gateway.INSTANCE_STATE, {**labels, "state": "healthy"}, [(1, at)]),
                       gauge(gateway.INSTANCE_STATE, {**labels, "state": "ejected"}, [(0, at)])]
        return [in_flight, *states]

    rising = ramp(request.IN_FLIGHT, request_labels(), start, slope, ramp_minutes + 10,
                  absent_minutes=at - ramp_minutes)
    flat = gauge(request.IN_FLIGHT, request_labels(), [(round(0.95 * capacity), at)])
    return Alert(
        name="LLMDemandForecastOverCapacity",
        expr=(f"predict_linear({rec.IN_FLIGHT_SUM}[1h], {horizon_s}) "
              f"> on (model) ({rec.SERVING_INSTANCES} * {per_instance})"),
        for_="10m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="Demand is forecast to exceed serving capacity within the forecast horizon.",
        description=(f"At the trend of the last hour, {lab('model')} will have {val(0)} requests in flight within "
                     f"{num(limits.forecast_hours)}h, more than its serving instances hold ({per_instance} each at "
                     f"{num(limits.target_tokens_per_s)} tok/s, from the capacity model)."),
        cases=[
            Case("linear growth crosses capacity", fleet(rising), at, [Expected({"model": MODEL}, forecast)]),
            Case("flat demand just under capacity", fleet(flat), at),
        ],
    )


def alerts(limits: Limits) -> list[Alert]:
    return [gateway_queue_high(limits), ttft_near_slo_rising(limits), demand_forecast(limits)]

