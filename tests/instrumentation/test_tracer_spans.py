"""The request tracer end to end, with the OTel SDK's in-memory exporter: span tree, attributes,
traceparent propagation, retries, rejections, timeouts, cancellation and bad input."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from infersight import attributes as attr
from infersight.instrumentation import Candidate, RequestTracer, extract_context
from tests.instrumentation.tracing_helpers import make_traced

MODEL = "llama-3-8b"


def run_gateway_request(traced, tokens: int = 5, queue_wait: float = 0.02):
    with traced.tracer.start(MODEL, pool="stable", strategy="cache_aware", max_tokens=64) as req:
        req.queued()
        time.sleep(queue_wait)
        req.routed("10.0.0.7:8000", candidates=[Candidate("10.0.0.7:8000", score=0.2, estimated_finish_ms=840.0,
                                                          cache_ratio=0.9),
                                                Candidate("10.0.0.8:8000", score=0.7, estimated_finish_ms=1900.0,
                                                          cache_ratio=0.1)],
                   estimated_finish_ms=840.0, prefix_cache_ratio=0.9)
        headers = req.inject({})
        for _ in range(tokens):
            req.token()
        summary = req.finish("stop", input_tokens=812, output_tokens=tokens, cached_input_tokens=768,
                             response_model=MODEL, response_id="cmpl-1")
    return summary, headers


def test_gateway_span_tree_and_genai_attributes():
    traced = make_traced()
    summary, headers = run_gateway_request(traced)

    request_span = traced.one(f"chat {MODEL}")
    queue, route, upstream = (traced.one(attr.SPAN_GATEWAY_QUEUE), traced.one(attr.SPAN_ROUTING),
                              traced.one(attr.SPAN_UPSTREAM))
    assert len(traced.spans()) == 4
    assert request_span.parent is None and request_span.kind is SpanKind.SERVER
    for child in (queue, route, upstream):
        assert child.context.trace_id == request_span.context.trace_id
        assert child.parent.span_id == request_span.context.span_id
    assert upstream.kind is SpanKind.CLIENT
    # The children sit inside the request span, in order: queue, then route, then the upstream call.
    assert request_span.start_time <= queue.start_time <= queue.end_time <= route.start_time <= upstream.start_time
    assert upstream.end_time <= request_span.end_time

    a = request_span.attributes
    assert a[attr.GEN_AI_OPERATION_NAME] == "chat"
    assert a[attr.GEN_AI_PROVIDER_NAME] == "vllm"
    assert a[attr.GEN_AI_REQUEST_MODEL] == MODEL
    assert a[attr.GEN_AI_RESPONSE_MODEL] == MODEL
    assert a[attr.GEN_AI_RESPONSE_ID] == "cmpl-1"
    assert a[attr.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert a[attr.GEN_AI_USAGE_INPUT_TOKENS] == 812
    assert a[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert a[attr.CACHED_INPUT_TOKENS] == 768
    assert tuple(a[attr.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert a[attr.REQUEST_OUTCOME] == "success"
    assert a[attr.INSTANCE] == "10.0.0.7:8000" and a[attr.POOL] == "stable"
    # One identity per instance (DESIGN 10): the endpoint split as the GenAI conventions want it.
    assert a[attr.SERVER_ADDRESS] == "10.0.0.7" and a[attr.SERVER_PORT] == 8000
    assert a[attr.ROUTING_STRATEGY] == "cache_aware"
    assert a[attr.REQUEST_ID] == summary.trace_id == f"{request_span.context.trace_id:032x}"
    assert a[attr.QUEUE_MS] >= 20.0 and a[attr.TTFT_MS] >= a[attr.QUEUE_MS]
    assert a[attr.TOKEN_COUNT] == 5
    assert a[attr.SAMPLING_REASON] == "not_kept" and attr.TOKEN_OFFSETS_US not in a
    # Queue span duration is the measured queue time.
    assert abs((queue.end_time - queue.start_time) / 1e6 - a[attr.QUEUE_MS]) < 0.5

    r = route.attributes
    assert r[attr.INSTANCE] == "10.0.0.7:8000" and r[attr.ROUTING_STRATEGY] == "cache_aware"
    assert r[attr.ROUTING_ESTIMATED_FINISH_MS] == 840.0 and r[attr.ROUTING_PREFIX_CACHE_RATIO] == 0.9
    candidates = json.loads(r[attr.ROUTING_CANDIDATES])
    assert [c["instance"] for c in candidates] == ["10.0.0.7:8000", "10.0.0.8:8000"]
    assert candidates[1] == {"instance": "10.0.0.8:8000", "score": 0.7, "est_finish_ms": 1900.0, "cache_ratio": 0.1}
    assert upstream.attributes[attr.RETRY_ATTEMPT] == 0
    assert (upstream.attributes[attr.INSTANCE], upstream.attributes[attr.SERVER_ADDRESS],
            upstream.attributes[attr.SERVER_PORT]) == ("10.0.0.7:8000", "10.0.0.7", 8000)
    assert (r[attr.SERVER_ADDRESS], r[attr.SERVER_PORT]) == ("10.0.0.7", 8000)

    # The injected traceparent names the upstream span: that is where the engine's span hangs.
    flags = f"{int(upstream.context.trace_flags):02x}"
    assert flags in ("01", "03")  # sampled (plus W3C level 2 "random trace id" in newer SDKs)
    assert headers["traceparent"] == f"00-{summary.trace_id}-{upstream.context.span_id:016x}-{flags}"


def test_traceparent_makes_the_engine_span_a_child_of_the_gateway_attempt():
    gateway, engine = make_traced(), make_traced(service="engine")
    with gateway.tracer.start(MODEL, strategy="least_conn") as greq:
        greq.queued()
        greq.routed("engine-0")
        headers = {"Traceparent": greq.traceparent}  # header names are case-insensitive
        with engine.tracer.start(MODEL, headers=headers, instance="engine-0") as ereq:
            ereq.token()
            ereq.finish("length", output_tokens=1)
        greq.token()
        greq.finish("length")

    gateway_upstream = gateway.one(attr.SPAN_UPSTREAM)
    engine_span = engine.one(f"chat {MODEL}")
    assert engine_span.context.trace_id == gateway_upstream.context.trace_id
    assert engine_span.parent.span_id == gateway_upstream.context.span_id
    assert engine_span.parent.is_remote
    # The gateway's request id (its trace id) is the engine's request id too.
    assert engine_span.attributes[attr.REQUEST_ID] == gateway.one(f"chat {MODEL}").attributes[attr.REQUEST_ID]


@pytest.mark.parametrize("bad", ["garbage", "00-00000000000000000000000000000000-0000000000000000-01",
                                 "00-abc-def-01", ""])
def test_a_malformed_traceparent_starts_a_new_trace(bad):
    assert extract_context({"traceparent": bad}) is None
    traced = make_traced()
    with traced.tracer.start(MODEL, headers={"traceparent": bad}) as req:
        req.finish()
    span = traced.one(f"chat {MODEL}")
    assert span.parent is None and span.context.trace_id != 0


def test_retry_ends_the_attempt_as_error_and_the_next_attempt_records_backoff():
    traced = make_traced()
    with traced.tracer.start(MODEL, strategy="round_robin") as req:
        req.queued()
        req.routed("a:8000")
        first_traceparent = req.traceparent
        req.retry(backoff_s=0.25, error_type="upstream_5xx")
        req.routed("b:8000")
        assert req.traceparent != first_traceparent  # the retry gets its own upstream span
        req.token()
        summary = req.finish("stop")

    attempts = sorted(traced.by_name(attr.SPAN_UPSTREAM), key=lambda s: s.attributes[attr.RETRY_ATTEMPT])
    assert [s.attributes[attr.INSTANCE] for s in attempts] == ["a:8000", "b:8000"]
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert attempts[0].attributes[attr.ERROR_TYPE] == "upstream_5xx"
    assert attempts[1].attributes[attr.RETRY_BACKOFF_MS] == 250.0
    assert attempts[1].status.status_code is StatusCode.UNSET
    assert len(traced.by_name(attr.SPAN_ROUTING)) == 2 and len(traced.by_name(attr.SPAN_GATEWAY_QUEUE)) == 1
    assert summary.attempts == 2 and summary.outcome == "success"
    assert traced.metric("llm_retries_total", model=MODEL, instance="a:8000", pool="",
                         strategy="round_robin") == 1
    # In flight moved with the request from a to b and is back to zero everywhere.
    for instance in ("", "a:8000", "b:8000"):
        value = traced.metric("llm_requests_in_flight", model=MODEL, instance=instance, pool="",
                              strategy="round_robin")
        assert value in (None, 0.0)


def test_rejection_while_queued():
    traced = make_traced(random_share=1.0)
    req = traced.tracer.start(MODEL, pool="stable", strategy="rr")
    req.queued()
    assert traced.metric("llm_gateway_queue_depth", model=MODEL, pool="stable", strategy="rr") == 1
    summary = req.reject("queue_full", status=429)
    assert summary.outcome == "rejected" and summary.sampling_reason == "not_kept"
    assert traced.metric("llm_gateway_queue_depth", model=MODEL, pool="stable", strategy="rr") == 0
    labels = dict(model=MODEL, instance="", pool="stable", strategy="rr")
    assert traced.metric("llm_rejections_total", reason="queue_full", **labels) == 1
    assert traced.metric("llm_requests_total", outcome="rejected", **labels) == 1
    assert traced.metric("llm_e2e_request_latency_seconds_count", **labels) in (None, 0.0)  # no service, no latency
    span = traced.one(f"chat {MODEL}")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[attr.REQUEST_OUTCOME] == "rejected" and span.attributes[attr.ERROR_TYPE] == "429"
    assert not traced.by_name(attr.SPAN_UPSTREAM)


def test_timeout_records_kind_on_span_and_metric():
    traced = make_traced()
    req = traced.tracer.start(MODEL, instance="e0")
    req.upstream()
    req.token()
    summary = req.timeout("idle")
    assert summary.outcome == "timeout" and summary.sampling_reason == "timeout"
    span = traced.one(f"chat {MODEL}")
    assert span.attributes[attr.TIMEOUT_KIND] == "idle" and span.attributes[attr.ERROR_TYPE] == "timeout"
    assert span.status.status_code is StatusCode.ERROR
    assert traced.one(attr.SPAN_UPSTREAM).status.status_code is StatusCode.ERROR
    assert traced.metric("llm_timeouts_total", model=MODEL, instance="e0", pool="", strategy="", kind="idle") == 1


def test_bad_input_is_refused_and_leaves_the_request_usable():
    traced = make_traced()
    with pytest.raises(ValueError, match="model"):
        traced.tracer.start("")
    req = traced.tracer.start(MODEL)
    with pytest.raises(ValueError, match="ttft, total, idle"):
        req.timeout("forever")
    with pytest.raises(ValueError, match="backoff_s"):
        req.retry(backoff_s=-1)
    with pytest.raises(ValueError, match="error_type"):
        req.fail("")
    with pytest.raises(ValueError, match="output_tokens must be a non-negative integer"):
        req.finish("stop", output_tokens=-3)
    with pytest.raises(ValueError, match="input_tokens"):
        req.cancel(input_tokens="many")
    assert not req.finished and not traced.spans()
    assert req.finish("stop").outcome == "success"
    assert traced.metric("llm_requests_total", model=MODEL, instance="", pool="", strategy="",
                         outcome="success") == 1


def test_an_exception_in_the_block_fails_the_request_and_is_recorded():
    traced = make_traced()
    with pytest.raises(RuntimeError):
        with traced.tracer.start(MODEL) as req:
            req.token()
            raise RuntimeError("engine exploded")
    span = traced.one(f"chat {MODEL}")
    assert span.attributes[attr.REQUEST_OUTCOME] == "error"
    assert span.attributes[attr.ERROR_TYPE] == "RuntimeError"
    assert span.attributes[attr.SAMPLING_REASON] == "error"
    assert [e.name for e in span.events] == ["exception"]
    assert span.status.description == "engine exploded"


def test_a_cancelled_task_is_recorded_as_cancelled():
    traced = make_traced()

    async def handler():
        with traced.tracer.start(MODEL, instance="e0") as req:
            req.token()
            await asyncio.sleep(10)

    async def main():
        task = asyncio.create_task(handler())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    span = traced.one(f"chat {MODEL}")
    assert span.attributes[attr.REQUEST_OUTCOME] == "cancelled"
    assert span.attributes[attr.SAMPLING_REASON] == "cancelled"
    assert span.status.status_code is StatusCode.UNSET  # the client left; not a server error
    assert traced.metric("llm_requests_total", model=MODEL, instance="e0", pool="", strategy="",
                         outcome="cancelled") == 1


def test_a_second_ending_is_ignored():
    traced = make_traced()
    req = traced.tracer.start(MODEL)
    first = req.finish("stop")
    assert req.cancel() is first and req.timeout("total") is first
    req.token()  # late tokens after the end are harmless
    assert len(traced.spans()) == 1
    assert traced.metric("llm_requests_total", model=MODEL, instance="", pool="", strategy="",
                         outcome="success") == 1
    assert traced.metric("llm_requests_total", model=MODEL, instance="", pool="", strategy="",
                         outcome="cancelled") == 0  # created at 0, never counted


def test_head_ratio_zero_records_no_spans_but_all_metrics():
    traced = make_traced(head_ratio=0.0, random_share=1.0)
    for _ in range(3):
        with traced.tracer.start(MODEL, instance="e0") as req:
            req.token()
            req.token()
            summary = req.finish("stop")
    assert traced.spans() == []
    # A random pick does not override the head ratio (it already drew this request's lot), so the
    # timelines counter says what was stored: nothing. Failed or slow ones would (test_head_tail_sampling).
    assert not summary.timeline_kept and summary.sampling_reason == "not_kept"
    labels = dict(model=MODEL, instance="e0", pool="", strategy="")
    assert traced.metric("llm_requests_total", outcome="success", **labels) == 3
    assert traced.metric("llm_time_to_first_token_seconds_count", **labels) == 3
    assert traced.metric("infersight_tracing_timelines_total", model=MODEL, reason="not_kept") == 3


def test_engine_phases_make_queue_prefill_and_decode_spans():
    traced = make_traced(service="engine")
    with traced.tracer.start(MODEL, instance="engine-0") as req:
        time.sleep(0.005)
        req.scheduled(cached_input_tokens=512)
        time.sleep(0.005)
        req.token()
        req.token()
        req.finish("stop", input_tokens=600, output_tokens=2)
    request_span = traced.one(f"chat {MODEL}")
    queue, prefill, decode = (traced.one(attr.SPAN_ENGINE_QUEUE), traced.one(attr.SPAN_PREFILL),
                              traced.one(attr.SPAN_DECODE))
    for child in (queue, prefill, decode):
        assert child.parent.span_id == request_span.context.span_id
    assert request_span.start_time == queue.start_time
    assert queue.end_time == prefill.start_time and prefill.end_time == decode.start_time
    assert decode.end_time == request_span.end_time
    assert (queue.end_time - queue.start_time) >= 5_000_000 and (prefill.end_time - prefill.start_time) >= 5_000_000
    assert prefill.attributes[attr.CACHED_INPUT_TOKENS] == 512
    assert request_span.attributes[attr.CACHED_INPUT_TOKENS] == 512  # taken from scheduled() when not in finish
    assert decode.attributes[attr.TOKEN_COUNT] == 2


def test_engine_failure_before_the_first_token_has_no_decode_span():
    traced = make_traced(service="engine")
    req = traced.tracer.start(MODEL, instance="engine-0")
    req.scheduled()
    req.fail("oom")
    assert traced.one(attr.SPAN_PREFILL).end_time == traced.one(f"chat {MODEL}").end_time
    assert traced.by_name(attr.SPAN_DECODE) == []


def test_routing_estimates_of_the_chosen_instance_are_on_the_request_span():
    traced = make_traced()
    summary, _ = run_gateway_request(traced, tokens=1, queue_wait=0)
    a = traced.one(f"chat {MODEL}").attributes
    assert a[attr.ROUTING_ESTIMATED_FINISH_MS] == 840.0 and a[attr.ROUTING_PREFIX_CACHE_RATIO] == 0.9
    assert summary.outcome == "success"


def test_concurrent_requests_from_many_threads_keep_metrics_consistent():
    traced = make_traced(random_share=0.5)

    def worker(n: int) -> None:
        for i in range(100):
            with traced.tracer.start(MODEL, pool="p", strategy="s") as req:
                req.queued()
                req.routed(f"e{n % 2}")
                req.tokens(3)
                if i % 10 == 0:
                    req.timeout("ttft")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(traced.metric("llm_requests_total", model=MODEL, instance=f"e{k}", pool="p", strategy="s",
                              outcome=outcome) or 0
                for k in (0, 1) for outcome in ("success", "timeout"))
    assert total == 600
    gaps = sum(traced.metric("llm_inter_token_latency_seconds_count", model=MODEL, instance=f"e{k}", pool="p",
                             strategy="s") for k in (0, 1))
    assert gaps == 600 * 2
    assert traced.metric("llm_gateway_queue_depth", model=MODEL, pool="p", strategy="s") == 0
    assert all(traced.metric("llm_requests_in_flight", model=MODEL, instance=i, pool="p", strategy="s") == 0
               for i in ("", "e0", "e1"))
    kept = sum(traced.metric("infersight_tracing_timelines_total", model=MODEL, reason=r) or 0
               for r in ("random", "timeout", "not_kept", "slow_ttft", "slow_e2e"))
    assert kept == 600
    assert len(traced.by_name(f"chat {MODEL}")) == 600


def test_token_sink_records_like_token():
    traced = make_traced(random_share=1.0)
    req = traced.tracer.start(MODEL)
    record = req.token_sink()
    for _ in range(3):
        record(time.perf_counter_ns())
    summary = req.finish("stop")
    assert summary.token_count == 3 and len(summary.offsets_us) == 3 and summary.ttft_s > 0


def test_readings_from_the_wrong_clock_are_discarded_not_exported(caplog):
    traced = make_traced(random_share=1.0)
    req = traced.tracer.start(MODEL, instance="e0")
    record = req.token_sink()
    record(time.time_ns())  # wall clock, not perf_counter_ns: far outside the request
    summary = req.finish("stop", output_tokens=1)
    assert summary.token_count == 0 and summary.ttft_s is None and summary.offsets_us is None
    assert "timeline discarded" in caplog.text
    span = traced.one(f"chat {MODEL}")
    assert attr.TOKEN_OFFSETS_US not in span.attributes and span.attributes[attr.REQUEST_OUTCOME] == "success"
    assert traced.metric("llm_time_to_first_token_seconds_count", model=MODEL, instance="e0", pool="",
                         strategy="") == 0


def test_metrics_only_without_any_tracing_setup():
    from opentelemetry.trace import NoOpTracerProvider

    tracer = RequestTracer(tracer_provider=NoOpTracerProvider())
    with tracer.start(MODEL, instance="e0") as req:
        assert req.inject({}) == {}  # no trace to propagate
        req.token()
        summary = req.finish("stop")
    assert summary.outcome == "success" and summary.token_count == 1
    assert tracer.registry.get_sample_value("llm_requests_total", dict(model=MODEL, instance="e0", pool="",
                                                                       strategy="", outcome="success")) == 1
