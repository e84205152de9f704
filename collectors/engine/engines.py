"""Per-engine mapping tables: vLLM, SGLang, TGI, Triton (TensorRT-LLM backend) and trtllm-serve.

Engine metric names appear only here. Where an engine renamed a metric, the rule lists the
current name first and the deprecated ones after it (see :class:`rules.Rule`).
"""

from __future__ import annotations

from infersight.signals import engine as sig

from .rules import Derived, EngineSpec, Families, Rule


# A `where` value set that matches any label value but the empty one (the label must be there).
class _AnyValue(tuple):
    def __contains__(self, value: object) -> bool:
        return bool(value)


_ANY = _AnyValue()


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


def _vllm_sleep(families: Families) -> list[Derived]:
    """Sleep level from ``engine_sleep_state{sleep_state}`` (awake, weights_offloaded, discard_all = 0/1)."""
    states: dict[tuple, tuple[dict, dict[str, float]]] = {}
    for sample in families.get("vllm:engine_sleep_state", ()):
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "sleep_state"))
        entry = states.setdefault(key, (sample.labels, {}))
        entry[1][sample.labels.get("sleep_state", "")] = sample.value
    out: list[Derived] = []
    for labels, values in states.values():
        if values.get("discard_all") == 1:
            level = sig.SleepLevel.DISCARD_ALL
        elif values.get("weights_offloaded") == 1:
            level = sig.SleepLevel.WEIGHTS_OFFLOADED
        elif values.get("awake", 1) == 0:
            level = sig.SleepLevel.WEIGHTS_OFFLOADED  # asleep at a level this release does not name
        else:
            level = sig.SleepLevel.AWAKE
        out.append((sig.SLEEP_LEVEL, labels, float(level)))
    return out


def _vllm_derive(families: Families) -> list[Derived]:
    return _vllm_capacity(families) + _vllm_sleep(families)


