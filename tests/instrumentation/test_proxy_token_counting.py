"""Exact token counting in the proxy: per-chunk usage where the engine counts, the usage chunk the
client did not ask for kept from it, a refusing engine, and a client that leaves after [DONE]."""

from __future__ import annotations

import json

import pytest

from infersight.instrumentation.proxy.exchange import RequestInfo
from infersight.instrumentation.proxy.sse import StreamInspector


def chunk(content: str | None, completion_tokens: int | None = None, *, choices: bool = True,
          finish: str | None = None) -> bytes:
    payload: dict = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    payload["choices"] = [{"index": 0, "delta": {"content": content} if content is not None else {},
                           "finish_reason": finish}] if choices else []
    if completion_tokens is not None:
        payload["usage"] = {"prompt_tokens": 10, "completion_tokens": completion_tokens,
                            "total_tokens": 10 + completion_tokens}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def test_per_chunk_usage_counts_tokens_that_carry_no_text():
    """vLLM holds back a token that does not end a character and sends it with the next text: the
    chunk count says 3, the engine's running count says 5."""
    inspector = StreamInspector()
    counts = [inspector.feed(c) for c in (chunk("", 0), chunk("ab", 1), chunk("c\u00e9", 3), chunk("d", 4),
                                          chunk("", 5, finish="length"), chunk(None, 5, choices=False))]
    assert counts == [0, 1, 2, 1, 1, 0]
    assert inspector.facts.counted_per_chunk and inspector.facts.output_tokens == 5


def test_without_per_chunk_usage_one_per_text_chunk_is_a_lower_bound():
    inspector = StreamInspector()
    counts = [inspector.feed(c) for c in (chunk("ab"), chunk("c\u00e9"), chunk("", finish="length"),
                                          chunk(None, 5, choices=False))]
    assert counts == [1, 1, 0, 0]
    assert not inspector.facts.counted_per_chunk
    assert inspector.facts.output_tokens == 5  # the final usage still gives the exact total


def test_the_usage_chunk_the_client_did_not_ask_for_is_not_relayed():
    inspector = StreamInspector(drop_usage_chunk=True)
    stream = chunk("a", 1) + chunk("b", 2, finish="stop") + chunk(None, 2, choices=False) + b"data: [DONE]\n\n"
    relayed = b""
    for i in range(0, len(stream), 7):  # any chunking
        inspector.feed(stream[i:i + 7])
        relayed += inspector.take()
    inspector.finish()
    relayed += inspector.take()
    assert relayed == chunk("a", 1) + chunk("b", 2, finish="stop") + b"data: [DONE]\n\n"
    assert inspector.facts.output_tokens == 2 and inspector.done


