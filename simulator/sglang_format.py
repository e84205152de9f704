"""A simulated engine's /metrics under SGLang's own names, labels and buckets.

From sgl-project/sglang ``python/sglang/srt/observability/metrics_collector.py`` (commit 44cedc2b):
the scheduler's families (``SchedulerMetricsCollector``) carry ``model_name``, ``engine_type``
(``unified``, or ``prefill``/``decode`` in a disaggregated deployment, set in
``scheduler_metrics_mixin.py``), ``tp_rank``, ``pp_rank`` and ``moe_ep_rank``; the tokenizer's
(``TokenizerMetricsCollector``) carry ``model_name`` only. Both sides are as the fixture
``tests/fixtures/metrics/sglang_pd_current_source.txt`` shows them.

Unlike vLLM, SGLang creates no series at 0: each labelled child appears at its first event, as
prometheus_client does. The scheduler's gauges appear with its first logged batch (all of them
at once, the disaggregation queues at 0 on a unified server too, since ``log_stats`` sets every
gauge); the tokenizer counts a request's prompt, generated and cached tokens when it finishes
(``observe_one_finished_request``), not step by step; ``cached_tokens_total{cache_source}`` and
``realtime_tokens_total{mode}`` appear at their first non-zero increment; the retraction and
abort counters at the first retraction and abort. A restart (a new process) starts over.

Not modelled: SGLang logs its gauges per prefill batch and every ``decode_log_interval`` decode
steps, so an idle SGLang keeps showing the last logged values; here they are the engine's state
at the scrape.
"""

from __future__ import annotations

from prometheus_client.samples import Sample

from infersight.simulator.engine import SimEngine
from infersight.simulator.histogram import CountingHistogram

PAGE_SIZE = 1  # SGLang's default --page-size

# Default buckets of each histogram, as metrics_collector.py declares them.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
               600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
QUEUE_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0,
                 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0,
                 1600.0, 1800.0, 2000.0, 2500.0, 3000.0)
STAGE_BUCKETS = tuple(0.001 * 1.62 ** i for i in range(30))  # exponential_buckets(start=0.001, width=1.62, length=30)
# The engine's histograms (simulator/engine.py keys) with SGLang's bounds.
BOUNDS = {"ttft": TTFT_BUCKETS, "itl": ITL_BUCKETS, "e2e": E2E_BUCKETS, "queue": QUEUE_BUCKETS,
          "prefill": STAGE_BUCKETS, "decode": STAGE_BUCKETS}

UNIFIED = "unified"  # engine_type of a server that is not disaggregated
STAGE_PREFILL_FORWARD = "prefill_forward"  # req_time_stats.py RequestStage.PREFILL_FORWARD
KV_QUEUES = ("num_prefill_prealloc_queue_reqs", "num_prefill_inflight_queue_reqs", "num_decode_prealloc_queue_reqs",
             "num_decode_transfer_queue_reqs")

# family -> (type, help), as metrics_collector.py declares them
FAMILIES = {
    "sglang:num_running_reqs": ("gauge", "The number of running requests."),
    "sglang:num_used_tokens": ("gauge", "The number of used tokens."),
    "sglang:token_usage": ("gauge", "The token usage."),
    "sglang:num_queue_reqs": ("gauge", "The number of requests in the waiting queue."),
    "sglang:max_total_num_tokens": ("gauge", "Maximum total number of tokens in the KV cache pool."),
    "sglang:num_prefill_prealloc_queue_reqs": ("gauge", "The number of requests in the prefill prealloc queue."),
    "sglang:num_prefill_inflight_queue_reqs": ("gauge", "The number of requests in the prefill inflight queue."),
    "sglang:num_decode_prealloc_queue_reqs": ("gauge", "The number of requests in the decode prealloc queue."),
    "sglang:num_decode_transfer_queue_reqs": ("gauge", "The number of requests in the decode transfer queue."),
    "sglang:num_retracted_requests": ("counter", "Total number of retracted requests."),
    "sglang:realtime_tokens": ("counter", "Total number of tokens processed (updated on each log interval). "
                                          "mode: prefill_compute, prefill_cache, decode."),
    "sglang:queue_time_seconds": ("histogram", "Histogram of queueing time in seconds."),
    "sglang:per_stage_req_latency_seconds": ("histogram", "The latency of each stage of requests."),
    "sglang:cache_config_info": ("gauge", "Cache configuration information."),
    "sglang:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "sglang:generation_tokens": ("counter", "Number of generation tokens processed."),
    "sglang:cached_tokens": ("counter", "Number of cached prompt tokens by source (device/host/storage)."),
    "sglang:num_requests": ("counter", "Number of requests processed."),
    "sglang:num_aborted_requests": ("counter", "Number of requests aborted."),
    "sglang:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "sglang:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "sglang:e2e_request_latency_seconds": ("histogram", "Histogram of End-to-end request latency in seconds"),
}


