"""The background sampler: survives backend bugs, keeps its cadence, reports staleness."""

from __future__ import annotations

import time

import pytest

from infersight.collectors.gpu.readings import DeviceDown, DeviceReading
from infersight.collectors.gpu.sampler import Sampler
from infersight.collectors.gpu.sim import SimBackend


def test_an_unexpected_backend_exception_marks_only_that_gpu_down():
    sim = SimBackend(3)
    real_sample = sim.sample

    def buggy(identity):
        if identity.index == 2:
            raise ZeroDivisionError("a bug in a backend")
        return real_sample(identity)

    sim.sample = buggy
    snapshot = Sampler(sim).sample_once()
    assert [type(r) for r in snapshot.readings] == [DeviceReading, DeviceReading, DeviceDown]
    assert snapshot.readings[2].error.call == "unexpected"
    assert sim.errors.counts == {("2", "unexpected"): 1}


def test_first_threaded_pass_waits_a_full_interval_after_a_startup_sample():
    sampler = Sampler(SimBackend(1), interval_seconds=0.3)
    startup = sampler.sample_once()
    sampler.start()
    try:
        time.sleep(0.15)
        assert sampler.samples_total == 1  # no second pass a few ms after the first (a useless GPM window)
        deadline = time.monotonic() + 5
        while sampler.samples_total < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sampler.samples_total >= 3
        assert sampler.snapshot.taken_at - startup.taken_at >= 0.55  # two intervals for two passes
    finally:
        sampler.stop()


def test_staleness_follows_the_configured_limit():
    sampler = Sampler(SimBackend(1), interval_seconds=1.0)
    assert sampler.is_stale()  # nothing sampled yet
    snapshot = sampler.sample_once()
    assert sampler.stale_after_seconds == 5.0
    assert not sampler.is_stale(snapshot.taken_at + 4.9)
    assert sampler.is_stale(snapshot.taken_at + 5.1)


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="must be positive"):
        Sampler(SimBackend(1), interval_seconds=0)
