"""Instance drill-down: one engine instance (``$instance``, its ``host:port``) from every side.

One ``instance`` label joins the engine collector's series, the gateway's and proxy's request metrics
and the gateway's instance state (DESIGN 10), and the engine collector's GPU info series joins the
instance's GPUs on ``node`` and ``gpu``. So this page shows its queue, KV cache, prefix hits, TTFT/ITL,
preemptions, prefill and decode time, its GPUs, its breaker state and ejections, and links to its
slowest traces.
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.promql import ratio
from infersight.config import Config
from infersight.dashboards import traces
from infersight.dashboards.panels import (
    RATE,
    TOKENS_PER_S,
    Line,
    Q,
    dashboard,
    dashboard_url,
    gauge,
    layout,
    link,
    quantiles,
    recorded,
    stat,
    timeseries,
    variable,
)
from infersight.signals import engine, gateway, gpu, request
from infersight.thresholds import Thresholds

UID = "infersight-instance"
I = {"instance": "=~$instance"}  # noqa: E741 - the one matcher of this dashboard
DEVICE = "{{node}}/{{gpu}}"
# The instance's GPUs: one series per (node, gpu) while the engine is up.
GPUS = f"max by (node, gpu) ({engine.GPU_INFO.select(**I)})"
# The engine's token-weighted prefix-cache hit ratio.
HIT_RATIO = ratio(engine.PREFIX_CACHE_HITS.rate(RATE, **I), engine.PREFIX_CACHE_QUERIES.rate(RATE, **I))


def on_its_gpus(signal, how: str = "max") -> str:
    """``signal`` for the instance's GPUs only."""
    return f"{how} by (node, gpu) ({signal.select()}) * on (node, gpu) {GPUS}"


def slowest_traces() -> dict:
    return link("Slowest traces of ${instance}", dashboard_url(traces.UID, instance="${instance}"),
                "The Traces dashboard narrowed to this instance: its slowest requests and stalls.")


def _now(limits: Thresholds) -> list[dict]:
    p99 = recorded(rec.TTFT_P99_BY_INSTANCE, I)
    return [
        stat("Gateway state", "none", [Q(f"{gateway.INSTANCE_STATE.select(**I)} == 1", "{{state}}")],
             text_mode="name", graph=False,
             description="The gateway's view: healthy, cold, half_open (breaker) or ejected.", good="healthy."),
        stat("Engine up", "short", [Q(f"min({engine.UP.select(**I)})", "up")], line=Line(1, below=True), graph=False,
             description="1 when the engine collector scraped the instance.", good="1."),
        stat("Waiting requests", "short", [Q(f"sum({engine.REQUESTS_WAITING.select(**I)})", "waiting")],
             line=Line(limits.instance_queue_limit), description="The instance's own queue.", good="near 0."),
        gauge("KV cache now", "percentunit", [Q(f"max({engine.KV_CACHE_USAGE.select(**I)})", "kv")],
              line=Line(limits.kv_usage_near_full), description="Share of the KV cache in use.",
              good="under the red mark; at it the engine preempts."),
        stat("TTFT p99", "s", [Q(f"max({p99})", "p99")], line=Line(limits.instance_p99_ttft_seconds),
             links=[slowest_traces()],
             description="Request-side p99 TTFT (the gateway queue included); red at the breaker's floor "
                         "(thresholds.instance_p99_ttft_seconds). The breaker itself judges the p99 inside the "
                         "engine against the instance's peers (Breaker row).", good="well under the breaker's floor."),
        gauge("Prefix-cache hit ratio", "percentunit", [Q(HIT_RATIO, "hits")],
              line=Line(limits.cold_cache_hit_ratio, below=True),
              description="Token-weighted prefix-cache hits; red under thresholds.cold_cache_hit_ratio.",
              good="like its peers' (Engines dashboard); red only in a cold start."),
    ]


def _load(limits: Thresholds) -> list[dict]:
    return [
        timeseries("Running and waiting", "short",
                   [Q(f"sum({engine.REQUESTS_RUNNING.select(**I)})", "running"),
                    Q(f"sum({engine.REQUESTS_WAITING.select(**I)})", "waiting"),
                    Q(f"sum({request.IN_FLIGHT.select(**I)})", "in flight (gateway)")],
                   line=Line(limits.instance_queue_limit),
                   description="The engine's batch and queue, and what the gateway has in flight to it; the line "
                               "is the overload bar (twice what it drains).",
                   good="waiting near 0; in flight about running plus waiting (else requests are lost between)."),
        timeseries("Tokens", TOKENS_PER_S,
                   [Q(f"sum({engine.PROMPT_TOKENS.rate(RATE, **I)})", "prompt (prefill)"),
                    Q(f"sum({engine.GENERATION_TOKENS.rate(RATE, **I)})", "generated (decode)")],
                   description="Prefill and decode token rates.", good="like its peers of the same pool."),
        timeseries("Queue time p95", "s",
                   [Q(engine.QUEUE_TIME.quantile(0.95, (), RATE, **I), "engine queue"),
                    Q(request.QUEUE_TIME.quantile(0.95, (), RATE, **I), "gateway queue")],
                   description="Time in the engine's queue and, for requests routed here, in the gateway's.",
                   good="near 0."),
    ]


