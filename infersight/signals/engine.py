"""Engine signals: vLLM, SGLang, TGI, TensorRT-LLM ... normalized by ``collectors/engine``.

Histograms keep the engine's own buckets (the collector passes them through); the buckets
declared here are vLLM's and serve as the nominal set.
"""

import enum

from infersight.signals.catalog import Kind, declare

PRODUCER = "collectors.engine"
# instance: the engine endpoint host:port, the address the gateway routes to (DESIGN 10), the same
# value the request metrics carry; served for Prometheus `honor_labels: true`, so it is exactly the
# `instance` label a direct scrape of the engine would give. dp_rank: vLLM's data-parallel rank
# (its own `engine` label). role: the instance's part in disaggregated serving (EngineRole).
ENGINE_LABELS = ("instance", "engine", "model", "pool", "node", "gpu", "dp_rank", "role")


class EngineRole(enum.StrEnum):
    """An instance's part in prefill/decode disaggregation (the `role` label).

    From the engine where it says so (SGLang's `engine_type`), else from the target config, else
    ``mixed``: an instance that does both, as every non-disaggregated engine does.
    """

    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


class SleepLevel(enum.IntEnum):
    """vLLM's sleep mode, as the value of llm_engine_sleep_level."""

    AWAKE = 0
    WEIGHTS_OFFLOADED = 1  # sleep level 1: weights in host memory, KV cache discarded
    DISCARD_ALL = 2  # sleep level 2: weights and KV cache discarded


LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                         7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

UP = declare("llm_engine_up", Kind.GAUGE, "", ("instance", "engine"),
             "1 if the last scrape of the engine target succeeded, else 0 (its series are then absent).",
             PRODUCER)
SCRAPE_DURATION = declare("llm_engine_scrape_duration_seconds", Kind.GAUGE, "seconds", ("instance", "engine"),
                          "Duration of the last scrape of the engine target.", PRODUCER)
# Scrape-error reasons; each target exposes all of them at 0 from its first cycle (DESIGN 8).
SCRAPE_ERROR_REASONS = ("down", "timeout", "malformed", "too_large", "http_status", "unrecognized")
SCRAPE_ERRORS = declare("infersight_engine_scrape_errors_total", Kind.COUNTER, "", ("instance", "reason"),
                        "Failed engine scrapes by reason (down, timeout, malformed, too_large, http_status, "
                        "unrecognized: no series of a known engine).", PRODUCER)
TARGETS = declare("infersight_engine_targets", Kind.GAUGE, "", (),
                  "Engine targets the collector scrapes (config, command line and file_sd together).", PRODUCER)
COLLECTION_DURATION = declare("infersight_engine_collection_duration_seconds", Kind.GAUGE, "seconds", (),
                              "Duration of the last collection cycle over all engine targets.", PRODUCER)
FILE_SD_RELOADS = declare("infersight_engine_file_sd_reloads_total", Kind.COUNTER, "", ("result",),
                          "Reloads of the file_sd target file by result (success, error: the last good "
                          "targets are kept).", PRODUCER)
REQUESTS_RUNNING = declare("llm_requests_running", Kind.GAUGE, "", ENGINE_LABELS,
                           "Requests in the engine's running batch.", PRODUCER)
REQUESTS_WAITING = declare("llm_requests_waiting", Kind.GAUGE, "", ENGINE_LABELS,
                           "Requests waiting in the engine's queue (instance queue depth).", PRODUCER)
KV_CACHE_USAGE = declare("llm_kv_cache_usage_ratio", Kind.GAUGE, "ratio", ENGINE_LABELS,
                         "KV cache usage, 0..1.", PRODUCER)
KV_CACHE_CAPACITY = declare("llm_kv_cache_capacity_tokens", Kind.GAUGE, "tokens", ENGINE_LABELS,
                            "KV cache capacity in tokens (vLLM: num_gpu_blocks x block_size).", PRODUCER)
PREFIX_CACHE_QUERIES = declare("llm_prefix_cache_queries_tokens_total", Kind.COUNTER, "tokens", ENGINE_LABELS,
                               "Prompt tokens looked up in the prefix cache.", PRODUCER)
PREFIX_CACHE_HITS = declare("llm_prefix_cache_hits_tokens_total", Kind.COUNTER, "tokens", ENGINE_LABELS,
                            "Prompt tokens found in the prefix cache.", PRODUCER)
PREEMPTIONS = declare("llm_preemptions_total", Kind.COUNTER, "", ENGINE_LABELS,
                      "Requests preempted by the engine (KV cache pressure).", PRODUCER)
PROMPT_TOKENS = declare("llm_prompt_tokens_total", Kind.COUNTER, "tokens", ENGINE_LABELS,
                        "Prompt (prefill) tokens processed.", PRODUCER)
GENERATION_TOKENS = declare("llm_generation_tokens_total", Kind.COUNTER, "tokens", ENGINE_LABELS,
                            "Tokens generated (decode).", PRODUCER)
REQUESTS_FINISHED = declare("llm_engine_requests_finished_total", Kind.COUNTER, "",
                            (*ENGINE_LABELS, "finish_reason"),
                            "Requests the engine finished, by finish reason (stop, length, abort, error, "
                            "repetition; success where the engine does not tell stop from length).",
                            PRODUCER)
TTFT = declare("llm_engine_time_to_first_token_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
               "Time to first token as the engine measures it: from the request's arrival at the engine "
               "(its queue and prefill; vLLM: vllm/v1/metrics/stats.py, first token time - arrival_time), so "
               "a gateway's queue is not in it. The instance's own TTFT; the breaker judges it.",
               PRODUCER, LATENCY_BUCKETS)
