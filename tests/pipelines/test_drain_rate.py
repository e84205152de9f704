"""The writer's drain rate (pipelines/receiver/drain.py): busy wall time counted once, full batches only."""

from __future__ import annotations

import pytest

from infersight.pipelines.receiver.drain import DrainRate


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_before_a_full_batch_the_rate_is_the_assumed_one(clock):
    rate = DrainRate(assumed_rate=1000.0, clock=clock)
    rate.started()
    clock.now += 0.07  # a small batch costs the insert's fixed work: 500 spans in 70 ms
    rate.finished(500, full=False)
    assert rate.spans_per_second == 1000.0 and not rate.measured


def test_concurrent_writes_count_their_wall_time_once(clock):
    rate = DrainRate(assumed_rate=1.0, clock=clock)
    rate.started()  # A: a full batch, 0 .. 1.0 s
    clock.now += 0.5
    rate.started()  # B: a small batch beside it, 0.5 .. 0.8 s
    clock.now += 0.3
    rate.finished(20_000, full=False)
    clock.now += 0.2
    rate.finished(100_000, full=True)
    assert rate.measured
    assert rate.spans_per_second == pytest.approx(120_000 / 1.0)  # not (120k spans) / (1.0 + 0.3 s)


def test_idle_time_and_a_quiet_spell_do_not_lower_the_rate(clock):
    rate = DrainRate(assumed_rate=1.0, clock=clock)
    rate.started()
    clock.now += 0.5
    rate.finished(100_000, full=True)  # saturated: 200k spans/s
    for _ in range(20):  # then quiet: small batches with idle seconds between them
        clock.now += 1.0
        rate.started()
        clock.now += 0.07
        rate.finished(300, full=False)
    clock.now += 5.0
    rate.started()  # a burst again
    clock.now += 0.5
    rate.finished(100_000, full=True)
    assert rate.spans_per_second == pytest.approx(200_000)


def test_the_rate_follows_the_last_full_batches(clock):
    rate = DrainRate(assumed_rate=1.0, window=4, clock=clock)
    for seconds in (0.5, 0.5, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0):  # ClickHouse slows down 4x
        rate.started()
        clock.now += seconds
        rate.finished(100_000, full=True)
    assert rate.spans_per_second == pytest.approx(50_000)
