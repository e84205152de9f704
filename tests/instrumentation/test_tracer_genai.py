"""The CLIENT ``upstream`` span is the GenAI conventions' inference span: who was called, how, and what came back."""

from __future__ import annotations

import time

from opentelemetry.trace import SpanKind

from infersight import attributes as attr
from tests.instrumentation.tracing_helpers import make_traced

MODEL = "qwen3-8b"


def test_upstream_span_carries_the_genai_inference_attributes():
    traced = make_traced()
    with traced.tracer.start(MODEL, operation="chat", stream=True, max_tokens=128) as req:
        attempt_started = time.perf_counter_ns()  # before routing, so the bound below holds under any load
        req.routed("10.0.0.7:8000", strategy="cache_aware")
        time.sleep(0.03)
        req.token()
        for _ in range(3):
            req.token()
        req.finish("stop", input_tokens=900, output_tokens=4, cached_input_tokens=512, reasoning_tokens=2,
                   response_model=MODEL, response_id="chatcmpl-9")
    upstream = traced.one(attr.SPAN_UPSTREAM)
    assert upstream.kind is SpanKind.CLIENT
    a = upstream.attributes
    assert a[attr.GEN_AI_OPERATION_NAME] == "chat" and a[attr.GEN_AI_REQUEST_MODEL] == MODEL
    assert a[attr.GEN_AI_PROVIDER_NAME] == "vllm"
    assert (a[attr.SERVER_ADDRESS], a[attr.SERVER_PORT]) == ("10.0.0.7", 8000)
    assert a[attr.GEN_AI_REQUEST_STREAM] is True
    assert (a[attr.GEN_AI_USAGE_INPUT_TOKENS], a[attr.GEN_AI_USAGE_OUTPUT_TOKENS]) == (900, 4)
    assert a[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 512
    assert a[attr.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 2
    assert tuple(a[attr.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert a[attr.GEN_AI_RESPONSE_ID] == "chatcmpl-9"
    # Seconds from the attempt's start to its first chunk (not milliseconds, not from the request's arrival).
    first_chunk = a[attr.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert 0.03 <= first_chunk < (time.perf_counter_ns() - attempt_started) / 1e9
    request = traced.one(f"chat {MODEL}").attributes
    assert request[attr.GEN_AI_REQUEST_STREAM] is True
    assert request[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 512 == request[attr.CACHED_INPUT_TOKENS]
    assert request[attr.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 2


def test_a_retried_request_times_the_first_chunk_of_its_last_attempt():
    traced = make_traced()
    with traced.tracer.start(MODEL, stream=True) as req:
        req.routed("10.0.0.7:8000")
        time.sleep(0.05)
        retried_at = time.perf_counter_ns()
        req.retry(error_type="upstream_5xx")
        req.routed("10.0.0.8:8000")
        req.token()
        req.finish("stop", output_tokens=1)
    failed, last = sorted(traced.by_name(attr.SPAN_UPSTREAM), key=lambda s: s.start_time)
    assert attr.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in failed.attributes
    assert attr.GEN_AI_USAGE_OUTPUT_TOKENS not in failed.attributes  # the answer came from the last attempt
    assert last.attributes[attr.SERVER_ADDRESS] == "10.0.0.8"
    first_chunk = last.attributes[attr.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    # Counted from the last attempt's start, never from the first: it fits inside the last attempt's
    # span and inside the time since the retry began, whatever the machine's load.
    assert first_chunk <= (last.end_time - last.start_time) / 1e9
    assert first_chunk <= (time.perf_counter_ns() - retried_at) / 1e9


def test_a_non_streaming_request_has_no_time_to_first_chunk_and_unknown_usage_is_absent():
    traced = make_traced()
    with traced.tracer.start(MODEL, operation="text_completion", stream=False) as req:
        req.upstream("10.0.0.9:8000")
        req.first_token()
        req.finish("length")
    a = traced.one(attr.SPAN_UPSTREAM).attributes
    assert a[attr.GEN_AI_REQUEST_STREAM] is False and a[attr.GEN_AI_OPERATION_NAME] == "text_completion"
    for absent in (attr.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                   attr.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, attr.GEN_AI_USAGE_INPUT_TOKENS):
        assert absent not in a, absent


def test_the_proxy_reads_reasoning_tokens_from_openai_usage():
    from infersight.instrumentation.proxy.recording import _usage
    from infersight.instrumentation.proxy.sse import ResponseFacts

    facts = ResponseFacts()
    facts.read_usage({"prompt_tokens": 40, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 32},
                      "completion_tokens_details": {"reasoning_tokens": 12}})
    assert (facts.cached_input_tokens, facts.reasoning_tokens) == (32, 12)
    traced = make_traced()
    with traced.tracer.start(MODEL, stream=True) as req:
        req.upstream("10.0.0.9:8000")
        req.finish("stop", **_usage(facts))
    a = traced.one(attr.SPAN_UPSTREAM).attributes
    assert (a[attr.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS], a[attr.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]) == (12, 32)
