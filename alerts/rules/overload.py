"""Overload alerts: queues past what instances can drain (capacity model) and requests turned away."""

from __future__ import annotations

import math

from infersight.alerts import recording as rec
from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.promql import num
from infersight.alerts.rules.common import (
    INSTANCE,
    MODEL,
    PCT,
    POOL,
    engine_labels,
    lab,
    pct,
    request_labels,
    require,
    val,
)
from infersight.alerts.series import counter, gauge
from infersight.attributes import Outcome
from infersight.signals import engine, request
from infersight.thresholds import Thresholds

SIGNAL = SignalClass.OVERLOAD


def _drain_note(limits: Thresholds) -> str:
    return (f"twice the {limits.requests_per_instance} concurrent requests one instance serves at "
            f"{num(limits.target_tokens_per_s)} tok/s (capacity model)")


def instance_overloaded(limits: Thresholds) -> Alert:
    limit = limits.instance_queue_limit
    over, near = limit + 2, math.floor(0.95 * limit)
    require(over > limit > near, "queues must straddle the limit")

    def queues(first: int):
        return [gauge(engine.REQUESTS_WAITING, engine_labels("e1:8000"), [(first, 20)]),
                gauge(engine.REQUESTS_WAITING, engine_labels("e2:8000"), [(10, 20)])]

    return Alert(
        name="LLMInstanceOverloaded",
        expr=f"{rec.INSTANCE_QUEUE_SUM} > {limit}",
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="An instance's queue is longer than it can drain.",
        description=(f"Instance {lab('instance')} ({lab('model')}, pool {lab('pool')}) has {val(0)} requests "
                     f"waiting, more than {limit}: {_drain_note(limits)}. Route new requests elsewhere."),
        cases=[
            Case("one queue over twice the drain rate", queues(over), 15,
                 [Expected({"model": MODEL, "pool": POOL, "instance": INSTANCE}, over)]),
            Case("queue just under the limit", queues(near), 15),
        ],
    )


def fleet_overloaded(limits: Thresholds) -> Alert:
    limit = limits.instance_queue_limit
    over, near = limit + 2, math.floor(0.95 * limit)

    def queues(each: int):
        return [gauge(engine.REQUESTS_WAITING, engine_labels(f"e{i}:8000"), [(each, 20)]) for i in range(3)]

    return Alert(
        name="LLMFleetOverloaded",
        expr=f"avg by (model) ({rec.INSTANCE_QUEUE_SUM}) > {limit}",
        for_="5m",
        severity=Severity.CRITICAL,
        signal=SIGNAL,
        summary="Every instance of a model is queued past what it can drain: the fleet is overloaded.",
        description=(f"The instances of {lab('model')} have {val(0)} requests waiting on average, more than "
                     f"{limit}: {_drain_note(limits)}. Shed low-priority load and add capacity."),
        cases=[
            Case("all queues over the limit", queues(over), 15, [Expected({"model": MODEL}, over)]),
            Case("all queues just under the limit", queues(near), 15),
        ],
    )


def rejections(limits: Thresholds) -> Alert:
    t = limits.rejection_ratio
    per_minute = 1000
    high, near = math.floor(t * per_minute) + 5, round(0.9 * t * per_minute)
    require(high / per_minute > t > near / per_minute and high <= per_minute, "rejections must straddle the ratio")

    def traffic(rejected: int):
        return [counter(request.REQUESTS, request_labels(outcome=Outcome.SUCCESS), [(per_minute - rejected, 20)]),
                counter(request.REQUESTS, request_labels(outcome=Outcome.REJECTED), [(rejected, 20)]),
                counter(request.REJECTIONS, request_labels(reason="queue_full"), [(rejected, 20)])]

    return Alert(
        name="LLMRejectionRateHigh",
        expr=f"{rec.REJECTION_RATIO} > {num(t)}",
        for_="5m",
        severity=Severity.CRITICAL,
        signal=SIGNAL,
        summary="The gateway is turning requests away (503/429).",
        description=(f"{PCT} of requests for {lab('model')} are rejected without service "
                     f"(threshold {pct(t)})."),
        cases=[
            Case("rejections over the ratio", traffic(high), 15, [Expected({"model": MODEL}, high / per_minute)]),
            Case("rejections just under the ratio", traffic(near), 15),
        ],
    )


def alerts(limits: Thresholds) -> list[Alert]:
    return [instance_overloaded(limits), fleet_overloaded(limits), rejections(limits)]