INTER_TOKEN = declare("llm_engine_inter_token_latency_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                      "Time between consecutive output tokens as the engine measures it (one observation "
                      "per token gap).", PRODUCER, TOKEN_LATENCY_BUCKETS)
TPOT = declare("llm_engine_time_per_output_token_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
               "Per request: decode time / (output tokens - 1), one observation per finished request "
               "(vLLM request_time_per_output_token, trtllm-serve and TGI's per-request means).",
               PRODUCER, TOKEN_LATENCY_BUCKETS)
E2E = declare("llm_engine_e2e_request_latency_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
              "Request latency inside the engine, arrival to last token.", PRODUCER, REQUEST_LATENCY_BUCKETS)
QUEUE_TIME = declare("llm_engine_queue_time_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                     "Time requests waited in the engine's queue.", PRODUCER, REQUEST_LATENCY_BUCKETS)
PREFILL_TIME = declare("llm_engine_prefill_time_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                       "Time requests spent in prefill.", PRODUCER, REQUEST_LATENCY_BUCKETS)
DECODE_TIME = declare("llm_engine_decode_time_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                      "Time requests spent in decode.", PRODUCER, REQUEST_LATENCY_BUCKETS)
REJECTIONS = declare("llm_engine_rejections_total", Kind.COUNTER, "", (*ENGINE_LABELS, "reason"),
                     "Requests the engine turned away at admission, by reason (vLLM: max_num_queued_reqs, "
                     "max_num_queued_tokens; TGI and trtllm-serve: overloaded, rate_limited).", PRODUCER)
REQUESTS_WAITING_BY_REASON = declare("llm_requests_waiting_by_reason", Kind.GAUGE, "", (*ENGINE_LABELS, "reason"),
                                     "Waiting requests by why they wait (vLLM: capacity, deferred); the "
                                     "reasons sum to llm_requests_waiting.", PRODUCER)
PROMPT_TOKENS_BY_SOURCE = declare("llm_prompt_tokens_by_source_total", Kind.COUNTER, "tokens",
                                  (*ENGINE_LABELS, "source"),
                                  "Prompt tokens by where their KV came from: local_compute (prefilled here), "
                                  "local_cache_hit (this instance's prefix cache), external_kv_transfer (another "
                                  "instance or a KV store).", PRODUCER)
PROMPT_CACHED_TOKENS = declare("llm_prompt_cached_tokens_total", Kind.COUNTER, "tokens", (*ENGINE_LABELS, "tier"),
                               "Prompt tokens served from a cache, by the tier that held them (device, host, disk, "
                               "p2p, storage_<backend>, external_unspecified; all: the engine does not split).",
                               PRODUCER)
EXTERNAL_PREFIX_CACHE_QUERIES = declare("llm_external_prefix_cache_queries_tokens_total", Kind.COUNTER, "tokens",
                                        ENGINE_LABELS, "Prompt tokens looked up in an external (cross-instance) "
                                        "prefix cache through a KV connector.", PRODUCER)
EXTERNAL_PREFIX_CACHE_HITS = declare("llm_external_prefix_cache_hits_tokens_total", Kind.COUNTER, "tokens",
                                     ENGINE_LABELS, "Prompt tokens found in an external (cross-instance) prefix "
                                     "cache through a KV connector.", PRODUCER)
SLEEP_LEVEL = declare("llm_engine_sleep_level", Kind.GAUGE, "", ENGINE_LABELS,
                      "0 while the engine is awake; 1 or 2 while it sleeps (vLLM sleep mode level 1: weights "
                      "offloaded, 2: discarded). A sleeping engine still answers /metrics and serves nothing.",
                      PRODUCER)
ITERATION_TOKENS = declare("llm_engine_iteration_tokens", Kind.HISTOGRAM, "tokens", ENGINE_LABELS,
                           "Tokens (prefill and decode) per engine step.", PRODUCER,
                           (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384))
STAGE_LATENCY = declare("llm_engine_stage_latency_seconds", Kind.HISTOGRAM, "seconds", (*ENGINE_LABELS, "stage"),
                        "Time requests spent in each engine stage (SGLang per-stage latency: request_process, "
                        "prefill_forward, prefill_bootstrap, prefill_transfer_kv_cache, decode_waiting, ...).",
                        PRODUCER, LATENCY_BUCKETS)
KV_TRANSFER_QUEUE = declare("llm_kv_transfer_queue_requests", Kind.GAUGE, "", (*ENGINE_LABELS, "stage"),
                            "Requests queued for a KV transfer between prefill and decode instances, by stage "
                            "(SGLang: prefill_bootstrap, prefill_inflight, decode_prealloc, decode_transfer; vLLM: "
                            "waiting_to_start, in_progress, completed_waiting).", PRODUCER)
KV_TRANSFER_DURATION = declare("llm_kv_transfer_duration_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                               "Duration of KV cache transfers between instances (vLLM NIXL transfers; SGLang's "
                               "prefill_transfer_kv_cache stage).", PRODUCER, LATENCY_BUCKETS)
GPU_INFO = declare("llm_engine_gpu_info", Kind.GAUGE, "", ("instance", "engine", "model", "pool", "node", "gpu"),
                   "1 for each GPU an engine instance runs on (its configured node and gpu list), while the "
                   "target is up: joins gpu_* series (on node, gpu) with engine and request series (on "
                   "instance), e.g. "
                   "llm_engine_gpu_info * on (node, gpu) group_left rate(gpu_energy_joules_total[5m]).",
                   PRODUCER)
