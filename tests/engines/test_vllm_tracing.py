"""vLLM 0.32's own tracing (``--otlp-traces-endpoint``) into our receiver and ClickHouse.

The session's vLLM exports to our receiver (tests/engines/conftest.py). Requests made here, streamed
and not, chat and text, some queued behind others, come back as ``llm_request`` spans whose TTFT,
queue, TPOT and token columns (schema version 6) equal what vLLM itself reported: the answer's
``usage`` per request, and over all of them the increase of vLLM's own /metrics histograms. A request
that carries a W3C ``traceparent`` lands in the caller's trace.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight import attributes as attr
from infersight.pipelines.schema import ddl
from tests.engines.vllm_server import CLIENT_TIMEOUT_S, SERVED_MODEL, SERVICE_NAME

# vLLM's families whose increase the spans must add up to (vllm/v1/metrics/loggers.py): each observes
# the same per-request value that do_tracing puts on the span.
TTFT_SUM, TTFT_COUNT = "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"
QUEUE_SUM = "vllm:request_queue_time_seconds_sum"
TPOT_SUM = "vllm:request_time_per_output_token_seconds_sum"
PROMPT_SUM, PROMPT_COUNT = "vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens_count"
GENERATION_SUM = "vllm:request_generation_tokens_sum"
FAMILIES = (TTFT_SUM, TTFT_COUNT, QUEUE_SUM, TPOT_SUM, PROMPT_SUM, PROMPT_COUNT, GENERATION_SUM,
            "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_requests_running")


def engine_values(vllm) -> dict[str, float]:
    totals = dict.fromkeys(FAMILIES, 0.0)
    for family in text_string_to_metric_families(vllm.metrics_text()):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals


def wait_for(condition, what, timeout: float = 60.0):
    """``condition()``'s first true value; ``what`` (text, or a function giving it) says what never came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {what() if callable(what) else what} within {timeout:.0f} s")


def spans(clickhouse_server, database: str, request_ids: list[str]) -> dict[str, dict]:
    rows = clickhouse_server.client().query(
        f"SELECT {ddl.span_attr(attr.GEN_AI_REQUEST_ID)} AS id, SpanName, SpanKind, ServiceName, TraceId, "
        "ParentSpanId, TtftMs, QueueMs, TpotMs, InputTokens, OutputTokens, IsRequest, Duration "
        f"FROM {{db:Identifier}}.{ddl.DEFAULT_TABLES.traces} WHERE id IN {{ids:Array(String)}}",
        parameters={"db": database, "ids": request_ids})
    return {row[0]: dict(zip(rows.column_names, row, strict=True)) for row in rows.result_rows}


# Long enough that the first four are still decoding when the other three reach the engine (at 16
# tokens a quiet machine finished them first and nobody queued); short enough for the 48 KV blocks.
ANSWER_TOKENS = 120


async def requests(vllm, traceparent: str) -> list[tuple[str, object]]:
    """Seven requests at once on an engine that runs four: (vLLM's request id, the answer's usage)."""
    import openai

    api = openai.AsyncOpenAI(base_url=vllm.base_url + "/v1", api_key="none", max_retries=0, timeout=CLIENT_TIMEOUT_S)
    prompt = "Trace me through the engine, token by token. "

    async def chat(n: int, stream: bool, headers: dict):
        kwargs = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        answer = await api.chat.completions.create(
            model=SERVED_MODEL, messages=[{"role": "user", "content": prompt * (n + 1)}],
            max_tokens=ANSWER_TOKENS + 4 * n, extra_body={"ignore_eos": True}, extra_headers=headers, **kwargs)
        if stream:
            usage = [chunk.usage async for chunk in answer if chunk.usage is not None][-1]
        else:
            usage = answer.usage
        return "chatcmpl-" + headers["X-Request-Id"], usage

    async def text(n: int, headers: dict):
        answer = await api.completions.create(model=SERVED_MODEL, prompt=prompt * (n + 2), max_tokens=24,
                                              extra_body={"ignore_eos": True}, extra_headers=headers)
        return f"cmpl-{headers['X-Request-Id']}-0", answer.usage  # a text completion's id names its prompt

    def ids(extra: dict | None = None) -> dict:
        return {"X-Request-Id": uuid.uuid4().hex} | (extra or {})

    calls = [chat(n, stream=n % 2 == 0, headers=ids()) for n in range(5)]
    calls += [text(0, ids()), chat(5, stream=False, headers=ids({"traceparent": traceparent}))]
    try:
        return await asyncio.gather(*calls)
    finally:
        await api.close()


