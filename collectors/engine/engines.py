"""Per-engine mapping tables: vLLM, SGLang, TGI, Triton (TensorRT-LLM backend) and trtllm-serve.

Engine metric names appear only here. Where an engine renamed a metric, the rule lists the
current name first and the deprecated ones after it (see :class:`rules.Rule`).
"""

from __future__ import annotations

from infersight.signals import engine as sig

from .rules import Derived, EngineSpec, Families, Rule


def _int_label(labels: dict[str, str], name: str) -> int | None:
    try:
        return int(labels.get(name, ""))
    except ValueError:  # vLLM writes "None" before the cache is profiled
        return None


# -- vLLM ----------------------------------------------------------------------------------------
def _vllm_capacity(families: Families) -> list[Derived]:
    """KV capacity in tokens from ``cache_config_info``: num_gpu_blocks x block_size."""
    out: list[Derived] = []
    for sample in families.get("vllm:cache_config_info", ()):
        blocks, block_size = _int_label(sample.labels, "num_gpu_blocks"), _int_label(sample.labels, "block_size")
        if blocks is not None and block_size is not None:
            out.append((sig.KV_CACHE_CAPACITY, sample.labels, float(blocks * block_size)))
    return out


VLLM = EngineSpec(
    name="vllm",
    model_labels=("model_name",),
    dp_label="engine",  # vLLM's `engine` label is the data-parallel rank
    rules=(
        Rule(sig.REQUESTS_RUNNING, ("vllm:num_requests_running",)),
        Rule(sig.REQUESTS_WAITING, ("vllm:num_requests_waiting",)),
        Rule(sig.KV_CACHE_USAGE, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),  # both 0..1
        Rule(sig.PREFIX_CACHE_QUERIES, ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")),
        Rule(sig.PREFIX_CACHE_HITS, ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")),
        Rule(sig.PREEMPTIONS, ("vllm:num_preemptions",)),
        Rule(sig.PROMPT_TOKENS, ("vllm:prompt_tokens",)),
        Rule(sig.GENERATION_TOKENS, ("vllm:generation_tokens",)),
        Rule(sig.REQUESTS_FINISHED, ("vllm:request_success",), relabel=(("finished_reason", "finish_reason"),)),
        Rule(sig.TTFT, ("vllm:time_to_first_token_seconds",)),
        Rule(sig.INTER_TOKEN, ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
        Rule(sig.E2E, ("vllm:e2e_request_latency_seconds",)),
        Rule(sig.QUEUE_TIME, ("vllm:request_queue_time_seconds",)),
        Rule(sig.PREFILL_TIME, ("vllm:request_prefill_time_seconds",)),
        Rule(sig.DECODE_TIME, ("vllm:request_decode_time_seconds",)),
    ),
    derive=_vllm_capacity,
    derive_sources=("vllm:cache_config_info",),
)


# -- SGLang: `sglang:` and, in some releases, `sglang_` ---------------------------------------------
def _sg(name: str) -> tuple[str, str]:
    return ("sglang:" + name, "sglang_" + name)


SGLANG = EngineSpec(
    name="sglang",
    model_labels=("model_name",),
    dp_label="dp_rank",
    rules=(
        Rule(sig.REQUESTS_RUNNING, _sg("num_running_reqs")),
        Rule(sig.REQUESTS_WAITING, _sg("num_queue_reqs")),
        Rule(sig.KV_CACHE_USAGE, _sg("token_usage")),
        Rule(sig.KV_CACHE_CAPACITY, _sg("max_total_num_tokens")),
        # Token-weighted prefix-cache hit rate from counters; SGLang's own `cache_hit_rate` gauge is
        # overwritten per batch and is not used. Queries are emitted only next to hits, so a
        # release without `cached_tokens` shows no hit rate rather than a false 0.
        Rule(sig.PREFIX_CACHE_QUERIES, ("sglang:prompt_tokens",), requires="sglang:cached_tokens"),
        Rule(sig.PREFIX_CACHE_QUERIES, ("sglang_prompt_tokens",), requires="sglang_cached_tokens"),
        Rule(sig.PREFIX_CACHE_HITS, _sg("cached_tokens")),
        Rule(sig.PROMPT_TOKENS, _sg("prompt_tokens")),
        Rule(sig.GENERATION_TOKENS, _sg("generation_tokens")),
        Rule(sig.TTFT, _sg("time_to_first_token_seconds")),
        Rule(sig.INTER_TOKEN, _sg("inter_token_latency_seconds") + _sg("time_per_output_token_seconds")),
        Rule(sig.E2E, _sg("e2e_request_latency_seconds")),
        Rule(sig.QUEUE_TIME, _sg("queue_time_seconds")),
    ),
)


# -- Hugging Face TGI -----------------------------------------------------------------------------
TGI = EngineSpec(
    name="tgi",
    model_labels=(),  # TGI serves one model and does not label it; set `model` in the target config
    dp_label=None,
    rules=(
        Rule(sig.REQUESTS_RUNNING, ("tgi_batch_current_size",)),
        Rule(sig.REQUESTS_WAITING, ("tgi_queue_size",)),
        # Per-request token-count histograms: their _sum is the running token total, a counter.
        Rule(sig.PROMPT_TOKENS, ("tgi_request_input_length",), take="_sum"),
        Rule(sig.GENERATION_TOKENS, ("tgi_request_generated_tokens",), take="_sum"),
        Rule(sig.REQUESTS_FINISHED, ("tgi_request_success",), labels=(("finish_reason", "success"),)),
        Rule(sig.REQUESTS_FINISHED, ("tgi_request_failure",), labels=(("finish_reason", "error"),)),
        Rule(sig.E2E, ("tgi_request_duration",)),
        Rule(sig.QUEUE_TIME, ("tgi_request_queue_duration",)),
        # TGI observes each request's mean time per token, not every gap between tokens.
        Rule(sig.INTER_TOKEN, ("tgi_request_mean_time_per_token_duration",)),
    ),
)


# -- Triton Inference Server with the TensorRT-LLM backend ----------------------------------------
def _triton_capacity(families: Families) -> list[Derived]:
    """KV capacity in tokens: max blocks x tokens per block, per Triton model."""
    blocks: dict[tuple, tuple[dict, dict]] = {}
    for sample in families.get("nv_trt_llm_kv_cache_block_metrics", ()):
        kind = sample.labels.get("kv_cache_block_type")
        if kind in ("max", "tokens_per"):
            key = (sample.labels.get("model"), sample.labels.get("version"))
            entry = blocks.setdefault(key, ({}, {}))
            entry[0][kind] = sample.value
            entry[1].update(sample.labels)
    return [(sig.KV_CACHE_CAPACITY, labels, float(values["max"] * values["tokens_per"]))
            for values, labels in blocks.values() if "max" in values and "tokens_per" in values]


_TRT_REQUESTS = "nv_trt_llm_request_metrics"
TRITON = EngineSpec(
    name="triton",
    model_labels=("model",),
    dp_label=None,
    rules=(
        Rule(sig.REQUESTS_RUNNING, (_TRT_REQUESTS,), where=(("request_type", "active"),)),
        Rule(sig.REQUESTS_WAITING, (_TRT_REQUESTS,), where=(("request_type", "waiting"),)),
        Rule(sig.KV_CACHE_USAGE, ("nv_trt_llm_kv_cache_block_metrics",),
             where=(("kv_cache_block_type", "fraction"),)),
        Rule(sig.REQUESTS_FINISHED, ("nv_inference_request_success",), labels=(("finish_reason", "success"),)),
        Rule(sig.REQUESTS_FINISHED, ("nv_inference_request_failure",), labels=(("finish_reason", "error"),)),
        # Triton's latency histograms are in milliseconds (enabled with --metrics-config histogram_latencies=true).
        Rule(sig.TTFT, ("nv_inference_first_response_histogram_ms",), scale=0.001),
    ),
    derive=_triton_capacity,
    derive_sources=("nv_trt_llm_kv_cache_block_metrics",),
)


# -- trtllm-serve (TensorRT-LLM's OpenAI server); Dynamo re-exports it as `trtllm:` ------------------
def _trt(name: str) -> tuple[str, str]:
    return ("trtllm_" + name, "trtllm:" + name)


TRTLLM = EngineSpec(
    name="trtllm",
    model_labels=("model_name",),
    dp_label=None,
    rules=(
        Rule(sig.REQUESTS_FINISHED, _trt("request_success"), relabel=(("finished_reason", "finish_reason"),)),
        Rule(sig.TTFT, _trt("time_to_first_token_seconds")),
        Rule(sig.INTER_TOKEN, _trt("time_per_output_token_seconds")),
        Rule(sig.E2E, _trt("e2e_request_latency_seconds")),
        Rule(sig.QUEUE_TIME, _trt("request_queue_time_seconds")),
    ),
)

ENGINES: dict[str, EngineSpec] = {spec.name: spec for spec in (VLLM, SGLANG, TGI, TRITON, TRTLLM)}
