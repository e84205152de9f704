"""The per-request token buffer: bounded, truncation counted and marked, the kept timeline as JSON text."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from infersight import attributes as attr
from infersight.instrumentation import RequestTracer, TracerClock, timeline
from infersight.signals import request
from tests.instrumentation.tracing_helpers import make_traced

MODEL = "llama-3-8b"


def test_kept_timeline_travels_as_its_json_text():
    traced = make_traced(random_share=1.0)
    with traced.tracer.start(MODEL, instance="e0") as req:
        for _ in range(5):
            req.token()
    summary = req.summary
    value = traced.one(f"chat {MODEL}").attributes[attr.TOKEN_OFFSETS_US]
    assert isinstance(value, str) and " " not in value  # one string attribute, compact like AsString()
    assert json.loads(value) == summary.offsets_us and len(summary.offsets_us) == 5
    assert attr.TOKEN_TRUNCATED not in traced.one(f"chat {MODEL}").attributes


def test_a_stream_longer_than_the_cap_keeps_its_last_tokens_and_is_counted():
    traced = make_traced(random_share=1.0, max_timeline_tokens=8)
    req = traced.tracer.start(MODEL, instance="e0")
    first = time.perf_counter_ns()
    for _ in range(20):
        req.token()
    times, _ = req._times.readings()
    assert len(req._times) <= 8 and len(times) == 8  # bounded while streaming, not only at the end
    summary = req.finish("stop", output_tokens=20)
    span = traced.one(f"chat {MODEL}")
    offsets = json.loads(span.attributes[attr.TOKEN_OFFSETS_US])
    assert len(offsets) == 8 and offsets == summary.offsets_us
    assert offsets == [(t - req._start_ns) // 1000 for t in times[-8:]]  # the last eight readings
    assert span.attributes[attr.TOKEN_TRUNCATED] is True and span.attributes[attr.TOKEN_COUNT] == 8
    # TTFT is the real first token's, not the first kept one's.
    ttft_ns = round(summary.ttft_s * 1e9)
    assert first - req._start_ns <= ttft_ns < times[0] - req._start_ns
    assert span.attributes[attr.GEN_AI_USAGE_OUTPUT_TOKENS] == 20
    assert traced.metric("infersight_tracing_timelines_truncated_total", model=MODEL) == 1


@pytest.mark.parametrize("usage", [20, None])
def test_tpot_of_a_truncated_stream_is_its_true_time_per_token(monkeypatch, usage):
    """One token a millisecond, 20 of them, 8 kept: TPOT is 1 ms, whether the usage counts all 20
    (gaps from the first token, noted apart) or there is none (the kept readings' own gaps)."""
    from infersight.instrumentation import tracer as tracer_module

    clock = itertools.count(10**12, 1_000_000)  # every reading of the tracer's clock 1 ms after the last
    reading = lambda: next(clock)  # noqa: E731
    monkeypatch.setattr(tracer_module, "_now", reading)  # token()'s hot-path clock
    traced = make_traced(random_share=1.0, max_timeline_tokens=8,
                         clock=TracerClock(perf_ns=reading, wall_ns=time.time_ns))
    req = traced.tracer.start(MODEL, instance="e0")
    for _ in range(20):
        req.token()
    req.finish("stop", output_tokens=usage)
    span = traced.one(f"chat {MODEL}")
    assert span.attributes[attr.TOKEN_TRUNCATED] is True
    assert span.attributes[attr.TPOT_MS] == pytest.approx(1.0)
    tpot = traced.metric(f"{request.TPOT.name}_sum", model=MODEL, instance="e0", pool="", strategy="")
    assert tpot == pytest.approx(0.001)


def test_exactly_the_cap_is_not_a_truncation():
    traced = make_traced(random_share=1.0, max_timeline_tokens=8)
    with traced.tracer.start(MODEL) as req:
        for _ in range(8):
            req.token()
    span = traced.one(f"chat {MODEL}")
    assert len(json.loads(span.attributes[attr.TOKEN_OFFSETS_US])) == 8
    assert attr.TOKEN_TRUNCATED not in span.attributes
    assert traced.metric("infersight_tracing_timelines_truncated_total", model=MODEL) is None


def test_chunks_and_the_sink_are_bounded_too():
    traced = make_traced(random_share=0.0, max_timeline_tokens=4)
    req = traced.tracer.start(MODEL)
    req.tokens(3)
    record = req.token_sink()
    for _ in range(10):
        record(time.perf_counter_ns())
    summary = req.finish("stop")
    assert summary.token_count == 4 and summary.ttft_s is not None
    assert traced.metric("infersight_tracing_timelines_truncated_total", model=MODEL) == 1


def test_the_cap_must_be_positive():
    with pytest.raises(ValueError, match="max_timeline_tokens"):
        RequestTracer(max_timeline_tokens=0)
    with pytest.raises(ValueError, match="max_tokens"):
        timeline.new_buffer(0)


@pytest.mark.parametrize("offsets", [[], [0], [1, 22, 333], list(range(0, 10**7, 99_991))])
def test_offsets_text_is_the_json_the_collector_writes(offsets):
    assert timeline.offsets_json(offsets) == json.dumps(offsets, separators=(",", ":"))