def test_streaming_requests_ask_for_per_chunk_usage_once():
    body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()
    info = RequestInfo.parse("chat", body)
    options = json.loads(info.counted_body)["stream_options"]
    assert options == {"include_usage": True, "continuous_usage_stats": True} and not info.client_wants_usage
    # Once the proxy no longer asks (--no-stream-usage, or a refusing engine), no second body is built.
    assert RequestInfo.parse("chat", body, ask_usage=False).counted_body is None
    asked = json.dumps({"model": "m", "stream": True,
                        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
    assert RequestInfo.parse("chat", asked).counted_body is None  # already there: the body goes as it is
    usage_only = RequestInfo.parse("chat", json.dumps({"model": "m", "stream": True,
                                                       "stream_options": {"include_usage": True}}).encode())
    assert usage_only.client_wants_usage and usage_only.counted_body is not None
    assert RequestInfo.parse("chat", b'{"model": "m"}').counted_body is None  # not streamed
    assert RequestInfo.parse("chat", b"not json").counted_body is None


def test_a_client_that_leaves_after_done_completed_its_request():
    """The openai client closes the connection once it reads [DONE], before the chunked body ends.
    Seen twice in ~120 streams after an engine restart as a false `cancelled`: now `success`."""
    import socket

    from infersight.attributes import REQUEST_OUTCOME, Outcome
    from tests.instrumentation.proxy_harness import ProxyStack

    stack = ProxyStack()
    try:
        host, port = stack.url.removeprefix("http://").split(":")
        body = json.dumps({"model": "standin-model", "stream": True, "messages": [{"role": "user", "content": "x"}],
                           "standin": {"tokens": 4, "linger_after_done": 2}}).encode()
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            received = b""
            while b"data: [DONE]" not in received:
                data = conn.recv(65536)
                assert data, received
                received += data
        # closed here, while the engine (and so the proxy) has not ended the body yet
        span = stack.wait_request_span(timeout=10)
        assert span.attributes[REQUEST_OUTCOME] == Outcome.SUCCESS
        assert span.attributes["gen_ai.usage.output_tokens"] == 4
        assert b'"usage"' not in received  # the usage chunk the proxy asked for is not the client's
    finally:
        stack.close()


def test_an_engine_that_refuses_per_chunk_usage_gets_the_clients_body():
    import openai

    from tests.instrumentation.proxy_harness import ProxyStack

    stack = ProxyStack()
    try:
        api = openai.OpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0)
        for _ in range(2):
            chunks = list(api.chat.completions.create(model="standin-model", messages=[], stream=True,
                                                      extra_body={"standin": {"tokens": 3,
                                                                              "refuse_continuous_usage": True}}))
            assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
        bodies = [served.body for served in stack.engine.served]
        # First the proxy's ask (refused), then the client's own body; after that, never asked again.
        assert [("stream_options" in b) for b in bodies] == [True, False, False]
        assert stack.context.stream_usage is False
        assert stack.wait_request_span(2).attributes["llm.request.outcome"] == "success"
    finally:
        stack.close()


def test_a_clients_own_bad_request_does_not_turn_per_chunk_usage_off():
    """A 400 to the proxy's ask may be the client's own (a prompt over the context length): the
    client's body gets the same 400, so the engine did not refuse the ask; keep asking."""
    import openai

    from tests.instrumentation.proxy_harness import ProxyStack

    stack = ProxyStack()
    try:
        api = openai.OpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            list(api.chat.completions.create(model="standin-model", messages=[], stream=True,
                                             extra_body={"standin": {"status": 400}}))
        assert stack.context.stream_usage is True
        assert stack.wait_request_span(1).attributes["llm.request.outcome"] == "error"
        chunks = list(api.chat.completions.create(model="standin-model", messages=[], stream=True,
                                                  extra_body={"standin": {"tokens": 3}}))
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
        bodies = [served.body for served in stack.engine.served]
        # The ask, the client's body (the same 400), then the next request asks again.
        assert [("stream_options" in b) for b in bodies] == [True, False, True]
    finally:
        stack.close()


def test_the_running_usage_on_every_chunk_is_not_relayed_when_the_client_did_not_ask_for_it():
    """continuous_usage_stats puts usage on every chunk (vLLM); a client that asked only for
    include_usage still gets usage once, in the usage chunk, as the OpenAI API sends it."""
    inspector = StreamInspector(strip_chunk_usage=True)
    stream = (chunk("a", 1) + chunk("b\u00e9", 2, finish="stop") + chunk(None, 2, choices=False)
              + b"data: [DONE]\n\n")
    relayed = b""
    for i in range(0, len(stream), 5):
        inspector.feed(stream[i:i + 5])
        relayed += inspector.take()
    inspector.finish()
    relayed += inspector.take()
    events = [json.loads(e[len(b"data: "):]) for e in relayed.split(b"\n\n") if e and e != b"data: [DONE]"]
    assert [("usage" in e) for e in events] == [False, False, True]
    assert [e["choices"][0]["delta"].get("content") for e in events[:2]] == ["a", "b\u00e9"]
    assert "b\u00e9".encode() in relayed  # UTF-8 as the engine wrote it, not \u escapes
    assert relayed.endswith(chunk(None, 2, choices=False) + b"data: [DONE]\n\n")
    assert inspector.facts.counted_per_chunk and inspector.facts.output_tokens == 2


@pytest.mark.parametrize("include_usage", [False, True])
def test_clients_through_the_proxy_see_usage_only_as_they_asked(include_usage):
    import openai

    from tests.instrumentation.proxy_harness import ProxyStack

    stack = ProxyStack()
    try:
        api = openai.OpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0)
        options = {"stream_options": {"include_usage": True}} if include_usage else {}
        chunks = list(api.chat.completions.create(model="standin-model", messages=[], stream=True, **options,
                                                  extra_body={"standin": {"tokens": 4, "continuous_usage": True}}))
        served = stack.engine.served[-1]
        assert served.body["stream_options"]["continuous_usage_stats"] is True  # the proxy asked
        assert all(c.usage is None for c in chunks if c.choices)
        usage = [c.usage.completion_tokens for c in chunks if not c.choices]
        assert usage == ([4] if include_usage else [])
        span = stack.wait_request_span(1)
        assert span.attributes["gen_ai.usage.output_tokens"] == 4
    finally:
        stack.close()


def test_a_compact_chunk_keeps_the_engines_own_bytes_minus_its_usage():
    """vLLM writes compact JSON with usage last: the member is cut out of the engine's text, which is
    otherwise relayed as it came (a text that mentions "usage" included)."""
    text = 'say ,"usage":{} and \u00e9'
    engine = ('{"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,'
              '"delta":{"content":' + json.dumps(text, ensure_ascii=False) + '},"logprobs":null,"finish_reason":null}]')
    event = ("data: " + engine + ',"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}\n\n').encode()
    inspector = StreamInspector(strip_chunk_usage=True)
    assert inspector.feed(event) == 1
    assert inspector.take() == ("data: " + engine + "}\n\n").encode()
    assert inspector.facts.tokens_counted == 1