# vLLM 0.32/0.33: vllm/v1/metrics/loggers.py (PrometheusStatLogger); NIXL KV transfers:
# vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py.
VLLM = EngineSpec(
    name="vllm",
    model_labels=("model_name",),
    dp_label="engine",  # vLLM's `engine` label is the data-parallel rank
    rules=(
        Rule(sig.REQUESTS_RUNNING, ("vllm:num_requests_running",)),
        Rule(sig.REQUESTS_WAITING, ("vllm:num_requests_waiting",)),
        Rule(sig.REQUESTS_WAITING_BY_REASON, ("vllm:num_requests_waiting_by_reason",), relabel=(("reason", "reason"),)),
        Rule(sig.KV_CACHE_USAGE, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),  # both 0..1
        Rule(sig.PREFIX_CACHE_QUERIES, ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")),
        Rule(sig.PREFIX_CACHE_HITS, ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")),
        Rule(sig.EXTERNAL_PREFIX_CACHE_QUERIES, ("vllm:external_prefix_cache_queries",)),
        Rule(sig.EXTERNAL_PREFIX_CACHE_HITS, ("vllm:external_prefix_cache_hits",)),
        Rule(sig.PROMPT_CACHED_TOKENS, ("vllm:prompt_tokens_cached_by_source",), relabel=(("source", "tier"),)),
        # A release with the total but not the split: one tier, "all".
        Rule(sig.PROMPT_CACHED_TOKENS, ("vllm:prompt_tokens_cached",), labels=(("tier", "all"),),
             unless_family="vllm:prompt_tokens_cached_by_source"),
        Rule(sig.PROMPT_TOKENS_BY_SOURCE, ("vllm:prompt_tokens_by_source",), relabel=(("source", "source"),)),
        Rule(sig.PREEMPTIONS, ("vllm:num_preemptions",)),
        Rule(sig.PROMPT_TOKENS, ("vllm:prompt_tokens",)),
        Rule(sig.GENERATION_TOKENS, ("vllm:generation_tokens",)),
        Rule(sig.REQUESTS_FINISHED, ("vllm:request_success",), relabel=(("finished_reason", "finish_reason"),)),
        Rule(sig.REJECTIONS, ("vllm:admission_rejections",), relabel=(("reason", "reason"),)),
        Rule(sig.TTFT, ("vllm:time_to_first_token_seconds",)),
        # Before 0.11 the per-gap histogram was named time_per_output_token_seconds.
        Rule(sig.INTER_TOKEN, ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
        Rule(sig.TPOT, ("vllm:request_time_per_output_token_seconds",)),
        Rule(sig.E2E, ("vllm:e2e_request_latency_seconds",)),
        Rule(sig.QUEUE_TIME, ("vllm:request_queue_time_seconds",)),
        Rule(sig.PREFILL_TIME, ("vllm:request_prefill_time_seconds",)),
        Rule(sig.DECODE_TIME, ("vllm:request_decode_time_seconds",)),
        Rule(sig.ITERATION_TOKENS, ("vllm:iteration_tokens_total",)),
        # Disaggregated serving: on KV consumers (decode side, and kv_both instances).
        Rule(sig.KV_TRANSFER_QUEUE, ("vllm:num_requests_kv_fetch_by_stage",), relabel=(("stage", "stage"),)),
        Rule(sig.KV_TRANSFER_DURATION, ("vllm:nixl_xfer_time_seconds",)),
    ),
    derive=_vllm_derive,
    derive_sources=("vllm:cache_config_info", "vllm:engine_sleep_state"),
    derives=(sig.KV_CACHE_CAPACITY, sig.SLEEP_LEVEL),
)


# -- SGLang: python/sglang/srt/observability/metrics_collector.py (Scheduler and Tokenizer collectors),
# scheduler_metrics_mixin.py (labels: engine_type prefill/decode/unified), req_time_stats.py (stages).
# Current releases write only `sglang:`; some older ones wrote `sglang_`, kept as fallbacks.
def _sg(name: str) -> tuple[str, str]:
    return ("sglang:" + name, "sglang_" + name)


def _sglang_capacity(families: Families) -> list[Derived]:
    """KV capacity from ``cache_config_info{page_size, num_pages}`` when max_total_num_tokens is absent."""
    if any(name in families for name in _sg("max_total_num_tokens")):
        return []
    out: list[Derived] = []
    for sample in families.get("sglang:cache_config_info", ()):
        pages, page_size = _int_label(sample.labels, "num_pages"), _int_label(sample.labels, "page_size")
        if pages is not None and page_size is not None:
            out.append((sig.KV_CACHE_CAPACITY, sample.labels, float(pages * page_size)))
    return out


_SG_STAGE = "sglang:per_stage_req_latency_seconds"
_SG_KV_QUEUES = (("num_prefill_prealloc_queue_reqs", "prefill_bootstrap"),
                 ("num_prefill_inflight_queue_reqs", "prefill_inflight"),
                 ("num_decode_prealloc_queue_reqs", "decode_prealloc"),
                 ("num_decode_transfer_queue_reqs", "decode_transfer"))

SGLANG = EngineSpec(
    name="sglang",
    model_labels=("model_name",),
    dp_label="dp_rank",
    role_label="engine_type",
    role_values=(("prefill", sig.EngineRole.PREFILL.value), ("decode", sig.EngineRole.DECODE.value),
                 ("unified", sig.EngineRole.MIXED.value)),
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
        # cached_tokens carries cache_source (device, host, storage_<backend>, or total): summed here ...
        Rule(sig.PREFIX_CACHE_HITS, _sg("cached_tokens")),
        # ... and split by tier here ("total" is SGLang's own word for "not split").
        Rule(sig.PROMPT_CACHED_TOKENS, ("sglang:cached_tokens",), relabel=(("cache_source", "tier"),),
             rename=(("total", "all"),), where=(("cache_source", _ANY),)),
        Rule(sig.PROMPT_TOKENS, _sg("prompt_tokens")),
        Rule(sig.GENERATION_TOKENS, _sg("generation_tokens")),
        Rule(sig.PROMPT_TOKENS_BY_SOURCE, ("sglang:realtime_tokens",), relabel=(("mode", "source"),),
             where=(("mode", ("prefill_compute", "prefill_cache")),),
             rename=(("prefill_compute", "local_compute"), ("prefill_cache", "local_cache_hit"))),
        # Retracted requests are SGLang's preemptions (KV cache pressure sends them back to the queue).
        Rule(sig.PREEMPTIONS, ("sglang:num_retracted_requests",)),
        Rule(sig.REQUESTS_FINISHED, ("sglang:num_aborted_requests",), labels=(("finish_reason", "abort"),)),
        Rule(sig.TTFT, _sg("time_to_first_token_seconds")),
        # Older releases named the per-step inter-token histogram time_per_output_token_seconds.
        Rule(sig.INTER_TOKEN, _sg("inter_token_latency_seconds") + _sg("time_per_output_token_seconds")),
        Rule(sig.E2E, _sg("e2e_request_latency_seconds")),
        Rule(sig.QUEUE_TIME, _sg("queue_time_seconds")),
        Rule(sig.STAGE_LATENCY, (_SG_STAGE,), relabel=(("stage", "stage"),)),
        Rule(sig.KV_TRANSFER_DURATION, (_SG_STAGE,), where=(("stage", "prefill_transfer_kv_cache"),)),
        *(Rule(sig.KV_TRANSFER_QUEUE, ("sglang:" + name,), labels=(("stage", stage),))
          for name, stage in _SG_KV_QUEUES),
    ),
    derive=_sglang_capacity,
    derive_sources=("sglang:cache_config_info",),
    derives=(sig.KV_CACHE_CAPACITY,),
)


# -- Hugging Face TGI: router/src (metrics::counter! / histogram! / gauge! calls; backends/v3/src/queue.rs) --
# tgi_request_failure's `err`: overloaded (no permit: a rejection), dropped and cancelled (the client
# left), validation, generation and others (errors).
_TGI_CLIENT_GONE = ("dropped", "cancelled")
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
        Rule(sig.REQUESTS_FINISHED, ("tgi_request_failure",), labels=(("finish_reason", "abort"),),
             where=(("err", _TGI_CLIENT_GONE),)),
        Rule(sig.REQUESTS_FINISHED, ("tgi_request_failure",), labels=(("finish_reason", "error"),),
             unless=(("err", ("overloaded", *_TGI_CLIENT_GONE)),)),
        Rule(sig.REJECTIONS, ("tgi_request_failure",), labels=(("reason", "overloaded"),),
             where=(("err", "overloaded"),)),
        Rule(sig.E2E, ("tgi_request_duration",)),
        Rule(sig.QUEUE_TIME, ("tgi_request_queue_duration",)),
        # TGI observes each request's mean time per token: a per-request TPOT, not token gaps.
        Rule(sig.TPOT, ("tgi_request_mean_time_per_token_duration",)),
    ),
)