def _histogram(name: str, labels: dict[str, str], h: CountingHistogram) -> list[Sample]:
    out = [Sample(name + "_bucket", {**labels, "le": le}, float(n)) for le, n in h.cumulative()]
    out.append(Sample(name + "_count", labels, float(h.count)))
    out.append(Sample(name + "_sum", labels, h.sum))
    return out


def scheduler_labels(engine: SimEngine) -> dict[str, str]:
    return {"engine_type": UNIFIED, "model_name": engine.model, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}


def families(engine: SimEngine) -> dict[str, list[Sample]]:
    """The engine's samples by family name, keyed as prometheus_client's text parser keys them."""
    s = engine.stats
    sched = scheduler_labels(engine)
    tok = {"model_name": engine.model}
    capacity = engine.physics.kv_capacity_tokens
    out: dict[str, list[Sample]] = {
        # emit_cache_config_info at start-up, without the scheduler's labels
        "sglang:cache_config_info": [Sample("sglang:cache_config_info",
                                            {"num_pages": str(capacity // PAGE_SIZE), "page_size": str(PAGE_SIZE)},
                                            1.0)],
    }
    if s.prompt_tokens:  # the scheduler has logged a batch
        gauges = {"sglang:num_running_reqs": engine.running,
                  "sglang:num_used_tokens": max(0, int(engine.kv_used())),
                  "sglang:token_usage": max(0.0, round(engine.kv_usage(), 6)),
                  "sglang:num_queue_reqs": len(engine.waiting),
                  "sglang:max_total_num_tokens": capacity,
                  **{"sglang:" + name: 0 for name in KV_QUEUES}}
        out.update({name: [Sample(name, sched, float(v))] for name, v in gauges.items()})
        modes = {"prefill_compute": s.prompt_tokens - s.prefix_hits, "prefill_cache": s.prefix_hits,
                 "decode": int(s.generation_tokens)}
        realtime = [Sample("sglang:realtime_tokens_total", {**sched, "mode": m}, float(v))
                    for m, v in modes.items() if v > 0]
        if realtime:
            out["sglang:realtime_tokens"] = realtime
    if s.preemptions:
        out["sglang:num_retracted_requests"] = [Sample("sglang:num_retracted_requests_total", sched,
                                                       float(s.preemptions))]
    if s.queue.count:
        out["sglang:queue_time_seconds"] = _histogram("sglang:queue_time_seconds", sched, s.queue)
    if s.prefill.count:
        out["sglang:per_stage_req_latency_seconds"] = _histogram(
            "sglang:per_stage_req_latency_seconds", {**sched, "stage": STAGE_PREFILL_FORWARD}, s.prefill)
    done = sum(n for reason, n in s.finished.items() if reason != "abort")
    if done:
        out["sglang:prompt_tokens"] = [Sample("sglang:prompt_tokens_total", tok, float(s.done_prompt_tokens))]
        out["sglang:generation_tokens"] = [Sample("sglang:generation_tokens_total", tok,
                                                  float(s.done_generation_tokens))]
        out["sglang:num_requests"] = [Sample("sglang:num_requests_total", tok, float(done))]
    if s.done_cached_tokens:
        out["sglang:cached_tokens"] = [Sample("sglang:cached_tokens_total", {**tok, "cache_source": "device"},
                                              float(s.done_cached_tokens))]
    if s.finished["abort"]:
        out["sglang:num_aborted_requests"] = [Sample("sglang:num_aborted_requests_total", tok,
                                                     float(s.finished["abort"]))]
    for family, h in (("sglang:time_to_first_token_seconds", s.ttft), ("sglang:inter_token_latency_seconds", s.itl),
                      ("sglang:e2e_request_latency_seconds", s.e2e)):
        if h.count:
            out[family] = _histogram(family, tok, h)
    return out


def _labels_text(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}" if inner else ""


def exposition(engine: SimEngine) -> str:
    """Prometheus text format 0.0.4, as SGLang serves it on /metrics."""
    lines: list[str] = []
    for family, samples in families(engine).items():
        kind, help_text = FAMILIES[family]
        exposed = family + "_total" if kind == "counter" else family
        lines.append(f"# HELP {exposed} {help_text}")
        lines.append(f"# TYPE {exposed} {kind}")
        lines += [f"{s.name}{_labels_text(s.labels)} {float(s.value)!r}" for s in samples]
    return "\n".join(lines) + "\n"
