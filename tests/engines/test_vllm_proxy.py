"""The instrumenting proxy in front of a real vLLM 0.32, driven by the real openai client: token counts
equal vLLM's usage (tokens, not text chunks), streaming and not, with and without include_usage, and a
client that disconnects."""

from __future__ import annotations

import asyncio
import time

import pytest

from infersight import attributes as attr
from infersight.signals import request as req_sig
from tests.engines.vllm_server import CLIENT_TIMEOUT_S
from tests.instrumentation.proxy_harness import ProxyStack

MESSAGES = [{"role": "user", "content": "Tell me about caches, in bytes: Grüße, 東京, 🙂."}]


@pytest.fixture
def stack(vllm):
    s = ProxyStack(upstream=vllm.base_url)
    yield s
    s.close()


def client(stack):
    import openai

    return openai.OpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT_S)


def last_span(stack, count: int):
    return stack.wait_request_span(count, timeout=30)


@pytest.mark.parametrize("include_usage", [False, True])
def test_streamed_tokens_are_counted_exactly(stack, include_usage):
    tokens = 96
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client(stack).chat.completions.create(
        model="tiny-llama", messages=MESSAGES, max_tokens=tokens, stream=True, extra_body={"ignore_eos": True},
        **options))
    text_chunks = sum(1 for c in chunks if c.choices and c.choices[0].delta.content)
    # vLLM puts the running usage the proxy asked for on every chunk; the client never asked for that.
    assert all(c.usage is None for c in chunks if c.choices)
    usage_chunks = [c for c in chunks if not c.choices]
    if include_usage:
        assert len(usage_chunks) == 1 and usage_chunks[0].usage.completion_tokens == tokens
    else:
        assert usage_chunks == []  # what the proxy asked vLLM for does not reach this client
        assert all(c.choices[0].index == 0 for c in chunks)
    span = last_span(stack, 1)
    assert span.attributes[attr.REQUEST_OUTCOME] == "success"
    assert span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == tokens
    # One timed token per generated token: N - 1 gaps, whatever the chunks carried as text.
    labels = {"model": "tiny-llama"}
    assert stack.metric(req_sig.INTER_TOKEN, "_count", **labels) == tokens - 1
    assert stack.metric(req_sig.OUTPUT_TOKENS, **labels) == tokens
    assert text_chunks <= tokens  # vLLM holds back bytes that do not end a character


def test_not_streamed(stack):
    answer = client(stack).chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=20,
                                                   extra_body={"ignore_eos": True})
    assert answer.usage.completion_tokens == 20
    span = last_span(stack, 1)
    assert span.attributes[attr.REQUEST_OUTCOME] == "success"
    assert span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 20
    assert span.attributes[attr.GEN_AI_USAGE_INPUT_TOKENS] == answer.usage.prompt_tokens


def test_text_completions_stream(stack):
    chunks = list(client(stack).completions.create(model="tiny-llama", prompt="Once upon a time", max_tokens=30,
                                                   stream=True, extra_body={"ignore_eos": True}))
    assert all(c.choices for c in chunks)
    span = last_span(stack, 1)
    assert span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert stack.metric(req_sig.INTER_TOKEN, "_count", model="tiny-llama") == 29


def test_client_disconnect_is_cancelled_and_vllm_stops(stack, vllm):
    from prometheus_client.parser import text_string_to_metric_families

    def engine(name: str) -> float:
        return sum(s.value for f in text_string_to_metric_families(vllm.metrics_text()) for s in f.samples
                   if s.name == name)

    async def leave_early():
        import openai

        api = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT_S)
        stream = await api.chat.completions.create(model="tiny-llama", messages=MESSAGES, max_tokens=900,
                                                   stream=True, extra_body={"ignore_eos": True})
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 5:
                break
        await stream.close()
        await api.close()

    def settled() -> None:
        deadline = time.monotonic() + 60
        while engine("vllm:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert engine("vllm:num_requests_running") == 0

    # The client must leave while vLLM is still generating. On two busy cores the tiny model can write all
    # 900 tokens before the client's close reaches the proxy, or before the proxy's close of its upstream
    # connection reaches vLLM. The answer was then delivered (completed) or abandoned after it was written
    # (cancelled, rightly: the client left before its end), and the round says nothing about vLLM stopping
    # for nobody. Up to three rounds.
    for attempt in range(1, 4):
        generated_before = engine("vllm:generation_tokens_total")
        asyncio.run(leave_early())
        span = last_span(stack, attempt)
        settled()  # the proxy closed its upstream connection: vLLM stopped generating for nobody
        generated = engine("vllm:generation_tokens_total") - generated_before
        assert span.attributes[attr.REQUEST_OUTCOME] in ("success", "cancelled")
        if generated < 900:
            break
    assert span.attributes[attr.REQUEST_OUTCOME] == "cancelled"
    assert generated < 900
