"""Scale-out and capacity: the three scale-out signals with their thresholds drawn, the capacity model's
figures for one instance, and each instance measured against them.

The capacity model (``infersight/capacity.py``, from the config's ``capacity`` section) is what the
overload and forecast alerts compare with, so the figures here are the ones the pager uses.
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.capacity import plan
from infersight.config import Config
from infersight.dashboards.panels import (
    RATE,
    TOKENS_PER_S,
    Line,
    Q,
    dashboard,
    layout,
    recorded,
    stat,
    timeseries,
    variable,
)
from infersight.signals import engine, gateway, request
from infersight.thresholds import Thresholds

UID = "infersight-capacity"
F = {"model": "=~$model", "pool": "=~$pool"}
LEGEND = "{{model}} {{pool}}"


def _signals(limits: Thresholds) -> list[dict]:
    wait = [Q(recorded(rec.QUEUE_WAIT_MEASURED_30M, F), "measured " + LEGEND),
            Q(recorded(rec.QUEUE_DRAIN_30M, F), "queued / completed " + LEGEND)]
    ttft_p95 = recorded(rec.TTFT_P95_BY_MODEL, F)
    bar = limits.rising_ttft_bar_seconds
    horizon_s = round(limits.forecast_hours * 3600)
    demand = recorded(rec.DEMAND_CAPACITY_RATIO, F)
    return [
        timeseries("Queue wait (gateway and engines), 30-minute mean", "s", wait,
                   line=Line(limits.queue_wait_bar_seconds), width=12,
                   description=f"Signal 1: requests' mean wait in the queues where they are, measured (gateway + "
                               f"engine queue time) and as queued requests over the completion rate; the larger over "
                               f"the line ({limits.queue_wait_slo_share:.0%} of the p95 TTFT target, "
                               f"thresholds.queue_wait_slo_share) asks for more instances.",
                   good="far under the line; a queue that drains in a fraction of a prefill."),
        timeseries("TTFT p95 vs the scale-out bar", "s", [Q(ttft_p95, "{{model}}")],
                   line=Line(limits.ttft_p95_target_seconds, warn=bar), width=12,
                   description=f"Signal 2: over the orange bar ({limits.ttft_slo_share_rising:.0%} of the p95 target) "
                               "and "
                               "still rising asks for instances before the SLO is missed.",
                   good="under the orange bar, or over it and falling."),
        timeseries("Demand as a share of capacity, and its forecast", "percentunit",
                   [Q(recorded(rec.PREFILL_CAPACITY_RATIO, F), "prefill {{model}}"),
                    Q(recorded(rec.IN_FLIGHT_CAPACITY_RATIO, F), "in flight {{model}}"),
                    Q(f"predict_linear({demand}[1h], {horizon_s})", f"in {limits.forecast_hours:g}h {{{{model}}}}")],
                   line=Line(1.0, warn=limits.forecast_min_demand_share), width=12,
                   description=f"Signal 3: prompt tokens to prefill against "
                               f"{limits.prefill_capacity_tokens_per_s:,.0f} tok/s per serving instance "
                               f"({limits.prefill_capacity_share:.0%} of the capacity model's prefill compute; "
                               f"{limits.prefill_only_capacity_share:.0%} on a disaggregated prefill instance), and "
                               f"requests in flight against {limits.requests_per_instance} per instance (KV at the "
                               f"target token rate); the {limits.forecast_hours:g} h linear forecast of the larger.",
                   good="the forecast under 100%; crossing it is the time left to add instances."),
        # deriv is negative while p95 falls: the axis must not stop at 0, and the unit is seconds per hour
        timeseries("TTFT p95 trend", "suffix: s/h", [Q(f"deriv({ttft_p95}[30m]) * 3600", "{{model}}")], width=6,
                   min_value=None,
                   description="How fast TTFT p95 moves, seconds per hour (the 'still rising' half of signal 2).",
                   good="at or under 0."),
        timeseries("Gateway queue time p95", "s",
                   [Q(request.QUEUE_TIME.quantile(0.95, ("model", "pool"), RATE, **F), LEGEND)], width=6,
                   description="Time requests wait at the gateway before an instance takes them.",
                   good="near 0; it adds straight to TTFT."),
    ]


def _model(config: Config, limits: Thresholds) -> list[dict]:
    cap = config.capacity
    figures = plan(cap.model, cap.gpu_spec(), context_tokens=cap.context_tokens,
                   prefill_utilization=cap.prefill_utilization, target_tokens_per_s=cap.target_tokens_per_s,
                   memory_utilization=cap.memory_utilization)
    where = f"Capacity model: {figures.model} on one {figures.gpu}, {figures.context_tokens} tokens of context."

    def figure(title: str, unit: str, value: float, what: str, good: str) -> dict:
        return stat(title, unit, [Q(f"vector({value!r})", title)], width=4, graph=False,
                    description=f"{where} {what}", good=good)

    return [
        figure("Concurrent requests per instance", "short", figures.max_concurrent_requests_at_target,
               f"Requests one instance serves at {cap.target_tokens_per_s:g} tok/s each (decode bandwidth and KV).",
               "running requests per instance stay under it (next row)."),
        figure("Requests by KV capacity", "short", figures.max_concurrent_requests_by_kv,
               "Full-context requests the KV cache holds.", "above the concurrent requests: KV is not the limit."),
        figure("KV bytes per token", "bytes", figures.kv_bytes_per_token,
               "layers x kv_heads x head_dim x 2 x bytes per element.", "matches the model card."),
        figure("KV capacity", "short", figures.kv_capacity_tokens, "Tokens of KV cache after the weights.",
               "the engines' own KV capacity (next row) is close to it."),
        figure("Decode ceiling", TOKENS_PER_S, figures.decode_tokens_per_s_ceiling,
               "Memory bandwidth over the weight bytes read per decode step, one sequence.",
               "measured per-request token rates stay under it."),
        figure("Prefill of one context", "s", figures.prefill_seconds_for_context,
               f"2 x params FLOPs per token at {cap.prefill_utilization:.0%} of peak.",
               "well under the TTFT SLO."),
    ]


def _measured(limits: Thresholds) -> list[dict]:
    running = f"sum by (instance) ({engine.REQUESTS_RUNNING.select(model='=~$model', pool='=~$pool')})"
    waiting = f"sum by (instance) ({engine.REQUESTS_WAITING.select(model='=~$model', pool='=~$pool')})"
    kv = f"max by (instance) ({engine.KV_CACHE_CAPACITY.select(model='=~$model', pool='=~$pool')})"
    per_request = (f"sum by (instance) ({engine.GENERATION_TOKENS.rate(RATE, model='=~$model', pool='=~$pool')}) "
                   f"/ ({running} > 0)")
    return [
        timeseries("Running requests per instance vs the model", "short", [Q(running, "{{instance}}")],
                   line=Line(limits.requests_per_instance), width=6,
                   description="The line: concurrent requests per instance from the capacity model.",
                   good="under the line; above it each request decodes slower than the target rate."),
        timeseries("Waiting requests per instance", "short", [Q(waiting, "{{instance}}")],
                   line=Line(limits.instance_queue_limit), width=6,
                   description="The line is twice what one instance drains (the overload alert's bar).",
                   good="near 0 everywhere."),
        timeseries("Decode tokens per running request", TOKENS_PER_S, [Q(per_request, "{{instance}}")],
                   line=Line(limits.target_tokens_per_s, below=True), width=6,
                   description="Generated tokens per second over running requests; the line is "
                               "capacity.target_tokens_per_s.",
                   good="above the line: every stream reads faster than the target."),
        timeseries("KV cache capacity per instance", "short", [Q(kv, "{{instance}}")], width=6,
                   description="The engines' own KV capacity in tokens (vLLM: num_gpu_blocks x block_size).",
                   good="close to the model's KV capacity; far under it is gpu-memory-utilization set low."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Scale-out signals", _signals(limits)), ("Capacity model, one instance", _model(config, limits)),
            ("Instances against the model", _measured(limits))]
    variables = [variable("model", "model", request.REQUESTS.name, "model"),
                 variable("pool", "pool", gateway.INSTANCE_STATE.name, "pool")]
    return dashboard(UID, "infersight / Scale-out and capacity",
                     "The three scale-out signals with their thresholds, the capacity model's figures and each "
                     "instance against them.", layout(rows), variables)