# -- Triton Inference Server with the TensorRT-LLM backend (tensorrtllm_backend inflight_batcher_llm) --------
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
    derives=(sig.KV_CACHE_CAPACITY,),
)


# -- trtllm-serve: tensorrt_llm/metrics/collector.py (MetricsCollector, prefix trtllm_); Dynamo re-exports
# it as `trtllm:`. Its `engine_type` label names the engine ("trtllm"), not a prefill/decode role.
def _trt(name: str) -> tuple[str, str]:
    return ("trtllm_" + name, "trtllm:" + name)


def _trtllm_capacity(families: Families) -> list[Derived]:
    """KV capacity in tokens: kv_cache_max_blocks x kv_cache_tokens_per_block."""
    out: list[Derived] = []
    for prefix in ("trtllm_", "trtllm:"):
        per_block = {_key(s.labels): s.value for s in families.get(prefix + "kv_cache_tokens_per_block", ())}
        for sample in families.get(prefix + "kv_cache_max_blocks", ()):
            tokens = per_block.get(_key(sample.labels))
            if tokens is not None:
                out.append((sig.KV_CACHE_CAPACITY, sample.labels, float(sample.value * tokens)))
        if out:
            return out
    return out


def _key(labels: dict[str, str]) -> tuple:
    return tuple(sorted(labels.items()))


