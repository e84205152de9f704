"""The real-time clock: the fleet keeps pace with the wall clock, and its start-time gauges carry
the wall time a simulated second stands for (the demo's Prometheus compares them with time())."""

from __future__ import annotations

import threading
import time

from infersight.config import Config
from infersight.simulator.fleet import Fleet
from infersight.simulator.realtime import RealTimeDriver
from infersight.simulator.scenario import find

SPEED = 600.0  # ten simulated minutes a second: the test stays short


def _fleet(epoch: float) -> Fleet:
    return Fleet(find("cold-start-thrash"), Config(), epoch=epoch, speed=SPEED)


def test_the_fleet_follows_the_wall_clock_and_reports_every_ending():
    epoch = time.time()
    fleet = _fleet(epoch)
    ended = []
    fleet.metrics.on_end = lambda req, outcome, now, kw: ended.append((outcome, now))
    steps = []
    assert RealTimeDriver(fleet).run(120.0, on_step=steps.append)
    assert fleet.now == 120.0 and steps[-1] == 120.0 and steps == sorted(steps)
    # It never ran ahead of the wall clock: simulated second 120 came no earlier than its wall time.
    assert time.time() >= fleet.wall(120.0) - 0.05
    outcomes = {labels: b.outcomes for labels, b in fleet.metrics.series.bundles.items()}
    assert len(ended) == sum(sum(o.values()) for o in outcomes.values()) > 0
    assert all(0 < now <= 120.0 for _outcome, now in ended)


def test_start_times_are_wall_times():
    epoch = time.time() - 3600
    fleet = _fleet(epoch)
    fleet.run_until(60.0)
    engine = fleet.add_engine("gemma-27b-int4", "stable")
    started = fleet.metrics.registry.get_sample_value(
        "llm_instance_start_time_seconds", {"model": "gemma-27b-int4", "instance": engine.instance, "pool": "stable"})
    assert started == epoch + 60.0 / SPEED
    initial = fleet.engines()[0]
    assert fleet.metrics.registry.get_sample_value(
        "llm_instance_start_time_seconds", {"model": "gemma-27b-int4", "instance": initial.instance,
                                            "pool": "stable"}) == epoch


def test_a_late_fleet_holds_the_clock_back_instead_of_rushing():
    fleet = _fleet(time.time() - 3600)  # an hour late before it starts: far more than a hiccup
    driver = RealTimeDriver(fleet)
    assert driver.run(60.0)
    assert driver.held_s > 3000  # the hour was held back, not rushed through in a burst
    assert abs(fleet.wall(fleet.now) - time.time()) < 5  # and simulated time now stands at the wall clock
    assert abs(driver.sim_time_at(time.time()) - fleet.now) < 5 * SPEED


def test_stop_ends_the_run_early():
    fleet = _fleet(time.time())
    stop = threading.Event()
    stop.set()
    assert RealTimeDriver(fleet).run(3600.0, stop=stop) is False
    assert fleet.now < 3600.0
