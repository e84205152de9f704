"""Engines: what every vLLM/SGLang/... instance is doing, from the engine collector's normalized series.

What vLLM's example dashboard shows is here (e2e latency percentiles with their mean, finish reasons,
prefill vs decode time, token throughput, queue time, TTFT/ITL heatmaps), by ``model`` and ``instance``.
"""

from __future__ import annotations

from infersight.alerts import recording as rec
from infersight.alerts.promql import ratio
from infersight.config import Config
from infersight.dashboards.panels import (
    RATE,
    TOKENS_PER_S,
    Line,
    Q,
    dashboard,
    heatmap,
    layout,
    quantiles,
    recorded,
    stat,
    timeseries,
    variable,
)
from infersight.signals import engine
from infersight.thresholds import Thresholds

UID = "infersight-engines"
F = {"model": "=~$model", "instance": "=~$instance"}


def percentiles(signal, by: tuple[str, ...], legend: str) -> list[Q]:
    """p50/p95/p99 of a histogram and its mean (rate of the sum over rate of the count), as vLLM's dashboard."""
    mean = ratio(f"rate({signal.sum(**F)}[{RATE}])", f"rate({signal.count(**F)}[{RATE}])", by)
    return [*quantiles(signal, by, F, legend), Q(mean, f"mean {legend}")]


def _now(limits: Thresholds) -> list[dict]:
    return [
        stat("Instances up", "short", [Q(f"sum({engine.UP.select()})", "up")], width=6,
             description="Engine instances the collector scraped successfully.",
             good="every instance of the fleet; one missing is down or unreachable (see Targets up)."),
        stat("Running requests", "short", [Q(f"sum({engine.REQUESTS_RUNNING.select(**F)})", "running")], width=6,
             description="Requests in the engines' running batches.",
             good="close to the capacity model's concurrent requests per instance times the instances."),
        stat("Waiting requests", "short", [Q(f"sum({engine.REQUESTS_WAITING.select(**F)})", "waiting")], width=6,
             line=Line(limits.instance_queue_limit), description="Requests queued inside the engines.",
             good="near 0; a standing queue is the leading indicator of a TTFT cliff."),
        stat("Generated tokens", TOKENS_PER_S, [Q(f"sum({engine.GENERATION_TOKENS.rate(RATE, **F)})", "tok/s")],
             width=6, description="Decode tokens per second over the selected instances.",
             good="follows demand; flat while requests wait means the engines are saturated."),
    ]


def _load(limits: Thresholds) -> list[dict]:
    running = f"sum by (instance) ({engine.REQUESTS_RUNNING.select(**F)})"
    waiting = f"sum by (instance) ({engine.REQUESTS_WAITING.select(**F)})"
    up = engine.UP.select(instance="=~$instance")
    return [
        timeseries("Running requests per instance", "short", [Q(running, "{{instance}}")],
                   description="The engine's running batch.",
                   good="similar across instances of a pool; one far above its peers is a routing imbalance."),
        timeseries("Waiting requests per instance (instance queue)", "short", [Q(waiting, "{{instance}}")],
                   line=Line(limits.instance_queue_limit),
                   description="The line is twice what one instance drains at the target token rate "
                               "(capacity model): beyond it the instance is overloaded.",
                   good="near 0 everywhere; a queue on one instance only points at that instance."),
        timeseries("Targets up", "short", [Q(up, "{{instance}} ({{engine}})")], max_value=1,
                   description="0: the collector cannot scrape the target; its other series are absent.",
                   good="1 for every instance."),
        timeseries("Waiting requests by reason", "short",
                   [Q(f"sum by (reason) ({engine.REQUESTS_WAITING_BY_REASON.select(**F)})", "{{reason}}")],
                   stack=True, width=12,
                   description="Why requests wait (vLLM: capacity, deferred); the reasons sum to the queue.",
                   good="empty; capacity means no KV room or batch slot, deferred a scheduling choice."),
        timeseries("Engine rejections by reason", "reqps",
                   [Q(f"sum by (instance, reason) ({engine.REJECTIONS.rate(RATE, **F)})", "{{instance}} {{reason}}")],
                   width=12, description="Requests the engine turned away at admission (queue or token limits).",
                   good="0; rejections here are the engine's overload, before the gateway sees a 503."),
    ]


def _cache(limits: Thresholds) -> list[dict]:
    usage = f"max by (instance) ({engine.KV_CACHE_USAGE.select(**F)})"
    hit_ratio = ratio(engine.PREFIX_CACHE_HITS.rate(RATE, **F), engine.PREFIX_CACHE_QUERIES.rate(RATE, **F),
                      ("instance",))
    preemptions = f"sum by (instance) ({engine.PREEMPTIONS.rate(RATE, **F)})"
    return [
        timeseries("KV cache usage", "percentunit", [Q(usage, "{{instance}}")], line=Line(limits.kv_usage_near_full),
                   max_value=1, description="Share of the KV cache blocks in use.",
                   good="high but under the line; at the line the engine preempts requests."),
        timeseries("Prefix-cache hit ratio (token-weighted)", "percentunit",
                   [Q(hit_ratio, "{{instance}}"), Q(recorded(rec.PREFIX_HIT_RATIO, F), "model {{model}}")],
                   line=Line(limits.cold_cache_hit_ratio, below=True), max_value=1,
                   description="rate(hits) / rate(queries); under the line an instance is cache-cold.",
                   good="stable per model; a sudden fall is a prefix-cache collapse (routing or eviction)."),
        timeseries("Preemptions", "reqps", [Q(preemptions, "{{instance}}")],
                   description="Requests the engine preempted for lack of KV cache.",
                   good="0; any preemption recomputes a prefill and costs TTFT."),
    ]