_TRT_REJECTED = (("429", "rate_limited"), ("503", "overloaded"))
TRTLLM = EngineSpec(
    name="trtllm",
    model_labels=("model_name",),
    dp_label=None,
    rules=(
        Rule(sig.REQUESTS_RUNNING, _trt("num_requests_running")),
        Rule(sig.REQUESTS_WAITING, _trt("num_requests_waiting")),
        Rule(sig.KV_CACHE_USAGE, _trt("kv_cache_utilization")),  # used / max blocks, 0..1
        Rule(sig.PROMPT_TOKENS, _trt("prompt_tokens")),
        Rule(sig.GENERATION_TOKENS, _trt("generation_tokens")),
        Rule(sig.PREFIX_CACHE_QUERIES, ("trtllm_prompt_tokens",), requires="trtllm_prompt_cached_tokens"),
        Rule(sig.PREFIX_CACHE_QUERIES, ("trtllm:prompt_tokens",), requires="trtllm:prompt_cached_tokens"),
        Rule(sig.PREFIX_CACHE_HITS, _trt("prompt_cached_tokens")),
        Rule(sig.REQUESTS_FINISHED, _trt("request_success"), relabel=(("finished_reason", "finish_reason"),)),
        # Errors by HTTP status: 429 and 503 turn the request away (rejections), the rest fail it.
        Rule(sig.REQUESTS_FINISHED, _trt("request_error"), labels=(("finish_reason", "error"),),
             unless=(("http_code", tuple(code for code, _ in _TRT_REJECTED)),)),
        *(Rule(sig.REJECTIONS, _trt("request_error"), labels=(("reason", reason),), where=(("http_code", code),))
          for code, reason in _TRT_REJECTED),
        Rule(sig.TTFT, _trt("time_to_first_token_seconds")),
        # Observed once per request (decode time / generated tokens): a per-request TPOT, not token gaps.
        Rule(sig.TPOT, _trt("time_per_output_token_seconds")),
        Rule(sig.E2E, _trt("e2e_request_latency_seconds")),
        Rule(sig.QUEUE_TIME, _trt("request_queue_time_seconds")),
        Rule(sig.PREFILL_TIME, _trt("request_prefill_time_seconds")),
        Rule(sig.DECODE_TIME, _trt("request_decode_time_seconds")),
    ),
    derive=_trtllm_capacity,
    derive_sources=tuple(p + n for p in ("trtllm_", "trtllm:") for n in ("kv_cache_max_blocks",
                                                                       "kv_cache_tokens_per_block")),
    derives=(sig.KV_CACHE_CAPACITY,),
)


# -- llama.cpp server: tools/server/server-context.cpp (the /metrics handler; `llamacpp:` prefix, no labels,
# one model per server, so set `model` in the target config). kv_cache_usage_ratio is from older builds.
LLAMACPP = EngineSpec(
    name="llamacpp",
    model_labels=(),
    dp_label=None,
    rules=(
        Rule(sig.REQUESTS_RUNNING, ("llamacpp:requests_processing",)),
        Rule(sig.REQUESTS_WAITING, ("llamacpp:requests_deferred",)),
        Rule(sig.KV_CACHE_USAGE, ("llamacpp:kv_cache_usage_ratio",)),
        Rule(sig.PROMPT_TOKENS, ("llamacpp:prompt_tokens",)),
        Rule(sig.GENERATION_TOKENS, ("llamacpp:tokens_predicted",)),
    ),
)

ENGINES: dict[str, EngineSpec] = {spec.name: spec for spec in (VLLM, SGLANG, TGI, TRITON, TRTLLM, LLAMACPP)}
