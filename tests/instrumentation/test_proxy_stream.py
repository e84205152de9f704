"""The proxy on the happy path, with the real ``openai`` client in front and the engine stand-in behind.

Checks that bytes pass unchanged, tokens are timed, usage is read, the traceparent is created or
continued, spans carry the GenAI attributes and /metrics serves the catalog metrics.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import urllib.request

import openai
import pytest

from infersight import attributes as attr
from infersight.signals import request as request_signals
from tests.instrumentation.proxy_harness import ProxyStack

MODEL = "standin-model"
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture
def stack():
    stack = ProxyStack()
    yield stack
    stack.close()


@pytest.fixture
def client(stack):
    with openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=10) as client:
        yield client


def test_streaming_chat_passes_bytes_and_records_tokens(stack, client):
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True},
            extra_body={"standin": {"tokens": 6, "interval": 0.01}}) as response:
        received = b"".join(response.iter_bytes())
    assert received == bytes(stack.engine.served[-1].sent)

    span = stack.wait_request_span()
    attributes = span.attributes
    assert span.name == f"chat {MODEL}"
    assert attributes[attr.REQUEST_OUTCOME] == "success"
    assert attributes[attr.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes[attr.GEN_AI_REQUEST_MODEL] == MODEL
    assert attributes[attr.TOKEN_COUNT] == 6  # the role chunk and the finish chunk carry no token
    assert attributes[attr.GEN_AI_USAGE_INPUT_TOKENS] == 7
    assert attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 6
    assert attributes[attr.CACHED_INPUT_TOKENS] == 3
    assert tuple(attributes[attr.GEN_AI_RESPONSE_FINISH_REASONS]) == ("length",)
    # Tokens were 10 ms apart at the engine; the proxy's timestamps must show that spacing.
    assert attributes[attr.TOKEN_GAP_MEAN_MS] >= 5
    assert attributes[attr.INSTANCE] == stack.engine_url.removeprefix("http://")
    host, port = stack.engine_url.removeprefix("http://").rsplit(":", 1)
    assert attributes[attr.SERVER_ADDRESS] == host and attributes[attr.SERVER_PORT] == int(port)


def test_openai_client_reads_the_stream_through_the_proxy(stack, client):
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                            extra_body={"standin": {"tokens": 4}})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "tok0 tok1 tok2 tok3 "
    span = stack.wait_request_span()
    assert span.attributes[attr.TOKEN_COUNT] == 4
    # No usage asked for: output tokens are the counted token chunks.
    assert span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 4


def test_text_completions_stream(stack, client):
    stream = client.completions.create(model=MODEL, prompt="say", stream=True, max_tokens=3,
                                       extra_body={"standin": {"tokens": 3}})
    assert "".join(c.choices[0].text for c in stream if c.choices) == "tok0 tok1 tok2 "
    span = stack.wait_request_span()
    assert span.name == f"text_completion {MODEL}"
    assert span.attributes[attr.GEN_AI_REQUEST_MAX_TOKENS] == 3
    assert span.attributes[attr.TOKEN_COUNT] == 3


def test_non_streaming_chat(stack, client):
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES,
                                                            extra_body={"standin": {"tokens": 5}})
    assert raw.http_response.content == bytes(stack.engine.served[-1].sent)
    assert raw.parse().choices[0].message.content == "tok0 tok1 tok2 tok3 tok4 "
    span = stack.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "success"
    assert span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert span.attributes[attr.TOKEN_COUNT] == 0  # nothing streamed: no token times, no TTFT
    assert attr.TTFT_MS not in span.attributes


def test_traceparent_is_continued(stack, client):
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                        extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"}))
    span = stack.wait_request_span()
    assert f"{span.context.trace_id:032x}" == trace_id
    assert f"{span.parent.span_id:016x}" == parent_id
    # The engine got the same trace id, with the proxy's upstream span as its parent.
    upstream = stack.upstream_span(span)
    sent = stack.engine.served[-1].headers["traceparent"]
    assert sent == f"00-{trace_id}-{upstream.context.span_id:016x}-01"


def test_gateway_request_id_is_kept(stack, client):
    client.chat.completions.create(model=MODEL, messages=MESSAGES, extra_headers={"X-Request-Id": "gw-42"})
    assert stack.wait_request_span().attributes[attr.REQUEST_ID] == "gw-42"
    assert stack.engine.served[-1].headers["X-Request-Id"] == "gw-42"  # and the engine still sees it


def test_traceparent_is_created(stack, client):
    list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    span = stack.wait_request_span()
    assert span.parent is None
    _, trace_id, _, _ = stack.engine.served[-1].headers["traceparent"].split("-")
    assert trace_id == f"{span.context.trace_id:032x}"


def test_metrics_endpoint_serves_catalog_metrics(stack, client):
    for _ in range(2):
        list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    client.chat.completions.create(model=MODEL, messages=MESSAGES)
    labels = {"model": MODEL, "instance": stack.engine_url.removeprefix("http://")}
    assert stack.metric(request_signals.REQUESTS, outcome="success", **labels) == 3
    assert stack.metric(request_signals.TTFT, "_count", **labels) == 2  # streamed requests only
    assert stack.metric(request_signals.OUTPUT_TOKENS, **labels) == 15
    assert stack.metric(request_signals.IN_FLIGHT, **labels) == 0


def test_other_paths_pass_through(stack, client):
    assert [m.id for m in client.models.list()] == ["standin-model"]
    with urllib.request.urlopen(stack.url + "/v1/models?x=1", timeout=5) as response:
        assert json.load(response)["object"] == "list"
    assert stack.request_spans() == []  # not instrumented


def test_request_that_is_not_json_reaches_the_engine(stack, client):
    """The proxy does not judge the request: the engine's own 400 comes back unchanged."""
    req = urllib.request.Request(stack.url + "/v1/chat/completions", data=b"{oops", method="POST",
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=5)
    assert caught.value.code == 400
    assert b"not JSON" in caught.value.read()
    span = stack.wait_request_span()
    assert span.attributes[attr.REQUEST_OUTCOME] == "error"
    assert span.attributes[attr.ERROR_TYPE] == "400"
    assert span.attributes[attr.GEN_AI_REQUEST_MODEL] == "unknown"


