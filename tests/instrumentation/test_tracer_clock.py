"""A tracer on its own clock: a replay of requests that happened elsewhere (the simulator's, in the
real-time demo) records their own times, not the moment the replay ran."""

from __future__ import annotations

from infersight import attributes as attr
from infersight.instrumentation import TracerClock
from tests.instrumentation.tracing_helpers import make_traced

MODEL = "gemma-27b-int4"
BASE_NS = 1_700_000_000 * 10**9  # the wall time simulated second 0 stands for


class Manual:
    def __init__(self) -> None:
        self.t_ns = 0

    def at(self, seconds: float) -> None:
        self.t_ns = round(seconds * 1e9)


def test_a_replayed_request_keeps_its_own_times():
    manual = Manual()
    clock = TracerClock(perf_ns=lambda: manual.t_ns, wall_ns=lambda: BASE_NS + manual.t_ns)
    traced = make_traced(clock=clock)
    manual.at(100.0)
    req = traced.tracer.start(MODEL, pool="stable", strategy="least_conn")
    req.queued()
    manual.at(100.5)
    req.routed("sim-n01:8000")
    sink = req.token_sink()
    for i in range(10):  # first token at 109 s (a 9 s TTFT), then one every 50 ms
        sink(round((109.0 + 0.05 * i) * 1e9))
    manual.at(109.45)
    summary = req.finish("stop", input_tokens=2000, output_tokens=10)

    assert summary.ttft_s == 9.0
    assert abs(summary.e2e_s - 9.45) < 1e-9 and summary.queue_s == 0.5 and summary.token_count == 10
    span = traced.one(f"chat {MODEL}")
    assert span.start_time == BASE_NS + 100 * 10**9 and span.end_time == BASE_NS + round(109.45e9)
    assert span.attributes[attr.TTFT_MS] == 9000.0
    queue = traced.one(attr.SPAN_GATEWAY_QUEUE)
    assert (queue.start_time, queue.end_time) == (BASE_NS + 100 * 10**9, BASE_NS + round(100.5e9))
    assert traced.metric("llm_time_to_first_token_seconds_sum", model=MODEL, instance="sim-n01:8000",
                         pool="stable", strategy="least_conn") == 9.0


def test_token_readings_from_another_clock_are_discarded_not_exported():
    manual = Manual()
    traced = make_traced(clock=TracerClock(perf_ns=lambda: manual.t_ns, wall_ns=lambda: BASE_NS + manual.t_ns),
                         random_share=1.0)
    manual.at(5.0)
    req = traced.tracer.start(MODEL)
    req.token()  # reads time.perf_counter_ns, not the replay's clock
    manual.at(6.0)
    summary = req.finish("stop")
    assert summary.token_count == 0 and summary.offsets_us is None