def test_vllm_spans_land_with_the_engines_own_numbers(vllm, vllm_trace_store, clickhouse_server):
    # Seven requests at once on four sequences: three wait for one, if all seven reach vLLM before the
    # first four finish. In two fresh-clone CI runs none waited (the cause is not established: the
    # client's seven sends are one asyncio loop on two cores that vLLM's threads share); here, warm or
    # cold, three did every time. A burst where nobody waited still checks every span against vLLM's
    # own numbers, and another one is sent, up to three.
    for _ in range(3):
        waited = burst(vllm, vllm_trace_store, clickhouse_server)
        if waited >= 3:
            break
    # Three waited for a sequence, most of their time to first token.
    assert waited >= 3


def burst(vllm, vllm_trace_store, clickhouse_server) -> int:
    """One burst of seven requests, every span checked; how many spent most of their TTFT queued."""
    wait_for(lambda: engine_values(vllm)["vllm:num_requests_running"] == 0, "idle vLLM")
    before = engine_values(vllm)
    trace_id, parent_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    answered = asyncio.run(requests(vllm, f"00-{trace_id}-{parent_id}-01"))
    request_ids = [request_id for request_id, _ in answered]
    after = wait_for(lambda: (v := engine_values(vllm))[PROMPT_COUNT] - before[PROMPT_COUNT] == len(answered) and v,
                     "count of every request in vLLM's /metrics")
    stored = {}

    def all_stored() -> bool:
        stored.update(spans(clickhouse_server, vllm_trace_store.database, request_ids))
        return len(stored) == len(answered)

    wait_for(all_stored, lambda: f"span for {sorted(set(request_ids) - set(stored))} in ClickHouse")

    for request_id, usage in answered:
        span = stored[request_id]
        assert (span["SpanName"], span["SpanKind"]) == (attr.VLLM_SPAN_NAME, "Server")
        assert span["ServiceName"] == SERVICE_NAME
        assert (span["InputTokens"], span["OutputTokens"]) == (usage.prompt_tokens, usage.completion_tokens)
        assert usage.completion_tokens > 1 and span["TpotMs"] > 0 and span["QueueMs"] >= 0
        assert 0 < span["TtftMs"] <= span["Duration"] / 1e6
        assert span["IsRequest"] is False  # an engine span, not the request span of a gateway or proxy
    traced = stored[request_ids[-1]]
    assert (traced["TraceId"], traced["ParentSpanId"]) == (trace_id, parent_id)  # it joined the caller's trace

    def increase(name: str) -> float:
        return after[name] - before[name]

    assert increase(TTFT_COUNT) == len(answered)
    assert sum(s["TtftMs"] for s in stored.values()) / 1000 == pytest.approx(increase(TTFT_SUM), rel=1e-9)
    assert sum(s["QueueMs"] for s in stored.values()) / 1000 == pytest.approx(increase(QUEUE_SUM), rel=1e-9)
    assert sum(s["TpotMs"] for s in stored.values()) / 1000 == pytest.approx(increase(TPOT_SUM), rel=1e-9)
    input_tokens = sum(s["InputTokens"] for s in stored.values())
    output_tokens = sum(s["OutputTokens"] for s in stored.values())
    assert input_tokens == increase(PROMPT_SUM) == increase("vllm:prompt_tokens_total")
    assert output_tokens == increase(GENERATION_SUM) == increase("vllm:generation_tokens_total")
    return sum(1 for s in stored.values() if s["QueueMs"] > s["TtftMs"] / 2)