def test_oversized_request_gets_413_and_harms_nothing():
    stack = ProxyStack(max_request_bytes=4096)
    try:
        with openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=10) as client:
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 5000}])
            assert caught.value.status_code == 413
            assert caught.value.body["code"] == "request_too_large"
            assert stack.engine.served == []  # never forwarded
            reply = client.chat.completions.create(model=MODEL, messages=MESSAGES)
            assert reply.choices[0].message.content.startswith("tok0")
    finally:
        stack.close()


def test_concurrent_streams_do_not_mix(stack):
    """Twenty streams at once (the async openai client): each gets its own tokens, all are counted."""

    async def one(client: openai.AsyncOpenAI, tokens: int) -> str:
        stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,
                                                      extra_body={"standin": {"tokens": tokens, "interval": 0.005}})
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    async def many() -> list[str]:
        async with openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0) as client:
            return await asyncio.gather(*(one(client, n) for n in range(1, 21)))

    texts = asyncio.run(many())
    assert texts == ["".join(f"tok{i} " for i in range(n)) for n in range(1, 21)]
    labels = {"model": MODEL, "instance": stack.engine_url.removeprefix("http://")}
    assert stack.metric(request_signals.REQUESTS, outcome="success", **labels) == 20
    assert stack.metric(request_signals.OUTPUT_TOKENS, **labels) == sum(range(1, 21))
    assert stack.metric(request_signals.IN_FLIGHT, **labels) == 0


def test_passthrough_keeps_the_clients_encoding_choice(stack):
    """No Accept-Encoding from the client: no gzip from the proxy. Asked for gzip: gzip, relayed as is."""
    host, port = stack.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    connection.putrequest("GET", "/v1/models", skip_accept_encoding=True)
    connection.endheaders()
    response = connection.getresponse()
    assert response.getheader("Content-Encoding") is None
    assert json.loads(response.read())["object"] == "list"
    connection.request("GET", "/v1/models", headers={"Accept-Encoding": "gzip"})
    response = connection.getresponse()
    assert response.getheader("Content-Encoding") == "gzip"
    assert json.loads(gzip.decompress(response.read()))["object"] == "list"
    connection.close()
