"""Scale-out alerts: add capacity before latency falls off its cliff. Routed to the autoscaler."""

from __future__ import annotations

import math

from infersight.alerts import recording as rec
from infersight.alerts.model import Alert, Case, Expected, Series, Severity, SignalClass
from infersight.alerts.promql import larger, num
from infersight.alerts.rules.common import (
    MODEL,
    PCT,
    POOL,
    engine_labels,
    instance_labels,
    lab,
    pct,
    request_labels,
    require,
    val,
)
from infersight.alerts.series import counter, expand, gauge, histogram, observations_near, quantile, ramp
from infersight.signals import engine, gateway, request
from infersight.thresholds import Thresholds

SIGNAL = SignalClass.SCALE_OUT
RISING_HORIZON_S = 3600  # how far ahead LLMTTFTNearSLORising projects the 30-minute p95


def _window_ratio(numerator: Series, denominator: Series, minute: int, window: int) -> float:
    """What ``rate(num[window]) / rate(den[window])`` gives at ``minute``: the two increases' ratio."""
    a, b = expand(numerator.values), expand(denominator.values)
    return (a[minute] - a[minute - window]) / (b[minute] - b[minute - window])


def gateway_queue_high(limits: Thresholds) -> Alert:
    bar = limits.queue_wait_bar_seconds
    share, target = limits.queue_wait_slo_share, limits.ttft_p95_target_seconds
    labels = {"model": MODEL, "pool": POOL}
    engine_at = engine_labels()

    # Sustained growth (the incident: the simulator's sustained-growth pool): ~15 requests/s, first
    # tokens waiting for the prefill in the engines longer and longer, the gateway holding nothing.
    # Its engines' mean wait went 0.03 s -> 0.17 s over 130 minutes, when p95 TTFT broke its target;
    # the same growth runs on until it crosses the bar of any config.
    per_minute, slope, wait_s = 900, 0.14 / 130, max(0.5, 2 * bar)  # requests/min, mean wait s/min, one wait
    minutes = max(130, math.ceil((bar - 0.03) / slope) + 45)
    require(0.03 < bar, "the queue bar must be over the wait of the healthy start (0.03 s)")
    waiting = [min(per_minute, round(per_minute * (0.03 + slope * m) / wait_s)) for m in range(minutes)]
    growth = histogram(engine.QUEUE_TIME, engine_at, [({0.0: per_minute - k, wait_s: k}, 1) for k in waiting])
    growth_sum, growth_count = growth[-1], growth[-2]
    # ... and the gateway in front queued none of them: its queue-time histogram stays flat (a 0/0 mean
    # there once hid the engines' wait)
    growth += [*histogram(request.QUEUE_TIME, request_labels(), [({}, minutes)]),
               counter(request.REQUESTS, request_labels(outcome="success"), [(per_minute, minutes)])]
    mean30 = lambda m: _window_ratio(growth_sum, growth_count, m, 30)  # noqa: E731
    crossing = next(m for m in range(31, minutes) if mean30(m) > bar)
    # for: 1m, and a minute more: promtool evaluates the rule groups in no fixed order, so the alert may
    # read the recording a minute old; the value it shows must then read the same to two decimals.
    at = next(m for m in range(crossing + 2, minutes) if f"{mean30(m):.2f}" == f"{mean30(m - 1):.2f}")
    growth_wait = mean30(at)
    # A healthy pool: 1% of requests wait half a second for the prefill, a request in an engine queue now and then.
    healthy = histogram(engine.QUEUE_TIME, engine_at, [({0.0: 891, 0.5: 9}, 120)])
    healthy.append(gauge(engine.REQUESTS_WAITING, engine_at, [(0, 50), (2, 3), (0, 67)]))

    # The gateway holds the queue (overload; or a gateway source such as llm-d that exposes only its
    # queue and its requests): ~290 held by two strategies in a pool completing ~58 requests/s (the
    # simulator's overload scenario); no queue-time histograms, only depth and completions.
    def gateway_held(depth: int, done_per_minute: int, minutes: int = 45) -> list[Series]:
        return [*(gauge(gateway.QUEUE_DEPTH, {**labels, "strategy": st}, [(depth / 2, minutes)]) for st in ("a", "b")),
                counter(request.REQUESTS, request_labels(outcome="success"), [(done_per_minute, minutes)])]

    held, done = 290, 58 * 60
    # A pool two minutes old (the simulator's overload scenario at its start, or a Prometheus just
    # started): one request waits at minute 2 while the pool finishes ~1,160 a minute; rate()[30m] of
    # the completion counter two minutes old reads a fifteenth of that, so the drained estimate read
    # 0.26 s and the alert fired at minute 3 before the 30 minutes of history were required.
    cold_start = [gauge(engine.REQUESTS_WAITING, engine_at, [(0, 2), (1, 1), (0, 12)]),
                  counter(engine.REQUESTS_FINISHED, {**engine_at, "finish_reason": "stop"}, [(1164, 15)])]
    return Alert(
        name="LLMGatewayQueueHigh",
        # Only a pool with 30 minutes of history: a pool that starts cold under load (or a Prometheus that
        # just started) queues for a minute or two, and a "30-minute mean" of two minutes is that burst.
        expr=f"{rec.QUEUE_WAIT_30M} > {num(bar)}\nand on (model, pool) {rec.QUEUE_WAIT_30M} offset 29m",
        # The 30-minute mean is the persistence filter already; a further 5m wait fired 9.5 min after
        # the SLO breach in sustained growth.
        for_="1m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="Requests have waited in the queues (gateway and engines) for 30 minutes: scale out.",
        description=(f"Requests to {lab('model')} (pool {lab('pool')}) waited {val(2)}s on average in the queues "
                     f"(gateway and engines) over 30 minutes, over the scale-out bar of {num(bar)}s "
                     f"({pct(share)} of the {num(target)}s p95 TTFT target)."),
        cases=[
            Case("sustained growth: the engines' mean wait from 0.03 s, 0.14 s more every 130 minutes", growth, at,
                 [Expected(labels, growth_wait)], quiet_at=[crossing - 1]),
            Case("a healthy pool: 1% of requests wait 0.5 s", healthy, 119),
            Case("the gateway holds ~290 requests, the pool completes ~58 requests/s",
                 gateway_held(held, done), 44, [Expected(labels, held / (done / 60))]),
            Case("a 20-deep gateway queue draining 20 requests/s: one second of waiting",
                 gateway_held(20, 1200), 44, [Expected(labels, 1.0)]),
            Case("a 1-deep gateway queue draining 20 requests/s", gateway_held(1, 1200), 44),
            Case("a pool two minutes old: one request waiting, ~1,160 finished a minute", cold_start, 12,
                 quiet_at=range(1, 12)),
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
    prefill = limits.prefill_capacity_tokens_per_s
    horizon_s = round(limits.forecast_hours * 3600)
    share = limits.forecast_min_demand_share
    instances = 2
    capacity = instances * per_instance
    demand = rec.DEMAND_CAPACITY_RATIO
    # Demand forecast, then divided by the capacity serving now: a forecast of the share itself would
    # read instances ejected in the last hour as a trend.
    forecast_share = larger(
        f"predict_linear({rec.IN_FLIGHT_SUM}[1h], {horizon_s}) / on (model) ({rec.in_flight_capacity(limits)})",
        f"predict_linear({rec.PREFILL_TOKENS_RATE}[1h], {horizon_s}) / on (model) {rec.PREFILL_CAPACITY}")

    def fleet(series: list[Series], minutes: int) -> list[Series]:
        states = []
        for i in range(instances):
            labels = instance_labels(f"i{i}")
            states += [gauge(gateway.INSTANCE_STATE, {**labels, "state": "healthy"}, [(1, minutes)]),
                       gauge(gateway.INSTANCE_STATE, {**labels, "state": "ejected"}, [(0, minutes)])]
        return [*series, *states]

    # Requests in flight against the KV-bound concurrency: from 40% of capacity, a quarter of capacity
    # more every hour, crossing capacity at minute `crossing`; the alert must fire ahead of it.
    start = round(0.4 * capacity)
    slope = 0.25 * capacity / 60
    crossing = math.ceil((capacity - start) / slope)
    over_share = math.floor((share * capacity - start) / slope) + 1  # first minute over the share
    at = over_share + 6  # pending from over_share on, firing 5 minutes later
    rising = ramp(request.IN_FLIGHT, request_labels(), start, slope, crossing + 10)
    # The ordinary morning: the old rule's 1 h forecast crossed capacity for 38 minutes of it.
    day = 300
    morning = [round(morning_ramp(m) * capacity) for m in range(day)]
    require(max(morning) < share * capacity < capacity and at < crossing,
            f"growth must cross capacity {capacity} after passing {share:g} of it; the morning must stay under")
    flat = gauge(request.IN_FLIGHT, request_labels(), [(round(0.95 * capacity), 70)])

    # Prefill-bound growth (the simulator's sustained-growth pool: chat prompts of ~1,200 tokens, a third
    # of them from the prefix cache): prompt tokens to prefill per instance from 25% of the capacity
    # model's prefill compute (that pool starts at ~0.23), 20% more of it every hour; p95 TTFT broke its
    # target at about 0.58-0.60. The start leaves the forecast's hour of history on the straight ramp.
    ceiling = limits.prefill_tokens_per_instance
    start_share = 0.25
    require(start_share + 0.2 * (60 + 15) / 60 < share * limits.prefill_capacity_share,
            "the prefill growth starts at 25% of the prefill compute, an hour and a quarter under the forecast's "
            "share of capacity")
    minutes = math.ceil((limits.prefill_capacity_share - start_share) / 0.2 * 60) + 30  # past the crossing
    computed = [round(60 * ceiling * (start_share + 0.2 * m / 60)) for m in range(minutes)]  # tokens per minute
    tokens = []
    for i in range(instances):
        tokens += [counter(engine.PROMPT_TOKENS, engine_labels(f"i{i}"), [(c * 3 // 2, 1) for c in computed]),
                   counter(engine.PREFIX_CACHE_HITS, engine_labels(f"i{i}"), [(c // 2, 1) for c in computed])]
    window = int(rec.PREFILL_WINDOW.removesuffix("m"))

    def prefill_share(series: list[Series], minute: int) -> float:
        prompt = [expand(s.values) for s in series if s.selector.startswith(engine.PROMPT_TOKENS.name)]
        hits = [expand(s.values) for s in series if s.selector.startswith(engine.PREFIX_CACHE_HITS.name)]
        todo = sum(v[minute] - v[minute - window] for v in prompt) - sum(v[minute] - v[minute - window] for v in hits)
        return todo / (window * 60) / (instances * prefill)

    def forecast(now: float, minute_before: float) -> float:
        """predict_linear over a demand share that grows the same every minute (the recording is linear
        in time: a rate over a window of linearly growing increments), read even a minute late."""
        return now + (now - minute_before) * horizon_s / 60

    prefill_over = next(m for m in range(window, minutes) if prefill_share(tokens, m) > share + 1e-9)
    prefill_at = prefill_over + 6  # pending from prefill_over on (a minute later reading the recording late)
    prefill_crossing = next(m for m in range(window, minutes) if prefill_share(tokens, m) > 1)
    # The same morning in prompt tokens, from engines without a prefix cache (no hit counter).
    token_day = 240  # the ramp flattens at minute 180
    morning_tokens = [counter(engine.PROMPT_TOKENS, engine_labels(f"i{i}"),
                              [(round(60 * prefill * morning_ramp(m)), 1) for m in range(token_day)])
                      for i in range(instances)]
    require(prefill_at < prefill_crossing, "the prefill growth must fire before it crosses capacity")
    return Alert(
        name="LLMDemandForecastOverCapacity",
        expr=f"{forecast_share} > 1\nand on (model) {demand} > {num(share)}",
        # The share gate keeps a normal ramp quiet; a long wait on top only made the warning late.
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="Demand is over most of serving capacity and forecast to exceed it within the forecast horizon.",
        description=(f"At the trend of the last hour, demand on {lab('model')} will be {PCT} of what its serving "
                     f"instances serve in time within {num(limits.forecast_hours)}h, and it is over "
                     f"{pct(share)} of that already. Capacity per "
                     f"instance (capacity model): {num(round(prefill))} prompt tokens/s to prefill (prefix-cache "
                     f"hits left out; {pct(limits.prefill_capacity_share)} of its prefill compute, where first "
                     f"tokens are still in time) or {per_instance} requests in flight (KV at "
                     f"{num(limits.target_tokens_per_s)} tok/s), whichever is nearer."),
        cases=[
            Case(f"prefill-bound growth (20% of prefill compute an hour): {prefill_crossing - prefill_at} minutes "
                 "before it crosses capacity", fleet(tokens, minutes), prefill_at,
                 [Expected({"model": MODEL}, forecast(prefill_share(tokens, prefill_at),
                                                      prefill_share(tokens, prefill_at - 1)))],
                 quiet_at=[prefill_over - 1]),
            Case("ordinary morning ramp of prompt tokens flattening at 0.86 of prefill capacity",
                 fleet(morning_tokens, token_day), token_day - 1, quiet_at=range(60, token_day - 1, 5)),
            Case(f"requests in flight growing a quarter of capacity an hour: {crossing - at} minutes before they "
                 "cross capacity", fleet([rising], crossing + 10), at,
                 [Expected({"model": MODEL}, (start + slope * (at + horizon_s / 60)) / capacity)],
                 quiet_at=[over_share - 1]),
            Case("ordinary morning ramp of requests in flight flattening at 0.86 of capacity",
                 fleet([gauge(request.IN_FLIGHT, request_labels(), [(v, 1) for v in morning])], day), day - 1,
                 quiet_at=range(60, day - 1, 5)),
            Case("flat demand just under capacity", fleet([flat], 70), 69),
        ],
    )


def alerts(limits: Thresholds) -> list[Alert]:
    return [gateway_queue_high(limits), ttft_near_slo_rising(limits), demand_forecast(limits)]