def _tokens() -> list[dict]:
    prompt = f"sum by (instance) ({engine.PROMPT_TOKENS.rate(RATE, **F)})"
    generated = f"sum by (instance) ({engine.GENERATION_TOKENS.rate(RATE, **F)})"
    finished = f"sum by (finish_reason) ({engine.REQUESTS_FINISHED.rate(RATE, **F)})"
    return [
        timeseries("Prompt tokens (prefill)", TOKENS_PER_S, [Q(prompt, "{{instance}}")],
                   description="Prompt tokens processed per second.",
                   good="follows demand; spikes without more requests are long prompts arriving."),
        timeseries("Generated tokens (decode)", TOKENS_PER_S, [Q(generated, "{{instance}}")],
                   description="Output tokens per second.",
                   good="even across the instances of a pool."),
        timeseries("Finished requests by finish reason", "reqps", [Q(finished, "{{finish_reason}}")], stack=True,
                   description="stop: the model ended; length: max_tokens reached; abort: the client went away; "
                               "error: the engine failed it.",
                   good="mostly stop; a rise of abort is clients timing out, of length is a max_tokens too low."),
    ]


def _latency(config: Config, limits: Thresholds) -> list[dict]:
    return [
        timeseries("Engine TTFT p50 / p95 / p99 and mean", "s", percentiles(engine.TTFT, ("model",), "{{model}}"),
                   line=Line(limits.ttft_slo_seconds), width=12,
                   description="As the engine measures it (without the gateway's queue); the line is the TTFT SLO.",
                   good="p99 under the line; a p99 far from the mean is a tail, not a slow fleet."),
        heatmap("Engine TTFT distribution", f"sum by (le) (rate({engine.TTFT.bucket(**F)}[{RATE}]))", width=12,
                description="Requests per second in each TTFT bucket.",
                good="one band low down; a second mode far up is a stall or a queue."),
        timeseries("Engine e2e latency p50 / p95 / p99 and mean", "s",
                   percentiles(engine.E2E, ("model",), "{{model}}"), width=12,
                   description="Arrival to last token inside the engine.",
                   good="tracks output length; a jump at constant output length is queueing or preemption."),
        timeseries("Engine TPOT p50 / p95 / p99 and mean", "s",
                   percentiles(engine.TPOT, ("model",), "{{model}}"), line=Line(config.slo.tpot_p95_seconds),
                   width=12, description="Per request: decode time over output tokens, as the engine measures it.",
                   good="p95 under the line (slo.tpot_p95_seconds)."),
        timeseries("Engine inter-token latency p50 / p95 / p99 and mean", "s",
                   percentiles(engine.INTER_TOKEN, ("model",), "{{model}}"), line=Line(config.slo.tpot_p95_seconds),
                   width=12, description="Time between output tokens; the line is slo.tpot_p95_seconds.",
                   good="p95 under the line; ITL grows with batch size, so it rises with load by design."),
        heatmap("Engine inter-token latency distribution",
                f"sum by (le) (rate({engine.INTER_TOKEN.bucket(**F)}[{RATE}]))", width=12,
                description="Token gaps per second in each bucket.",
                good="a narrow band; cells far up are stalls (see the Traces dashboard for which requests)."),
        timeseries("Engine queue time p95", "s", [Q(engine.QUEUE_TIME.quantile(0.95, ("instance",), RATE, **F),
                                                    "{{instance}}")], width=12,
                   description="Time requests waited in the engine's own queue.",
                   good="near 0; engine queueing adds straight to TTFT."),
    ]


def _phases() -> list[dict]:
    return [
        timeseries("Prefill time p50 / p95 / p99 and mean", "s",
                   percentiles(engine.PREFILL_TIME, ("model",), "{{model}}"), width=12,
                   description="Time requests spent in prefill (compute-bound: about 2 x params FLOPs per token).",
                   good="grows with prompt length only; cache hits shorten it."),
        timeseries("Decode time p50 / p95 / p99 and mean", "s",
                   percentiles(engine.DECODE_TIME, ("model",), "{{model}}"), width=12,
                   description="Time requests spent in decode (bandwidth-bound: the weights read once per step).",
                   good="grows with output length; rising at the same length means bandwidth saturation."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("Now", _now(limits)), ("Load and queues", _load(limits)), ("KV cache", _cache(limits)),
            ("Tokens and finish reasons", _tokens()), ("Engine-side latency", _latency(config, limits)),
            ("Prefill vs decode", _phases())]
    variables = [variable("model", "model", engine.REQUESTS_RUNNING.name, "model"),
                 variable("instance", "instance", engine.REQUESTS_RUNNING.name, "instance")]
    return dashboard(UID, "infersight / Engines",
                     "Per engine instance (host:port): running and waiting requests, KV cache, prefix-cache hits, "
                     "preemptions, token rates, finish reasons, the engines' own latency histograms and prefill "
                     "vs decode time.", layout(rows), variables)
