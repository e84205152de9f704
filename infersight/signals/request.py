"""Request signals, produced by ``instrumentation/`` in gateways, engines and the proxy.

TTFT and TPOT buckets follow the OpenTelemetry GenAI semantic conventions
(gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token).
"""

from infersight.attributes import Outcome, TimeoutKind
from infersight.signals.catalog import Kind, declare

PRODUCER = "instrumentation"
# instance: the upstream engine instance that served the request (host:port or a name).
REQUEST_LABELS = ("model", "instance", "pool", "strategy")
# Enumerated label values. The producers create each label set of these at 0 as soon as they
# know the (model, instance, pool, strategy) set (DESIGN 8), so the first error, timeout or
# rejection is an increase from 0 and not a series that appears at 1.
OUTCOMES = tuple(str(o) for o in Outcome)  # success, error, cancelled, timeout, rejected
TIMEOUT_KINDS = tuple(str(k) for k in TimeoutKind)  # ttft, total, idle
REJECTION_REASONS = ("overloaded", "rate_limited")  # 503, 429; others appear at their first event

# The GenAI conventions' TTFT bounds, plus bounds where the config's thresholds sit (alerts compare
# at a bound, so which side of the threshold a request is on is exact; the rules require it), and
# bounds up to 320 s: an incident's TTFT reaches 80 s and more, and a p95 pinned at the top finite
# bound hides how bad it is and stops rising (the "and still rising" alerts then resolve mid-incident).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.6, 0.7, 0.75, 0.8, 1.0, 1.5, 2.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

TTFT = declare("llm_time_to_first_token_seconds", Kind.HISTOGRAM, "seconds", REQUEST_LABELS,
               "Time from request arrival to the first output token, as the client sees it.",
               PRODUCER, TTFT_BUCKETS)
TPOT = declare("llm_time_per_output_token_seconds", Kind.HISTOGRAM, "seconds", REQUEST_LABELS,
               "Per request: (e2e - TTFT) / (output tokens - 1).", PRODUCER, TPOT_BUCKETS)
INTER_TOKEN = declare("llm_inter_token_latency_seconds", Kind.HISTOGRAM, "seconds", REQUEST_LABELS,
                      "Gaps between consecutive output tokens (observed in bulk at request end).",
                      PRODUCER, TPOT_BUCKETS)
E2E = declare("llm_e2e_request_latency_seconds", Kind.HISTOGRAM, "seconds", REQUEST_LABELS,
              "Request arrival to last token.", PRODUCER, E2E_BUCKETS)
QUEUE_TIME = declare("llm_queue_time_seconds", Kind.HISTOGRAM, "seconds", REQUEST_LABELS,
                     "Time a request waited in the gateway queue before routing.", PRODUCER, QUEUE_BUCKETS)
REQUESTS = declare("llm_requests_total", Kind.COUNTER, "", (*REQUEST_LABELS, "outcome"),
                   "Finished requests by outcome (success, error, cancelled, timeout, rejected).", PRODUCER)
IN_FLIGHT = declare("llm_requests_in_flight", Kind.GAUGE, "", REQUEST_LABELS,
                    "Requests accepted and not yet finished.", PRODUCER)
RETRIES = declare("llm_retries_total", Kind.COUNTER, "", REQUEST_LABELS,
                  "Retry attempts (attempts after the first).", PRODUCER)
CLIENT_RETRIES = declare("llm_client_retries_total", Kind.COUNTER, "", REQUEST_LABELS,
                        "Requests a client sent again after a failure or timeout: a retry header (the OpenAI and "
                        "other Stainless SDKs' x-stainless-retry-count above 0) or an Idempotency-Key / "
                        "X-Request-Id seen before. Each is a new request in llm_requests_total too; retry "
                        "storms count these with the gateway's own retries (llm_retries_total).", PRODUCER)
REJECTIONS = declare("llm_rejections_total", Kind.COUNTER, "", (*REQUEST_LABELS, "reason"),
                     "Requests rejected without service (HTTP 503/429), by reason.", PRODUCER)
TIMEOUTS = declare("llm_timeouts_total", Kind.COUNTER, "", (*REQUEST_LABELS, "kind"),
                   "Requests that timed out, by kind (ttft, total, idle).", PRODUCER)
INPUT_TOKENS = declare("llm_input_tokens_total", Kind.COUNTER, "tokens", REQUEST_LABELS,
                       "Prompt tokens of finished requests.", PRODUCER)
CACHED_INPUT_TOKENS = declare("llm_cached_input_tokens_total", Kind.COUNTER, "tokens", REQUEST_LABELS,
                              "Prompt tokens served from the prefix cache.", PRODUCER)
OUTPUT_TOKENS = declare("llm_output_tokens_total", Kind.COUNTER, "tokens", REQUEST_LABELS,
                        "Output tokens of finished requests.", PRODUCER)
SPANS_DROPPED = declare("infersight_tracing_spans_dropped_total", Kind.COUNTER, "", ("service", "reason"),
                        "Spans lost before reaching the collector, by reason (queue_full: the batch queue "
                        "overflowed in a burst; export_failed: the exporter gave up after its retries).", PRODUCER)
SPAN_ITEMS_DROPPED = declare("infersight_tracing_span_items_dropped_total", Kind.COUNTER, "", ("service", "item"),
                             "Events, attributes or links evicted from spans by the SDK's span limits "
                             "(item: event, attribute, link).", PRODUCER)
TIMELINES_KEPT = declare("infersight_tracing_timelines_total", Kind.COUNTER, "", ("model", "reason"),
                         "Token timelines by tail-sampling decision reason (slow_ttft, slow_e2e, error, "
                         "cancelled, timeout, random, not_kept).", PRODUCER)
TIMELINES_TRUNCATED = declare("infersight_tracing_timelines_truncated_total", Kind.COUNTER, "", ("model",),
                              "Requests whose token stream outgrew the per-request timeline buffer "
                              "(max_timeline_tokens): only the last tokens' times were kept.", PRODUCER)