def _cache(limits: Thresholds) -> list[dict]:
    return [
        timeseries("KV cache usage", "percentunit", [Q(f"max({engine.KV_CACHE_USAGE.select(**I)})", "kv")],
                   line=Line(limits.kv_usage_near_full), max_value=1, description="Share of KV blocks in use.",
                   good="under the line."),
        timeseries("Prefix-cache hits", "percentunit",
                   [Q(HIT_RATIO, "engine (token-weighted)"),
                    Q(recorded(rec.CACHED_INPUT_RATIO, I), "cached prompt share (requests) {{pool}}")],
                   line=Line(limits.cold_cache_hit_ratio, below=True), max_value=1,
                   description="The engine's hit ratio and the share of prompt tokens the requests report cached.",
                   good="above the line and steady; the two agree when the gateway sends the engine's usage."),
        timeseries("Preemptions", "reqps", [Q(f"sum({engine.PREEMPTIONS.rate(RATE, **I)})", "preempted")],
                   description="Requests preempted for lack of KV cache.", good="0."),
    ]


def _latency(config: Config, limits: Thresholds) -> list[dict]:
    ttft = quantiles(request.TTFT, (), I)
    itl = quantiles(engine.INTER_TOKEN, (), I, "engine ITL", qs=(0.5, 0.95))
    tpot = [Q(request.TPOT.quantile(0.95, (), RATE, **I), "p95 TPOT (requests)")]
    phases = [Q(engine.PREFILL_TIME.quantile(0.95, (), RATE, **I), "prefill p95"),
              Q(engine.DECODE_TIME.quantile(0.95, (), RATE, **I), "decode p95")]
    return [
        timeseries("TTFT p50 / p95 / p99", "s", ttft, line=Line(limits.ttft_slo_seconds), links=[slowest_traces()],
                   description="As clients see it, for requests this instance served; the line is the TTFT SLO. "
                               "The panel link opens this instance's slowest traces.",
                   good="p99 under the line and close to its peers' (Circuit breaker dashboard)."),
        timeseries("Inter-token latency and TPOT", "s", itl + tpot, line=Line(config.slo.tpot_p95_seconds),
                   description="Token gaps as the engine measures them and TPOT as the requests saw it.",
                   good="p95 under the line."),
        timeseries("Prefill vs decode time p95", "s", phases,
                   description="Time requests spent in prefill (compute-bound) and decode (bandwidth-bound).",
                   good="prefill short; decode growing with output length only."),
    ]


def _gpus(limits: Thresholds) -> list[dict]:
    return [
        timeseries("Its GPUs: memory bandwidth", "percentunit",
                   [Q(on_its_gpus(gpu.MEMORY_BANDWIDTH_UTILIZATION), DEVICE)],
                   line=Line(limits.bandwidth_saturation), max_value=1, width=6,
                   description="DRAM bandwidth of the GPUs this instance runs on.",
                   good="under the line; at it decode cannot go faster here."),
        timeseries("Its GPUs: SM activity", "percentunit", [Q(on_its_gpus(gpu.SM_ACTIVITY), DEVICE)], max_value=1,
                   width=6, description="Share of SMs busy.", good="high in prefill, lower in decode."),
        timeseries("Its GPUs: power", "watt", [Q(on_its_gpus(gpu.POWER, "sum"), DEVICE)], width=6,
                   description="Power draw.", good="under the power limit (GPUs dashboard)."),
        timeseries("Its GPUs: temperature", "celsius", [Q(on_its_gpus(gpu.TEMPERATURE), DEVICE)],
                   line=Line(limits.gpu_temperature_celsius), width=6, description="Die temperature.",
                   good="under the line."),
    ]


def _breaker(limits: Thresholds) -> list[dict]:
    own = recorded(rec.ENGINE_TTFT_P99_BY_INSTANCE, I)
    seen = recorded(rec.TTFT_P99_BY_INSTANCE, I)
    k = limits.instance_p99_peer_factor
    peers = f"{rec.ENGINE_TTFT_BREAKER_LINE} and on (model, pool) {own}"
    return [
        timeseries("Breaker: TTFT p99 vs the threshold", "s",
                   [Q(own, "p99 inside the engine {{pool}}"),
                    Q(peers, f"breaker line ({k:g}x its peers' median instance)"),
                    Q(seen, "p99 at the gateway {{pool}}")],
                   line=Line(limits.instance_p99_ttft_seconds),
                   description="The breaker judges the p99 inside the engine (from a request's arrival there; the "
                               "gateway queue is not in it): over both the line (thresholds.instance_p99_ttft_"
                               "seconds) and its peers' median times thresholds.instance_p99_peer_factor, the "
                               "gateway half-opens it (low-priority traffic only). The gateway's p99 adds its queue.",
                   good="under the line and the peer bound; the gateway's p99 near the engine's."),
        timeseries("State over time", "short", [Q(f"{gateway.INSTANCE_STATE.select(**I)} == 1", "{{state}}")],
                   stack=True, max_value=1, description="The gateway's state of this instance.",
                   good="healthy all along; half_open and ejected spans are incidents."),
        timeseries("Ejections and failed health checks", "short",
                   [Q(f"sum(increase({gateway.EJECTIONS.select(**I)}[5m]))", "ejections in 5m"),
                    Q(f"sum(increase({gateway.HEALTH_CHECK_FAILURES.select(**I)}[5m]))", "failed checks in 5m")],
                   description="Ejections and failed health checks in the last 5 minutes.", good="0."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Now", _now(limits)), ("Queue and load", _load(limits)), ("KV and prefix cache", _cache(limits)),
            ("Latency", _latency(config, limits)), ("Its GPUs", _gpus(limits)),
            ("Breaker and ejections", _breaker(limits))]
    variables = [variable("instance", "instance", engine.REQUESTS_RUNNING.name, "instance", multi=False,
                          include_all=False, description="The engine instance (host:port) to look at.")]
    return dashboard(UID, "infersight / Instance drill-down",
                     "One engine instance from every side: queue, KV cache, prefix hits, TTFT and ITL, preemptions, "
                     "prefill and decode time, its GPUs, its breaker state and ejections, and its slowest traces.",
                     layout(rows), variables)
