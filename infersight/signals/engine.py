"""Engine signals: vLLM, SGLang, TGI, TensorRT-LLM ... normalized by ``collectors/engine``.

Histograms keep the engine's own buckets (the collector passes them through); the buckets
declared here are vLLM's and serve as the nominal set.
"""

from infersight.signals.catalog import Kind, declare

PRODUCER = "collectors.engine"
# instance: the engine endpoint host:port, the address the gateway routes to (DESIGN 10), the same
# value the request metrics carry; served for Prometheus `honor_labels: true`, so it is exactly the
# `instance` label a direct scrape of the engine would give. dp_rank: vLLM's data-parallel rank
# (its own `engine` label).
ENGINE_LABELS = ("instance", "engine", "model", "pool", "node", "gpu", "dp_rank")

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
                            "Requests the engine finished, by finish reason (stop, length, abort, error; "
                            "success where the engine does not tell stop from length).",
                            PRODUCER)
TTFT = declare("llm_engine_time_to_first_token_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
               "Time to first token as the engine measures it.", PRODUCER, LATENCY_BUCKETS)
INTER_TOKEN = declare("llm_engine_inter_token_latency_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                      "Time between output tokens as the engine measures it.", PRODUCER, TOKEN_LATENCY_BUCKETS)
E2E = declare("llm_engine_e2e_request_latency_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
              "Request latency inside the engine, arrival to last token.", PRODUCER, REQUEST_LATENCY_BUCKETS)
QUEUE_TIME = declare("llm_engine_queue_time_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                     "Time requests waited in the engine's queue.", PRODUCER, REQUEST_LATENCY_BUCKETS)
PREFILL_TIME = declare("llm_engine_prefill_time_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                       "Time requests spent in prefill.", PRODUCER, REQUEST_LATENCY_BUCKETS)
DECODE_TIME = declare("llm_engine_decode_time_seconds", Kind.HISTOGRAM, "seconds", ENGINE_LABELS,
                      "Time requests spent in decode.", PRODUCER, REQUEST_LATENCY_BUCKETS)
GPU_INFO = declare("llm_engine_gpu_info", Kind.GAUGE, "", ("instance", "engine", "model", "pool", "node", "gpu"),
                   "1 for each GPU an engine instance runs on (its configured node and gpu list), while the "
                   "target is up: joins gpu_* series (on node, gpu) with engine and request series (on "
                   "instance), e.g. "
                   "llm_engine_gpu_info * on (node, gpu) group_left rate(gpu_energy_joules_total[5m]).",
                   PRODUCER)
