"""Per-token cost of the token timeline recorder, side by side with the alternatives, in one run.

    .venv/bin/python benchmarks/instrumentation_timeline.py [--tokens 200] [--requests 200] [--rounds 7]

Rows (nanoseconds per token, median over rounds; methods interleaved in each round):
- clock: ``time.perf_counter_ns()`` alone, the floor of any timestamp.
- list.append: bare ``append(perf_counter_ns())`` with a pre-bound append: the baseline.
- recorder: ``RequestContext.token()``, what instrumented code calls (list buffer, method call).
- recorder sink: ``record = ctx.token_sink()`` then ``record(perf_counter_ns())``, the raw path.
- otel add_event: ``span.add_event("token")`` on a recording SDK span (event limit raised so
  nothing is evicted), i.e. one span event per token.
- histogram.observe: a prometheus_client Histogram child observed per token, the reason
  inter-token gaps are observed in bulk at request end instead.
Full cost per token, hot path plus what each approach does per token at request end (a span
with N tokens minus the same span with none, divided by N):
- recorder, not kept: token times, then gaps, summary and the bulk inter-token histogram (the
  common case: ~98% of requests with the default 1% random share and p99 thresholds).
- recorder, kept: the same plus the ``llm.token.offsets_us`` int array set on the span and
  OTLP-encoded (the worst case; the OTLP encoder dominates it).
- otel events: add_event calls, then span end and OTLP encoding of the events.
Targets (issue 7): recorder <= ~150 ns per token, and >= 50x cheaper than add_event.
Bounded: tokens x requests x rounds calls per method (default 280,000).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from prometheus_client import CollectorRegistry

from infersight import attributes as attr
from infersight.instrumentation import RequestTracer, timeline
from infersight.instrumentation.metrics import RequestMetrics
from infersight.signals import request as request_signals

TARGET_NS = 150.0
TARGET_RATIO = 50.0
now = time.perf_counter_ns


def per_token_ns(run_one_request, tokens: int, requests: int) -> float:
    start = now()
    for _ in range(requests):
        run_one_request(tokens)
    return (now() - start) / (tokens * requests)


def make_methods():
    provider = TracerProvider(span_limits=SpanLimits(max_events=100_000))  # no processor: nothing exported
    otel = provider.get_tracer("bench")
    tracer = RequestTracer(tracer_provider=provider)
    histogram = request_signals.INTER_TOKEN.register(CollectorRegistry()).labels("m", "i", "p", "s")

    def clock(tokens):
        for _ in range(tokens):
            now()

    def list_append(tokens):
        buffer = []
        append = buffer.append
        for _ in range(tokens):
            append(now())

    contexts = []

    def recorder(tokens):
        # A context per request, like real use; the span and metrics work is excluded by reusing
        # contexts prepared outside the timed loop.
        ctx = contexts.pop()
        token = ctx.token
        for _ in range(tokens):
            token()

    def recorder_sink(tokens):
        record = contexts.pop().token_sink()
        for _ in range(tokens):
            record(now())

    def add_event(tokens):
        span = otel.start_span("request")
        for _ in range(tokens):
            span.add_event("token")
        # span.end() is not timed: it is per request, not per token.
        spans_to_end.append(span)

    spans_to_end = []

    def observe(tokens):
        for _ in range(tokens):
            histogram.observe(0.02)

    return {"clock": clock, "list.append": list_append, "recorder": recorder, "recorder sink": recorder_sink,
            "otel add_event": add_event,
            "histogram.observe": observe}, tracer, contexts, spans_to_end


def make_full_cost_methods():
    """Whole-request per-token work, for a span with ``tokens`` tokens (0 gives the baseline)."""
    provider = TracerProvider(span_limits=SpanLimits(max_events=100_000))
    otel = provider.get_tracer("bench")
    metrics = RequestMetrics(CollectorRegistry())
    labels = ("m", "i", "p", "s")

    def recorder(tokens, kept):
        span = otel.start_span("request")
        start = now()
        times = timeline.new_buffer()
        append = times.append
        for _ in range(tokens):
            append(now())
        gaps = timeline.gaps_ns(times)
        summary = timeline.summarize(times, start, gaps)
        metrics.observe_gaps_ns(labels, gaps)
        if kept:
            span.set_attribute(attr.TOKEN_OFFSETS_US, timeline.offsets_us(times, start))
        span.set_attribute(attr.TOKEN_COUNT, summary.count)
        span.end()
        encode_spans([span])

    def recorder_kept(tokens):
        recorder(tokens, True)

    def recorder_not_kept(tokens):
        recorder(tokens, False)

    def otel_events(tokens):
        span = otel.start_span("request")
        for _ in range(tokens):
            span.add_event("token")
        span.end()
        encode_spans([span])

    return {"recorder, not kept": recorder_not_kept, "recorder, kept": recorder_kept, "otel events": otel_events}


def full_cost_ns(method, tokens: int, requests: int) -> float:
    """(time with ``tokens`` tokens - time with none) / tokens, per request."""
    start = now()
    for _ in range(requests):
        method(tokens)
    with_tokens = now() - start
    start = now()
    for _ in range(requests):
        method(0)
    without = now() - start
    return max(with_tokens - without, 0) / (tokens * requests)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=200, help="tokens per request (default 200)")
    parser.add_argument("--requests", type=int, default=200, help="requests per round (default 200)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the median is reported (default 7)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if min(args.tokens, args.requests, args.rounds) < 1 or args.tokens * args.requests * args.rounds > 5_000_000:
        parser.error("tokens, requests and rounds must be >= 1, and their product at most 5,000,000")

    methods, tracer, contexts, spans_to_end = make_methods()
    results: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.rounds):
        contexts[:] = [tracer.start("m", instance="i") for _ in range(2 * args.requests)]
        for name, method in methods.items():
            results[name].append(per_token_ns(method, args.tokens, args.requests))
        for ctx in contexts:
            ctx.finish()
        for span in spans_to_end:
            span.end()
        spans_to_end.clear()

    full_methods = make_full_cost_methods()
    full_results: dict[str, list[float]] = {name: [] for name in full_methods}
    for _ in range(args.rounds):
        for name, method in full_methods.items():
            full_results[name].append(full_cost_ns(method, args.tokens, args.requests))

    median = {name: statistics.median(values) for name, values in results.items()}
    full = {name: statistics.median(values) for name, values in full_results.items()}
    baseline, ours, events = median["list.append"], median["recorder"], median["otel add_event"]
    summary = {
        "ns_per_token": {name: round(value, 1) for name, value in median.items()},
        "recorder_vs_list_append": round(ours / baseline, 2),
        "add_event_vs_recorder": round(events / ours, 1),
        "add_event_vs_recorder_sink": round(events / median["recorder sink"], 1),
        "histogram_observe_vs_recorder": round(median["histogram.observe"] / ours, 1),
        "full_ns_per_token": {name: round(value, 1) for name, value in full.items()},
        "full_otel_events_vs_recorder_kept": round(full["otel events"] / full["recorder, kept"], 1),
        "full_otel_events_vs_recorder_not_kept": round(full["otel events"] / full["recorder, not kept"], 1),
        "target_ns": TARGET_NS,
        "target_add_event_ratio": TARGET_RATIO,
        "meets_targets": {"ns": ours <= TARGET_NS, "add_event_ratio": events / ours >= TARGET_RATIO,
                          "full_ratio_not_kept": full["otel events"] / full["recorder, not kept"] >= TARGET_RATIO},
        "tokens_per_request": args.tokens,
        "requests_per_round": args.requests,
        "rounds": args.rounds,
    }
    if args.format == "json":
        print(json.dumps(summary, indent=2))
        return 0
    print(f"per-token cost, median of {args.rounds} rounds x {args.requests} requests x {args.tokens} tokens")
    print(f"{'method':<20}{'ns/token':>10}{'x list.append':>15}{'x recorder':>12}")
    for name, value in median.items():
        print(f"{name:<20}{value:>10.1f}{value / baseline:>15.2f}{value / ours:>12.2f}")
    print("\nfull cost per token (hot path + request-end work incl. OTLP encoding), same run")
    print(f"{'approach':<20}{'ns/token':>10}{'otel events / this':>20}")
    for name, value in full.items():
        print(f"{name:<20}{value:>10.1f}{full['otel events'] / value:>20.2f}")
    print(f"\nrecorder: {ours:.0f} ns/token (target <= {TARGET_NS:.0f}), {events / ours:.0f}x cheaper than add_event "
          f"(target >= {TARGET_RATIO:.0f}x), {ours / baseline:.2f}x the bare list.append baseline; "
          f"token_sink {median['recorder sink']:.0f} ns, {events / median['recorder sink']:.0f}x cheaper; "
          f"full cost {full['otel events'] / full['recorder, not kept']:.0f}x (not kept) and "
          f"{full['otel events'] / full['recorder, kept']:.1f}x (kept) cheaper than span events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
