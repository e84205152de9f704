"""Span attribute keys and span names: the trace-side vocabulary, declared once.

The instrumentation writes these, the pipeline's schema promotes the hot ones to columns, and the
query library reads them. Values reach ClickHouse as text, as the OTel Collector writes them
(strings as they are, numbers in decimal, booleans true/false, arrays as JSON).

A *request span* is the one span per request per service (gateway, proxy or engine) that carries
``llm.request.outcome``; rollups and post-incident queries select request spans by that key.
"""

import enum

# OpenTelemetry GenAI semantic conventions.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"  # "chat", "text_completion"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"  # "vllm", "sglang", "openai" ...
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"  # string array
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"  # bool: the request asked for a streamed answer
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds, on the CLIENT span
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"  # part of input_tokens
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"  # part of output_tokens

# Read, never written, by infersight: other producers' names for facts we name above. The schema's
# materialized columns fall back to them, so an engine that traces itself fills the same columns.
# vLLM's own request span (``--otlp-traces-endpoint``; vllm-project/vllm ``vllm/tracing/utils.py``
# SpanAttributes, set in ``vllm/v1/engine/output_processor.py`` do_tracing, 0.32): the GenAI names of
# before input/output tokens, and latencies in seconds as floats (ours are milliseconds).
VLLM_SPAN_NAME = "llm_request"
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"  # deprecated GenAI name of input_tokens
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"  # deprecated GenAI name of output_tokens
GEN_AI_REQUEST_ID = "gen_ai.request.id"  # vLLM's request id ("chatcmpl-<X-Request-Id>")
GEN_AI_LATENCY_TTFT_S = "gen_ai.latency.time_to_first_token"  # arrival to first token
GEN_AI_LATENCY_E2E_S = "gen_ai.latency.e2e"
GEN_AI_LATENCY_QUEUE_S = "gen_ai.latency.time_in_queue"  # queued to first scheduled
GEN_AI_LATENCY_PREFILL_S = "gen_ai.latency.time_in_model_prefill"
GEN_AI_LATENCY_DECODE_S = "gen_ai.latency.time_in_model_decode"  # first token to last token

# Request outcome and timing (milliseconds as floats; Duration of the span is the e2e time).
REQUEST_OUTCOME = "llm.request.outcome"  # an Outcome value
REQUEST_ID = "llm.request.id"  # the gateway's request id (also carried as the W3C trace id)
TTFT_MS = "llm.ttft_ms"
TPOT_MS = "llm.tpot_ms"
QUEUE_MS = "llm.queue_ms"
CACHED_INPUT_TOKENS = "llm.usage.cached_input_tokens"  # kept next to the GenAI name: the schema's column reads it
TIMEOUT_KIND = "llm.timeout.kind"  # a TimeoutKind value
ERROR_TYPE = "error.type"  # OTel general convention


class Outcome(enum.StrEnum):
    """How a request ended: the values of ``llm.request.outcome``."""

    SUCCESS = "success"
    ERROR = "error"
    CANCELLED = "cancelled"  # the client gave up; not counted as an error
    TIMEOUT = "timeout"
    REJECTED = "rejected"  # refused before it started (overload, 503)


class TimeoutKind(enum.StrEnum):
    """Which deadline a timed-out request missed: the values of ``llm.timeout.kind``."""

    TTFT = "ttft"  # no first token in time
    TOTAL = "total"  # the whole request took too long
    IDLE = "idle"  # the stream stalled between two tokens


class UpstreamError(enum.StrEnum):
    """Why an upstream attempt failed: ``error.type`` on its ``upstream`` span (the proxy's codes too)."""

    UNREACHABLE = "upstream_unreachable"  # refused, or the connection never came up
    DISCONNECTED = "upstream_disconnected"  # the response broke off (the engine died mid-request)


class SamplingReason(enum.StrEnum):
    """Why a request's token timeline was kept (or not): the values of ``llm.sampling.reason``."""

    SLOW_TTFT = "slow_ttft"  # TTFT above its model's rolling quantile
    SLOW_E2E = "slow_e2e"
    ERROR = "error"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    RANDOM = "random"  # the small random share
    NOT_KEPT = "not_kept"


# Where the request ran and how it was routed. The engine instance is its endpoint host:port
# (DESIGN 10): ``llm.instance`` holds it as the metrics' ``instance`` label writes it, and
# ``server.address``/``server.port`` (OTel general and GenAI conventions) split it.
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
INSTANCE = "llm.instance"
POOL = "llm.pool"
ROUTING_STRATEGY = "llm.routing.strategy"  # round_robin, least_conn, equal_cost, cache_aware, prefix_affinity
ROUTING_CANDIDATES = "llm.routing.candidates"  # JSON: [{"instance":..,"score":..,"est_finish_ms":..,"cache_ratio":..}]
ROUTING_ESTIMATED_FINISH_MS = "llm.routing.estimated_finish_ms"
ROUTING_PREFIX_CACHE_RATIO = "llm.routing.prefix_cache_ratio"
RETRY_ATTEMPT = "llm.retry.attempt"  # 0 for the first attempt
RETRY_BACKOFF_MS = "llm.retry.backoff_ms"

# Token timeline (kept by tail sampling) and its summary (always present on request spans).
TOKEN_OFFSETS_US = "llm.token.offsets_us"  # JSON array text (or an int array): token offsets from request start, us
TOKEN_COUNT = "llm.token.count"  # tokens in the timeline (the kept ones when truncated)
TOKEN_TRUNCATED = "llm.token.truncated"  # true when the stream outgrew the buffer: only the last tokens kept
TOKEN_GAP_MEAN_MS = "llm.token.gap_mean_ms"
TOKEN_GAP_MAX_MS = "llm.token.gap_max_ms"
TOKEN_STALL_INDEX = "llm.token.stall_index"  # index of the token after the longest gap
TOKEN_STALL_OFFSET_MS = "llm.token.stall_offset_ms"  # when the longest gap started, from request start
SAMPLING_REASON = "llm.sampling.reason"  # slow_ttft, slow_e2e, error, cancelled, timeout, random, not_kept
SAMPLING_HEAD_DROPPED = "llm.sampling.head_dropped"  # true: head sampling dropped it, the tail decision kept it

# Span names (request spans are named "<operation> <model>" per the GenAI conventions).
SPAN_GATEWAY_QUEUE = "gateway.queue"
SPAN_ROUTING = "gateway.route"
SPAN_UPSTREAM = "upstream"  # one per attempt: the GenAI conventions' CLIENT inference span
SPAN_ENGINE_QUEUE = "engine.queue"
SPAN_PREFILL = "engine.prefill"
SPAN_DECODE = "engine.decode"
