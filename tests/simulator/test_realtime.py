"""The real-time clock: the fleet keeps pace with the wall clock, and its start-time gauges carry
the wall time a simulated second stands for (the demo's Prometheus compares them with time())."""

from __future__ import annotations

import threading
import time

from infersight.config import Config
from infersight.signals import gateway
from infersight.simulator.fleet import Fleet
from infersight.simulator.realtime import MAX_LAG_S, RealTimeDriver
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


class FrozenWallClock:
    """The wall clock only moves when the driver waits (``stop.wait``): a run whose lag is exactly what
    the test says, however busy the machine running the test is."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:  # the driver's stop event
        self.now += max(seconds, 1e-6)  # a real wait always passes some time (and floats must move)
        return False

    def is_set(self) -> bool:
        return False


def test_a_hiccup_shorter_than_a_scrape_is_caught_up_not_held(monkeypatch):
    from infersight.simulator import realtime

    # Half a real second late (a busy moment): simulated time must stay on the wall clock, or every
    # condition the rules watch on the compressed clock would last longer than it did.
    clock = FrozenWallClock(1000.0 + 0.5 * MAX_LAG_S)
    monkeypatch.setattr(realtime, "time", clock)
    fleet = Fleet(find("cold-start-thrash"), Config(), epoch=1000.0, speed=60.0)
    driver = RealTimeDriver(fleet)
    assert driver.run(120.0, stop=clock)
    assert driver.held_s == 0 and driver.holds == [] and fleet.now == 120.0
    assert abs(clock.now - fleet.wall(120.0)) < 1e-3  # caught up, then kept pace

    clock = FrozenWallClock(1000.0 + 3 * MAX_LAG_S)  # three times longer: held, and said so
    monkeypatch.setattr(realtime, "time", clock)
    late = Fleet(find("cold-start-thrash"), Config(), epoch=1000.0, speed=60.0)
    held = RealTimeDriver(late)
    assert held.run(120.0, stop=clock)
    assert len(held.holds) == 1 and abs(held.holds[0][1] - (3 * MAX_LAG_S - 2.0 / 60)) < 1e-6
    assert held.held_between(held.holds[0][0] - 1, held.holds[0][0] + 1) == held.held_s


def test_idle_is_set_only_while_the_fleet_waits_for_the_wall_clock():
    fleet = _fleet(time.time())
    driver = RealTimeDriver(fleet)
    seen = []
    assert driver.run(60.0, on_step=lambda t: seen.append(driver.idle.is_set()))
    assert seen and not any(seen)  # never while it ticks (on_step runs between ticks, still busy)
    assert driver.idle.is_set()  # done: waiting work may run


def test_the_trace_replay_waits_while_the_fleet_is_busy():
    from opentelemetry.sdk.trace import TracerProvider

    from infersight.commands.demo_replay import Replay
    from infersight.instrumentation import RequestTracer

    gate = threading.Event()
    replay = Replay(lambda clock: RequestTracer(tracer_provider=TracerProvider(), clock=clock), 0.0, gate=gate)
    fleet = _fleet(0.0)
    fleet.metrics.on_end = replay.ended
    fleet.run_until(20.0)
    ended = sum(sum(b.outcomes.values()) for b in fleet.metrics.series.bundles.values())
    time.sleep(0.3)
    assert replay.replayed == 0  # the fleet is busy (the gate is shut): nothing traced yet
    gate.set()
    replay.close(60.0)
    assert replay.replayed == ended > 0 and replay.errors == 0


def test_a_rollout_does_not_eject_the_instances_it_deregistered():
    from tests.simulator.runs import recorded

    # The deploy drains each wave, then restarts it: a deregistered instance is neither probed nor
    # ejected (the rollout's false ejection cascade and cold-start thrash in a slow demo came from it).
    series = recorded("rollout-spike").series  # the alert-quality test's run of the scenario, shared
    ejections = [values for (name, _labels), values in series.items() if name == gateway.EJECTIONS.name]
    assert len(ejections) == 16  # every instance's counter (12 stable, 4 canary), created at 0 when it registered
    assert all(v in (None, 0) for values in ejections for v in values)
