"""The request-end analysis of a token timeline: the C pass and the Python passes agree exactly.

The tracer uses the C extension (instrumentation/_ctimeline.c) when it is built, and Python otherwise;
`make venv` builds it, so CI must have it.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from prometheus_client import CollectorRegistry

from infersight.instrumentation import timeline
from infersight.instrumentation.metrics import RequestMetrics

BOUNDS_NS = RequestMetrics(CollectorRegistry()).gap_bounds_ns
built = timeline._c_analyze is not None


def test_the_extension_is_built_where_ci_runs():
    if not built and os.environ.get("CI") != "true":
        pytest.skip("the C extension is not built here (no compiler?); timeline.py uses its Python passes")
    assert built, "instrumentation/_ctimeline.c did not build: `make venv` needs gcc and the Python headers"


def test_a_timeline_by_hand():
    start = 1_000_000_000
    times = [start + 120_000_000, start + 130_000_000, start + 380_000_000, start + 390_000_000]
    for compiled in (True, False):
        a = timeline.analyze(times, start, BOUNDS_NS, keep=True, compiled=compiled)
        assert a.summary == timeline.TimelineSummary(4, 90.0, 250.0, 2, 130.0)
        assert a.offsets_us == [120_000, 130_000, 380_000, 390_000]
        assert a.offsets_json == "[120000,130000,380000,390000]"
        assert sum(a.gap_counts) == 3 and len(a.gap_counts) == len(BOUNDS_NS) + 1
        # 10 ms twice (exactly a bound: counted there, as le="0.01"), 250 ms once (in le="0.3")
        assert a.gap_counts[BOUNDS_NS.index(10_000_000.0)] == 2
        assert a.gap_counts[BOUNDS_NS.index(300_000_000.0)] == 1


@pytest.mark.parametrize("count", [0, 1, 2, 3, 200, 5000])
@pytest.mark.parametrize("keep", [True, False])
def test_compiled_and_python_agree(count, keep):
    if not built:
        pytest.skip("the C extension is not built here")
    rng = random.Random(count)
    start = 987_654_321_000
    times, now = [], start + rng.randrange(10**9)
    for _ in range(count):
        # ties (the first longest gap wins), gaps exactly on bounds, long stalls, sub-microsecond offsets
        now += rng.choice([10_000_000, 10_000_000, int(BOUNDS_NS[3]), rng.randrange(1, 3 * 10**9), 999])
        times.append(now)
    c = timeline.analyze(times, start, BOUNDS_NS, keep)
    py = timeline.analyze(times, start, BOUNDS_NS, keep, compiled=False)
    assert c == py
    assert (c.offsets_us is None) == (not keep)


def test_refuses_what_is_not_a_reading():
    if not built:
        pytest.skip("the C extension is not built here")
    with pytest.raises(TypeError):
        timeline.analyze([1, "2"], 0, BOUNDS_NS, keep=True)
    with pytest.raises(OverflowError):
        timeline.analyze([1, 2**70], 0, BOUNDS_NS, keep=False)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_buffer_keeps_the_last_readings_and_the_first(compiled):
    if compiled and not built:
        pytest.skip("the C extension is not built here")
    buffer = timeline.new_buffer(4, compiled=compiled)
    assert (len(buffer), buffer.first, buffer.readings()) == (0, None, ([], False))
    before = time.perf_counter_ns()
    buffer.token()  # perf_counter_ns's clock (CLOCK_MONOTONIC), read where the token arrives
    after = time.perf_counter_ns()
    [reading], truncated = buffer.readings()
    assert before <= reading <= after and buffer.first == reading and not truncated
    buffer.extend([after + 1, after + 2, after + 3])
    assert buffer.readings() == ([reading, after + 1, after + 2, after + 3], False)  # exactly the cap
    for n in range(4, 11):
        buffer.append(after + n)
    assert buffer.readings() == ([after + 7, after + 8, after + 9, after + 10], True)
    assert len(buffer) == 4 and buffer.maxlen == 4 and buffer.first == reading
    with pytest.raises(ValueError, match="max_tokens"):
        timeline.new_buffer(0, compiled=compiled)


def test_the_c_buffer_refuses_what_is_not_a_reading():
    if not built:
        pytest.skip("the C extension is not built here")
    buffer = timeline.new_buffer(4)
    with pytest.raises(TypeError):
        buffer.append("soon")
    with pytest.raises(OverflowError):
        buffer.append(2**64)
    assert buffer.readings() == ([], False)
