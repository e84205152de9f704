"""The proxy when things go wrong: timeouts, a client that leaves, an upstream that is down, broken
or talking garbage. Each case: what the real ``openai`` client sees, what the span records, and
whether the engine stand-in was told to stop (its request handler cancelled).
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight import attributes as attr
from infersight.instrumentation.proxy.deadlines import Timeouts
from infersight.signals import request as request_signals
from tests.instrumentation.proxy_harness import ProxyStack

MODEL = "standin-model"
MESSAGES = [{"role": "user", "content": "hello"}]
# Short enough for quick tests, with a 10x margin over the stand-in's normal 50 ms token interval.
FAST = Timeouts(ttft=0.5, idle=0.5, total=2.0)
# For the cases that are not about timeouts: a loaded machine must not turn them into timeouts.
RELAXED = Timeouts(ttft=60, idle=60, total=120)


@pytest.fixture
def stack():
    stack = ProxyStack(FAST)
    yield stack
    stack.close()


@pytest.fixture
def relaxed():
    stack = ProxyStack(RELAXED)
    yield stack
    stack.close()


def client_for(stack: ProxyStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=10)


def stream_text(stack: ProxyStack, plan: dict, **kwargs) -> str:
    with client_for(stack) as client:
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                extra_body={"standin": plan}, **kwargs)
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def engine_was_cancelled(stack: ProxyStack, timeout: float = 30.0) -> bool:
    served = stack.engine.served[-1]
    assert served.done.wait(timeout), "the engine is still generating"
    return served.cancelled


def assert_timeout_span(stack: ProxyStack, kind: str) -> None:
    span = stack.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "timeout"
    assert span.attributes[attr.TIMEOUT_KIND] == kind
    assert span.attributes[attr.SAMPLING_REASON] == "timeout"  # a timed-out request keeps its timeline
    assert not span.status.is_ok
    labels = {"model": MODEL, "kind": kind}
    assert stack.metric(request_signals.TIMEOUTS, **labels) == 1


def test_slow_first_token_times_out_in_stream(stack):
    """The engine sent its role chunk at once, so the stream had started: the error arrives in-stream."""
    with pytest.raises(openai.APIError, match="first-token timeout"):
        stream_text(stack, {"first_token_delay": 3})
    assert_timeout_span(stack, "ttft")
    assert engine_was_cancelled(stack)


def test_slow_first_token_times_out_before_any_byte(stack):
    """Non-streaming: nothing was sent yet, so the client gets a clean 504 with an OpenAI error body."""
    with client_for(stack) as client, pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, extra_body={"standin": {"first_token_delay": 3}})
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "ttft_timeout"
    assert_timeout_span(stack, "ttft")
    assert engine_was_cancelled(stack)


def test_stall_mid_stream_is_an_idle_timeout(stack):
    received = []
    with client_for(stack) as client, pytest.raises(openai.APIError, match="stalled"):
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                extra_body={"standin": {"tokens": 10, "stall_after": 4, "stall": 3}})
        for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert received == ["", "tok0 ", "tok1 ", "tok2 ", "tok3 "]  # everything before the stall arrived
    assert_timeout_span(stack, "idle")
    span = stack.wait_request_span()
    assert span.attributes[attr.TOKEN_COUNT] == 4
    assert len(json.loads(span.attributes[attr.TOKEN_OFFSETS_US])) == 4
    assert engine_was_cancelled(stack)


def test_idle_timeout_inside_a_half_sent_event(stack):
    """The error event must still parse: the proxy ends the broken event before writing its own."""
    with client_for(stack) as client:
        with client.chat.completions.with_streaming_response.create(
                model=MODEL, messages=MESSAGES, stream=True,
                extra_body={"standin": {"tokens": 5, "half_event_after": 2}}) as response:
            received = b"".join(response.iter_bytes())
    sent = bytes(stack.engine.served[-1].sent)
    assert received.startswith(sent)  # everything the engine sent, unchanged
    tail = received[len(sent):]
    assert tail.startswith(b"\n\ndata: {")
    assert json.loads(tail.strip()[len(b"data: "):])["error"]["code"] == "idle_timeout"
    assert_timeout_span(stack, "idle")
    assert engine_was_cancelled(stack)


def test_total_timeout(stack):
    """Tokens keep coming (no stall), but the request as a whole runs past the total limit."""
    with pytest.raises(openai.APIError, match="total timeout"):
        stream_text(stack, {"tokens": 100, "interval": 0.05})
    assert_timeout_span(stack, "total")
    assert engine_was_cancelled(stack)


def test_client_disconnect_cancels_upstream(relaxed):
    with client_for(relaxed) as client:
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                extra_body={"standin": {"tokens": 200, "interval": 0.02}})
        first = [next(iter(stream)) for _ in range(3)]
        stream.close()  # the user closed the tab
    assert len(first) == 3
    span = relaxed.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "cancelled"
    assert span.attributes[attr.SAMPLING_REASON] == "cancelled"
    assert engine_was_cancelled(relaxed)
    assert len(relaxed.engine.served[-1].sent) < 200 * 60  # far from the full answer


def test_client_disconnect_while_waiting_for_first_token(relaxed):
    # The engine would answer after a minute and the proxy's timeouts are longer still: only the
    # client leaving can end the engine's request within engine_was_cancelled's wait.
    with client_for(relaxed) as client:
        with pytest.raises(openai.APITimeoutError):
            client.with_options(timeout=0.15).chat.completions.create(
                model=MODEL, messages=MESSAGES, extra_body={"standin": {"first_token_delay": 60}})
    span = relaxed.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "cancelled"
    assert engine_was_cancelled(relaxed)
    assert not relaxed.engine.served[-1].sent  # it never answered


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed on exit: nothing listens there


def test_upstream_down():
    stack = ProxyStack(FAST, upstream=f"http://127.0.0.1:{dead_port()}")
    try:
        with client_for(stack) as client:
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
            assert caught.value.status_code == 502
            assert caught.value.body["code"] == "upstream_unreachable"
            assert "connection refused" in caught.value.message.lower()
            span = stack.wait_request_span()
            assert span.attributes[attr.REQUEST_OUTCOME] == "error"
            assert span.attributes[attr.ERROR_TYPE] == "upstream_unreachable"
            # Other paths report the same way.
            with pytest.raises(openai.APIStatusError) as caught:
                client.models.list()
            assert caught.value.status_code == 502
    finally:
        stack.close()


def test_upstream_garbage_is_passed_on_and_recorded(relaxed):
    with client_for(relaxed) as client:
        with client.chat.completions.with_streaming_response.create(
                model=MODEL, messages=MESSAGES, stream=True, extra_body={"standin": {"garbage": True}}) as response:
            received = b"".join(response.iter_bytes())
    assert received == bytes(relaxed.engine.served[-1].sent)
    assert b"not an event stream" in received
    span = relaxed.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "error"
    assert span.attributes[attr.ERROR_TYPE] == "malformed_sse"
    assert "not an SSE field line" in span.status.description


@pytest.mark.parametrize("status, outcome", [(500, "error"), (503, "rejected"), (429, "rejected")])
def test_upstream_error_status_is_passed_on(relaxed, status, outcome):
    with client_for(relaxed) as client, pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                       extra_body={"standin": {"status": status}})
    assert caught.value.status_code == status
    assert caught.value.response.content == bytes(relaxed.engine.served[-1].sent)
    span = relaxed.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == outcome
    assert span.attributes[attr.ERROR_TYPE] == str(status)


def test_upstream_dying_mid_stream(relaxed):
    received = []
    with client_for(relaxed) as client, pytest.raises(openai.APIError, match="broke off"):
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                extra_body={"standin": {"tokens": 10, "crash_after": 3}})
        for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert received == ["", "tok0 ", "tok1 ", "tok2 "]
    span = relaxed.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "error"
    assert span.attributes[attr.ERROR_TYPE] == "upstream_disconnected"
    assert span.attributes[attr.TOKEN_COUNT] == 3


def test_one_failure_does_not_harm_the_next_request(stack):
    with pytest.raises(openai.APIError):
        stream_text(stack, {"first_token_delay": 3})
    assert stream_text(stack, {"garbage": True}) == ""  # the client's SSE decoder skips what it cannot read
    assert stream_text(stack, {"tokens": 2}) == "tok0 tok1 "
    outcomes = [stack.wait_request_span(n).attributes[attr.REQUEST_OUTCOME] for n in (1, 2, 3)]
    assert outcomes == ["timeout", "error", "success"]


def test_many_clients_leaving_early_leak_nothing(relaxed):
    """Ten of twenty concurrent streams are abandoned: each is counted once, nothing stays in flight."""

    async def one(client: openai.AsyncOpenAI, leave_early: bool) -> None:
        stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                      extra_body={"standin": {"tokens": 40, "interval": 0.01}})
        seen = 0
        async for _ in stream:
            seen += 1
            if leave_early and seen == 3:
                await stream.close()
                return

    async def many() -> None:
        async with openai.AsyncOpenAI(base_url=relaxed.url + "/v1", api_key="unused", max_retries=0) as client:
            await asyncio.gather(*(one(client, i % 2 == 0) for i in range(20)))

    asyncio.run(many())
    for n in range(1, 21):
        relaxed.wait_request_span(n)
    outcomes = sorted(s.attributes[attr.REQUEST_OUTCOME] for s in relaxed.request_spans())
    assert outcomes == ["cancelled"] * 10 + ["success"] * 10
    assert all(served.done.wait(5) for served in relaxed.engine.served)
    assert sum(served.cancelled for served in relaxed.engine.served) == 10
    labels = {"model": MODEL}
    assert relaxed.metric(request_signals.REQUESTS, outcome="cancelled", **labels) == 10
    assert relaxed.metric(request_signals.IN_FLIGHT, **labels) == 0


def test_oversized_non_streaming_answer_is_refused_not_buffered():
    stack = ProxyStack(FAST, max_buffered_response_bytes=4096)
    try:
        with client_for(stack) as client:
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model=MODEL, messages=MESSAGES, extra_body={"standin": {"tokens": 2000}})
            assert caught.value.status_code == 502
            assert caught.value.body["code"] == "upstream_response_too_large"
            span = stack.wait_request_span()
            assert span.attributes[attr.ERROR_TYPE] == "upstream_response_too_large"
            # Streaming is relayed as it comes, whatever its length.
            assert len(stream_text(stack, {"tokens": 2000})) > 4096
    finally:
        stack.close()


def test_sdk_retries_through_the_proxy_count_as_client_retries(stack):
    """The real openai client retries a 503 with x-stainless-retry-count: 1; the proxy counts it, so
    a storm of client retries shows in the retry ratio and not only as more requests."""
    with openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=1, timeout=10) as client:
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                           extra_body={"standin": {"status": 503}})
    assert [s.headers.get("x-stainless-retry-count") for s in stack.engine.served] == ["0", "1"]
    stack.wait_request_span(2)
    labels = {"model": MODEL}
    assert stack.metric(request_signals.REQUESTS, outcome="rejected", **labels) == 2
    assert stack.metric(request_signals.CLIENT_RETRIES, **labels) == 1
    # Created at 0 with the label set, before any error of that kind (DESIGN 8).
    assert stack.metric(request_signals.TIMEOUTS, kind="ttft", **labels) == 0
    assert ("llm_requests_total", "error") in {(s, o) for s, o in _outcomes(stack)}


def _outcomes(stack) -> set[tuple[str, str]]:
    with urllib.request.urlopen(stack.url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, s.labels["outcome"]) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == request_signals.REQUESTS.name}
