"""Engines: what every vLLM/SGLang/... instance is doing, from the engine collector's normalized series."""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.limits import Limits
from infersight.config import Config
from infersight.dashboards.panels import RATE, Line, Q, dashboard, heatmap, layout, timeseries, variable
from infersight.signals import engine

UID = "infersight-engines"
F = {"model": "=~$model"}
TOKENS_PER_S = "suffix: tok/s"


def _load(limits: Limits) -> list[dict]:
    running = f"sum by (instance) ({engine.REQUESTS_RUNNING.select(**F)})"
    waiting = f"sum by (instance) ({engine.REQUESTS_WAITING.select(**F)})"
    up = engine.UP.select()
    return [
        timeseries("Running requests per instance", "short", [Q(running, "{{instance}}")]),
        timeseries("Waiting requests per instance (instance queue)", "short", [Q(waiting, "{{instance}}")],
                   line=Line(limits.instance_queue_limit),
                   description="The line is twice what one instance drains at the target token rate "
                               "(capacity model): beyond it the instance is overloaded."),
        timeseries("Targets up", "short", [Q(up, "{{instance}} ({{engine}})")], max_value=1,
                   description="0: the collector cannot scrape the target; its other series are absent."),
    ]


def _cache(limits: Limits) -> list[dict]:
    usage = f"max by (instance) ({engine.KV_CACHE_USAGE.select(**F)})"
    hit_ratio = (f"sum by (instance) ({engine.PREFIX_CACHE_HITS.rate(RATE, **F)}) "
                 f"/ sum by (instance) ({engine.PREFIX_CACHE_QUERIES.rate(RATE, **F)})")
    preemptions = f"sum by (instance) ({engine.PREEMPTIONS.rate(RATE, **F)})"
    return [
        timeseries("KV cache usage", "percentunit", [Q(usage, "{{instance}}")], line=Line(limits.kv_usage_near_full),
                   max_value=1),
        timeseries("Prefix-cache hit ratio (token-weighted)", "percentunit",
                   [Q(hit_ratio, "{{instance}}"), Q(f'{rec.PREFIX_HIT_RATIO}{{model=~"$model"}}', "model {{model}}")],
                   line=Line(limits.cold_cache_hit_ratio, below=True), max_value=1,
                   description="rate(hits) / rate(queries); under the line an instance is cache-cold."),
        timeseries("Preemptions", "reqps", [Q(preemptions, "{{instance}}")],
                   description="Requests the engine preempted for lack of KV cache."),
    ]


def _tokens() -> list[dict]:
    prompt = f"sum by (instance) ({engine.PROMPT_TOKENS.rate(RATE, **F)})"
    generated = f"sum by (instance) ({engine.GENERATION_TOKENS.rate(RATE, **F)})"
    return [
        timeseries("Prompt tokens (prefill)", TOKENS_PER_S, [Q(prompt, "{{instance}}")], width=12),
        timeseries("Generated tokens (decode)", TOKENS_PER_S, [Q(generated, "{{instance}}")], width=12),
    ]


def _latency(config: Config, limits: Limits) -> list[dict]:
    ttft = [Q(engine.TTFT.quantile(q, ("model",), RATE, **F), f"p{round(q * 100)} {{{{model}}}}")
            for q in rec.QUANTILES]
    itl = [Q(engine.INTER_TOKEN.quantile(q, ("model",), RATE, **F), f"p{round(q * 100)} {{{{model}}}}")
           for q in rec.QUANTILES]
    queue = engine.QUEUE_TIME.quantile(0.95, ("instance",), RATE, **F)
    return [
        timeseries("Engine TTFT p50 / p95 / p99", "s", ttft, line=Line(limits.ttft_slo_seconds),
                   description="As the engine measures it (without the gateway's queue)."),
        heatmap("Engine TTFT distribution", f"sum by (le) (rate({engine.TTFT.bucket(**F)}[{RATE}]))",
                description="Requests per second in each TTFT bucket: a second mode far right is a stall."),
        timeseries("Engine queue time p95", "s", [Q(queue, "{{instance}}")]),
        timeseries("Engine inter-token latency p50 / p95 / p99", "s", itl, line=Line(config.slo.tpot_p95_seconds),
                   width=12),
        heatmap("Engine inter-token latency distribution",
                f"sum by (le) (rate({engine.INTER_TOKEN.bucket(**F)}[{RATE}]))", width=12),
    ]


def build(config: Config, limits: Limits) -> dict:
    rows = [("Load and queues", _load(limits)), ("KV cache", _cache(limits)), ("Token throughput", _tokens()),
            ("Engine-side latency histograms", _latency(config, limits))]
    return dashboard(UID, "infersight / Engines",
                     "Per engine instance (host:port): running and waiting requests, KV cache, prefix-cache hits, "
                     "preemptions, token rates and the engines' own latency histograms.", layout(rows),
                     [variable("model", "model", engine.REQUESTS_RUNNING.name, "model")])
