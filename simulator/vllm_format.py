"""A simulated engine's /metrics under vLLM's own names, labels and buckets.

Names, label sets and buckets follow vLLM's ``vllm/v1/metrics/loggers.py`` (PrometheusStatLogger),
as in the fixture ``vllm_metrics_sample.txt``: every series carries ``model_name`` and
``engine`` (the data-parallel rank), and vLLM creates all of them at 0 when the engine starts
(``request_success`` for each finish reason too), so none appears only at its first event.
The same families feed the real engine collector's normalizer in virtual time and are served as
text in real time.
"""

from __future__ import annotations

from prometheus_client.samples import Sample

from infersight.simulator.engine import BLOCK_SIZE, SimEngine
from infersight.simulator.histogram import CountingHistogram

ENGINE_RANK = "0"

# family -> (type, help)
FAMILIES = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prefix_cache_queries": ("counter", "Prefix cache queries, in terms of number of queried tokens."),
    "vllm:prefix_cache_hits": ("counter", "Prefix cache hits, in terms of number of cached tokens."),
    "vllm:num_preemptions": ("counter", "Cumulative number of preemption from the engine."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in seconds."),
    "vllm:request_queue_time_seconds": ("histogram", "Histogram of time spent in WAITING phase for request."),
    "vllm:request_prefill_time_seconds": ("histogram", "Histogram of time spent in PREFILL phase for request."),
    "vllm:request_decode_time_seconds": ("histogram", "Histogram of time spent in DECODE phase for request."),
    "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig"),
}


def _histogram(name: str, labels: dict[str, str], h: CountingHistogram) -> list[Sample]:
    out = [Sample(name + "_bucket", {**labels, "le": le}, float(n)) for le, n in h.cumulative()]
    out.append(Sample(name + "_count", labels, float(h.count)))
    out.append(Sample(name + "_sum", labels, h.sum))
    return out


def families(engine: SimEngine) -> dict[str, list[Sample]]:
    """The engine's samples by family name, keyed as prometheus_client's text parser keys them."""
    labels = {"engine": ENGINE_RANK, "model_name": engine.model}
    s = engine.stats

    def one(name: str, value: float, suffix: str = "") -> list[Sample]:
        return [Sample(name + suffix, labels, float(value))]

    blocks = engine.physics.kv_capacity_tokens // BLOCK_SIZE
    out = {
        "vllm:num_requests_running": one("vllm:num_requests_running", engine.running),
        "vllm:num_requests_waiting": one("vllm:num_requests_waiting", len(engine.waiting)),
        "vllm:kv_cache_usage_perc": one("vllm:kv_cache_usage_perc", round(engine.kv_usage(), 6)),
        "vllm:prefix_cache_queries": one("vllm:prefix_cache_queries", s.prefix_queries, "_total"),
        "vllm:prefix_cache_hits": one("vllm:prefix_cache_hits", s.prefix_hits, "_total"),
        "vllm:num_preemptions": one("vllm:num_preemptions", s.preemptions, "_total"),
        "vllm:prompt_tokens": one("vllm:prompt_tokens", s.prompt_tokens, "_total"),
        "vllm:generation_tokens": one("vllm:generation_tokens", int(s.generation_tokens), "_total"),
        "vllm:request_success": [Sample("vllm:request_success_total", {**labels, "finished_reason": reason},
                                        float(n)) for reason, n in s.finished.items()],
        "vllm:time_to_first_token_seconds": _histogram("vllm:time_to_first_token_seconds", labels, s.ttft),
        "vllm:inter_token_latency_seconds": _histogram("vllm:inter_token_latency_seconds", labels, s.itl),
        "vllm:e2e_request_latency_seconds": _histogram("vllm:e2e_request_latency_seconds", labels, s.e2e),
        "vllm:request_queue_time_seconds": _histogram("vllm:request_queue_time_seconds", labels, s.queue),
        "vllm:request_prefill_time_seconds": _histogram("vllm:request_prefill_time_seconds", labels, s.prefill),
        "vllm:request_decode_time_seconds": _histogram("vllm:request_decode_time_seconds", labels, s.decode),
        "vllm:cache_config_info": [Sample("vllm:cache_config_info", {
            "block_size": str(BLOCK_SIZE), "cache_dtype": "auto", "enable_prefix_caching": "True",
            "engine": ENGINE_RANK, "gpu_memory_utilization": "0.9", "num_cpu_blocks": "None",
            "num_gpu_blocks": str(blocks), "prefix_caching_hash_algo": "sha256", "sliding_window": "None"}, 1.0)],
    }
    return out


def _labels_text(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}" if inner else ""


def exposition(engine: SimEngine) -> str:
    """Prometheus text format 0.0.4, as vLLM serves it on /metrics."""
    return render(families(engine), FAMILIES)


def render(by_family: dict[str, list[Sample]], meta: dict[str, tuple[str, str]]) -> str:
    """Families as Prometheus text format 0.0.4; ``meta``: family -> (type, help)."""
    lines: list[str] = []
    for family, samples in by_family.items():
        kind, help_text = meta[family]
        exposed = family + "_total" if kind == "counter" else family
        lines.append(f"# HELP {exposed} {help_text}")
        lines.append(f"# TYPE {exposed} {kind}")
        lines += [f"{s.name}{_labels_text(s.labels)} {float(s.value)!r}" for s in samples]
    return "\n".join(lines) + "\n"
