"""Saturation alerts: memory bandwidth full while compute idles, KV cache full, prefix cache collapsing.

In inference, bandwidth saturation, not compute, is what usually means "full": decode reads every
weight once per step, so a bandwidth-bound GPU with idle SMs and a growing queue needs more GPUs,
not bigger batches.
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.model import Alert, Case, Expected, Severity, SignalClass
from infersight.alerts.promql import num
from infersight.alerts.rules.common import (
    INSTANCE,
    MODEL,
    NODE,
    PCT,
    POOL,
    engine_labels,
    gpu_labels,
    lab,
    pct,
    require,
)
from infersight.alerts.series import counter, gauge, ramp
from infersight.signals import engine, gateway, gpu
from infersight.thresholds import Thresholds

ON_INSTANCE = "on (model, pool, instance)"


def bandwidth_saturated(limits: Thresholds) -> Alert:
    t, low = limits.bandwidth_saturation, limits.compute_low
    full, near = round(min(t + 0.02, (1 + t) / 2), 4), round(t - 0.01, 4)
    require(full > t > near > 0, "bandwidth values must straddle the threshold")

    def node(bandwidth: float, queue_at_gateway: bool = False):
        # Where the queue is: in the engine, or in the gateway when it caps what each engine holds.
        engine_rise, gateway_rise = (0, 4) if queue_at_gateway else (2, 0)
        return [gauge(gpu.MEMORY_BANDWIDTH_UTILIZATION, gpu_labels(source="gpm"), [(bandwidth, 30)]),
                gauge(gpu.SM_ACTIVITY, gpu_labels(), [(round(low / 2, 4), 30)]),
                ramp(engine.REQUESTS_WAITING, engine_labels(), 0, engine_rise, 30),
                gauge(engine.GPU_INFO, {k: v for k, v in engine_labels().items() if k in engine.GPU_INFO.labels},
                      [(1, 30)]),
                ramp(gateway.QUEUE_DEPTH, {"model": MODEL, "pool": POOL, "strategy": "least_loaded"}, 0,
                     gateway_rise, 30)]

    return Alert(
        name="GPUMemoryBandwidthSaturated",
        expr=(f"{rec.BANDWIDTH_AVG5M} > {num(t)}\n"
              f"and on (node, gpu) {rec.SM_ACTIVITY_AVG5M} < {num(low)}\n"
              f"and on (node) (\n"
              f"  deriv({rec.NODE_QUEUE_SUM}[10m]) > 0\n"
              # the gateway's queue for the models this node serves (llm_engine_gpu_info joins them)
              f"  or group by (node) ({engine.GPU_INFO.select()} * on (model, pool) group_left ()"
              f" (deriv({rec.GATEWAY_QUEUE_SUM}[10m]) > 0))\n)"),
        for_="10m",
        severity=Severity.WARNING,
        signal=SignalClass.GPU,
        summary="A GPU is bandwidth-bound while its SMs idle and its queue grows: add GPUs.",
        description=(f"GPU {lab('gpu')} on {lab('node')} uses {PCT} of its memory bandwidth (threshold "
                     f"{pct(t)}) while its SMs are under {pct(low)} busy and the queue for it grows (in its "
                     "engines or in the gateway in front of them). Decode is "
                     "bandwidth-bound: bigger batches will not help, more GPUs (or a smaller KV/weight format) will."),
        cases=[
            Case("bandwidth full, compute low, queue growing", node(full), 25,
                 [Expected({"node": NODE, "gpu": "0"}, full)]),
            Case("bandwidth full, compute low, the gateway holds the growing queue", node(full, True), 25,
                 [Expected({"node": NODE, "gpu": "0"}, full)]),
            Case("bandwidth just under the threshold", node(near), 25),
        ],
    )


def kv_cache_near_full(limits: Thresholds) -> Alert:
    t = limits.kv_usage_near_full
    full, near = round(min(t + 0.02, (1 + t) / 2), 4), round(t - 0.01, 4)
    require(full > t > near > 0, "KV usage values must straddle the threshold")

    def engine_state(usage: float, preemptions_per_minute: int):
        return [gauge(engine.KV_CACHE_USAGE, engine_labels(), [(usage, 20)]),
                counter(engine.PREEMPTIONS, engine_labels(), [(preemptions_per_minute, 20)])]

    return Alert(
        name="LLMKVCacheNearFull",
        expr=(f"max by (model, pool, instance) ({engine.KV_CACHE_USAGE.select()}) > {num(t)}\n"
              f"and {ON_INSTANCE} sum by (model, pool, instance) ({engine.PREEMPTIONS.rate()}) > 0"),
        for_="5m",
        severity=Severity.WARNING,
        signal=SignalClass.CACHE,
        summary="KV cache is nearly full and the engine is preempting requests.",
        description=(f"KV cache of {lab('instance')} ({lab('model')}, pool {lab('pool')}) is {PCT} full "
                     f"(threshold {pct(t)}) and the engine is preempting requests, which recomputes their "
                     "prefill. Lower max concurrency or context, or add instances."),
        cases=[
            Case("nearly full and preempting", engine_state(full, 3), 15,
                 [Expected({"model": MODEL, "pool": POOL, "instance": INSTANCE}, full)]),
            Case("just under the threshold while preempting", engine_state(near, 3), 15),
            Case("nearly full without preemptions", engine_state(full, 0), 15),
        ],
    )


def prefix_hit_collapse(limits: Thresholds) -> Alert:
    share = limits.prefix_hit_collapse
    queries, baseline_hits = 1000, 800
    collapsed = round(baseline_hits * share * 0.2)
    near = round(baseline_hits * min(share + 0.05, 0.99))
    require(collapsed / queries < share * baseline_hits / queries < near / queries,
            "hit ratios must straddle the collapse share")

    def cache(after_hits: int):
        return [counter(engine.PREFIX_CACHE_QUERIES, engine_labels(), [(queries, 140)]),
                counter(engine.PREFIX_CACHE_HITS, engine_labels(), [(baseline_hits, 100), (after_hits, 40)])]

    ratio = rec.PREFIX_HIT_RATIO
    return Alert(
        name="LLMPrefixCacheHitCollapse",
        expr=f"{ratio} < {num(share)} * avg_over_time({ratio}[1d])",
        for_="10m",
        severity=Severity.WARNING,
        signal=SignalClass.CACHE,
        summary="The prefix-cache hit rate collapsed against its own 1-day baseline.",
        description=(f"Prefix-cache hit rate of {lab('model')} fell to {PCT}, under {pct(share)} of its 1-day "
                     "average. Prompts now pay full prefill: look for a routing change (cache-aware routing "
                     "off), a prompt template change, or evictions from KV pressure."),
        cases=[
            Case("hit rate collapses", cache(collapsed), 130, [Expected({"model": MODEL}, collapsed / queries)]),
            Case("hit rate drops to just above the share", cache(near), 130),
        ],
    )


def alerts(limits: Thresholds) -> list[Alert]:
    return [bandwidth_saturated(limits), kv_cache_near_full(limits), prefix_hit_collapse(limits)]
