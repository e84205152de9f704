"""Decode stalls from the engine's physics, in virtual time (simulator/engine.py, decode_log.py).

Chunked prefill: a long prompt's prefill shares each step with the running decodes, so while it
runs every decoding request gets one token per chunk step, and that step lasts as long as the
chunk's compute. Preemption (vLLM's recompute): the request pauses with the tokens it made, and
carries on after them when it is scheduled again. Both are read back as a trace's token timeline.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from infersight.config import Config
from infersight.simulator.decode_log import DecodeLog
from infersight.simulator.engine import SimEngine
from infersight.simulator.physics import Physics, max_batched_tokens
from infersight.simulator.request import SimRequest
from infersight.simulator.workload import Draw

TICK = 2.0


def _engine(kv_tokens: int | None = None) -> SimEngine:
    cap = Config().capacity
    physics = Physics.build(cap.model, cap.gpu_spec(), cap.prefill_utilization)
    if kv_tokens is not None:
        physics = dataclasses.replace(physics, kv_capacity_tokens=kv_tokens)
    engine = SimEngine("sim-n01:8000", cap.model.name, "stable", "sim-n01", 0, physics)
    engine.start(0.0, cold=False)
    return engine


def _request(rid: int, prompt: int, output: int, at: float) -> SimRequest:
    return SimRequest(rid, "m", "stable", "least_conn", Draw(prompt, output, "", 0), at, 0, at + 3600)


def _run(engine: SimEngine, log: DecodeLog, until: float, t: float, arrivals=()) -> tuple[float, list[SimRequest]]:
    """Tick by tick as the fleet does, logging every tick; ``arrivals``: (time, request) submitted in their tick."""
    done = []
    pending = sorted(arrivals, key=lambda a: a[0])
    while t < until:
        while pending and pending[0][0] < t + TICK:
            at, req = pending.pop(0)
            engine.submit(req, at)
        done += engine.advance(t, t + TICK)
        t += TICK
        log.record([engine], t)
    return t, done


def _times(log: DecodeLog, engine: SimEngine, req: SimRequest, count: int, end: float) -> list[float]:
    times = log.token_times(engine.instance, req.first_token, req.s_start, count, end, req.resumes or ())
    assert times is not None and len(times) == count
    return times


def test_the_step_budget_is_vllms_default_for_the_gpu():
    from infersight.capacity import GPU_PRESETS

    assert {name: max_batched_tokens(GPU_PRESETS[name]) for name in ("A100-80G", "H100-SXM", "H200", "L40S")} == {
        "A100-80G": 2048, "H100-SXM": 8192, "H200": 8192, "L40S": 2048}


def test_a_long_prefill_mid_decode_is_a_gap_in_every_decoding_stream_at_that_moment():
    engine, log = _engine(), DecodeLog()
    log.record([engine], 0.0)
    streams = [_request(i, 200, 20_000, 0.0) for i in range(4)]
    long_prompt = _request(99, 30_000, 10, 10.5)  # arrives mid-tick, while the four decode
    t, _ = _run(engine, log, 16.0, 0.0, [(0.0, r) for r in streams] + [(10.5, long_prompt)])

    physics = engine.physics
    chunks = math.ceil(30_000 / (physics.max_batched_tokens - len(streams)))
    chunk_s = 30_000 / chunks / physics.prefill_tokens_per_s  # one chunk's compute: the magnitude of the gap
    prefill_start, prefill_end = 10.5, 10.5 + 30_000 / physics.prefill_tokens_per_s
    for req in streams:
        count = int(engine.S - req.s_start) + 1
        times = _times(log, engine, req, count, t)
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        longest = max(range(len(gaps)), key=gaps.__getitem__)
        median = statistics.median(gaps)
        # the longest gap is one chunk step (plus at most the plain step before it), far above the
        # usual inter-token time, inside the prefill: tokens come when each chunk step ends
        assert chunk_s - 1e-9 <= gaps[longest] <= chunk_s + engine.step_s(t), (gaps[longest], chunk_s)
        assert gaps[longest] > 20 * median
        assert prefill_start - engine.step_s(t) <= times[longest] and times[longest + 1] <= prefill_end + 1e-9
        stalled = [g for g in gaps if g > 10 * median]
        assert chunks - 1 <= len(stalled) <= chunks + 1  # one long step per chunk, no more
        # and the engine says what ran then: that prompt's prefill
        moment = log.moment(engine.instance, (times[longest] + times[longest + 1]) / 2)
        assert moment.prefill == (long_prompt.id, 30_000)
        assert abs(moment.step_s - chunk_s) < 1e-6
    # before the long prompt came, no such gap
    quiet = log.moment(engine.instance, 9.0)
    assert quiet.prefill is None and quiet.step_s < chunk_s / 20


def test_a_preempted_request_pauses_and_resumes_without_losing_its_tokens():
    # a KV cache of 6,400 tokens: three streams growing to 3,000 tokens each overflow it after ~1,130
    # tokens; the latest admitted is preempted (vLLM preempts the last of its running list), the two
    # others fit to their end
    engine, log = _engine(kv_tokens=6400), DecodeLog()
    log.record([engine], 0.0)
    reqs = [_request(i, 1000, 2000, 0.0) for i in range(3)]
    t, done = _run(engine, log, 4.0, 0.0, [(0.0, r) for r in reqs])
    first_tokens = {r.id: r.first_token for r in reqs}
    t, more = _run(engine, log, 400.0, t)
    done += more
    assert engine.stats.preemptions == 1
    victim = reqs[2]
    assert victim.resumes and not reqs[0].resumes and not reqs[1].resumes
    assert sorted(r.id for r in done) == [0, 1, 2]  # every request finished, the victim too
    assert victim.first_token == first_tokens[victim.id]  # its first token stays: paused, not restarted
    resumed_at = victim.resumes[1][0]  # the first token made after the pause
    assert 1 < resumed_at < victim.draw.output_tokens

    times = _times(log, engine, victim, victim.draw.output_tokens, t)  # all 2000 tokens, none lost
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert all(g >= 0 for g in gaps)
    pause = gaps[resumed_at - 1]
    assert pause == max(gaps) and pause > 50 * statistics.median(gaps)
    # it waited for room: it resumed only once another request had finished and freed its KV
    assert times[resumed_at] >= min(r.done_at for r in reqs if r is not victim) - TICK
    assert abs(times[-1] - victim.done_at) < TICK
    # the others never paused
    for other in reqs[:2]:
        other_times = _times(log, engine, other, other.draw.output_tokens, t)
        assert max(b - a for a, b in zip(other_times, other_times[1:], strict=False)) < pause / 10
