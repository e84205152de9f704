"""Per-request overhead of the request tracer (metrics + spans + tail-sampling decision) against a
bare OpenTelemetry span, side by side in one run.

    .venv/bin/python benchmarks/instrumentation_request.py [--requests 500] [--rounds 5] [--tokens 200]

All rows export through the same pipeline: setup_tracing's BatchSpanProcessor into an exporter
that OTLP-encodes each batch and discards it (what an OTLP exporter does, minus the network);
each row's timing ends with a flush, so the export work its spans cause is counted in it.
Rows, microseconds per request (median over rounds, rows interleaved in each round):
- bare span (baseline): start_span with 8 attributes, end.
- tracer, engine: start(model, instance) then finish(usage): metrics, request span, sampling.
- tracer, engine + N tokens: the same with N token() calls (timeline, gaps, summary, bulk
  inter-token histogram; 1% of timelines kept at random, as by default).
- tracer, gateway + N tokens: queued, routed (3 candidates), inject traceparent, N tokens,
  finish: four spans (request, queue, route, upstream).
- tracer, engine + N tokens, head-sampled out: the same request when the head ratio drops its
  span (metrics, timeline and sampling decision only).
- tracer, engine + N tokens, failed: a sampled request that fails (its timeline kept).
- same, head-dropped, kept by tail: the same failure when the head ratio had dropped the request:
  the request span is made at the end (issue 18); compare with the two rows above.
- span + N events: the naive alternative, one span event per token.
Bounded: rows x requests x rounds requests in total (default 2,500 per row).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from infersight.instrumentation import Candidate, RequestTracer, TailSampler, setup_tracing

now = time.perf_counter_ns
ATTRIBUTES = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm", "gen_ai.request.model": "m",
              "gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 200, "llm.instance": "10.0.0.7:8000",
              "llm.pool": "stable", "llm.ttft_ms": 84.5}
CANDIDATES = [Candidate(f"10.0.0.{i}:8000", score=0.1 * i, estimated_finish_ms=800.0 + i, cache_ratio=0.5)
              for i in range(3)]


class EncodingExporter(SpanExporter):
    """Encodes every batch as an OTLP request, then drops it: the exporter's CPU cost, no network."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encode_spans(spans).SerializeToString()
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def rows(otel, tracer: RequestTracer, unsampled: RequestTracer, tokens: int):
    def bare_span():
        otel.start_span("chat m", attributes=ATTRIBUTES).end()

    def engine():
        req = tracer.start("m", instance="10.0.0.7:8000", pool="stable")
        req.finish("stop", input_tokens=812, output_tokens=200)

    def engine_tokens():
        req = tracer.start("m", instance="10.0.0.7:8000", pool="stable")
        for _ in range(tokens):
            req.token()
        req.finish("stop", input_tokens=812, output_tokens=tokens)

    def gateway_tokens():
        req = tracer.start("m", pool="stable", strategy="cache_aware")
        req.queued()
        req.routed("10.0.0.1:8000", candidates=CANDIDATES, estimated_finish_ms=801.0, prefix_cache_ratio=0.5)
        req.inject({})
        for _ in range(tokens):
            req.token()
        req.finish("stop", input_tokens=812, output_tokens=tokens)

    def engine_tokens_unsampled():
        req = unsampled.start("m", instance="10.0.0.7:8000", pool="stable")
        for _ in range(tokens):
            req.token()
        req.finish("stop", input_tokens=812, output_tokens=tokens)

    def engine_tokens_failed():
        req = tracer.start("m", instance="10.0.0.7:8000", pool="stable")
        for _ in range(tokens):
            req.token()
        req.fail("upstream_5xx", input_tokens=812, output_tokens=tokens)

    def engine_tokens_unsampled_failed():
        # Dropped by the head ratio, then failed: the tail decision makes its request span at the end.
        req = unsampled.start("m", instance="10.0.0.7:8000", pool="stable")
        for _ in range(tokens):
            req.token()
        req.fail("upstream_5xx", input_tokens=812, output_tokens=tokens)

    def span_events():
        span = otel.start_span("chat m", attributes=ATTRIBUTES)
        for _ in range(tokens):
            span.add_event("token")
        span.end()

    return {
        "bare span (baseline)": bare_span,
        "tracer, engine": engine,
        f"tracer, engine + {tokens} tokens": engine_tokens,
        f"tracer, gateway + {tokens} tokens": gateway_tokens,
        f"tracer, engine + {tokens} tok, unsampled": engine_tokens_unsampled,
        f"tracer, engine + {tokens} tok, failed": engine_tokens_failed,
        "  same, head-dropped, kept by tail": engine_tokens_unsampled_failed,
        f"span + {tokens} events": span_events,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="requests per row and round (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (default 5)")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per request in the token rows (default 200)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if min(args.requests, args.rounds, args.tokens) < 1 or args.requests * args.rounds > 100_000:
        parser.error("requests, rounds and tokens must be >= 1, and requests x rounds at most 100,000")

    exporter = EncodingExporter()
    handle = setup_tracing("bench", exporter=exporter)
    tracer = RequestTracer(registry=CollectorRegistry(), tracer_provider=handle.provider,
                           sampler=TailSampler(random_share=0.01, seed=1))
    otel = handle.provider.get_tracer("bench")
    dropped_by_head = setup_tracing("bench", exporter=exporter, head_ratio=0.0)
    unsampled = RequestTracer(registry=CollectorRegistry(), tracer_provider=dropped_by_head.provider,
                              sampler=TailSampler(random_share=0.01, seed=1))
    table = rows(otel, tracer, unsampled, args.tokens)
    for method in table.values():  # warm up: label children, code paths
        method()
    results: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, method in table.items():
            handle.force_flush()  # start each row with an empty queue (not timed)
            start = now()
            for _ in range(args.requests):
                method()
            handle.force_flush()  # timed: encoding this row's spans is part of its cost
            results[name].append((now() - start) / args.requests / 1000)
    handle.force_flush()
    handle.shutdown()
    dropped_by_head.shutdown()

    median = {name: statistics.median(values) for name, values in results.items()}
    baseline = median["bare span (baseline)"]
    summary = {
        "us_per_request": {name: round(value, 1) for name, value in median.items()},
        "ratio_vs_bare_span": {name: round(value / baseline, 2) for name, value in median.items()},
        "spans_exported": exporter.spans,
        "dropped_spans": handle.dropped_spans(),
        "requests_per_row_and_round": args.requests,
        "rounds": args.rounds,
        "tokens": args.tokens,
    }
    if args.format == "json":
        print(json.dumps(summary, indent=2))
        return 0
    print(f"per-request cost, median of {args.rounds} rounds x {args.requests} requests "
          f"(export: BatchSpanProcessor + OTLP encoding)")
    print(f"{'row':<40}{'us/request':>12}{'x bare span':>13}")
    for name, value in median.items():
        print(f"{name:<40}{value:>12.1f}{value / baseline:>13.2f}")
    print(f"\nspans exported: {exporter.spans}, dropped: {handle.dropped_spans():.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
