"""The real-time clock: a fleet that keeps pace with the wall clock, ``speed`` simulated seconds a second.

Virtual time (:mod:`.run`) advances the fleet as fast as the CPU allows and scrapes it in memory;
here the fleet advances in step with the wall clock, so that real scrapers (Prometheus, the engine
collector, the GPU exporter) read it over HTTP whenever they like. Everything that reads the
fleet's state from another thread takes ``lock``, which the driver holds for one tick at a time.

When the CPU cannot keep up (a busy machine), a lag shorter than ``MAX_LAG_S`` real seconds is
caught up: simulated time stays where the wall clock says, so the rules Prometheus evaluates on
the compressed clock (a ``for: 1m`` waits 1 s) see every condition last as long as it lasted in the
simulation. A longer lag holds the clock back rather than rush through minutes of ticks: the
fleet's ``epoch`` moves forward by the lag, so a start-time gauge set now still says now, and the
fleet runs slower than the rules assume for a while. ``holds`` records each (wall time, real
seconds), ``held_s`` their sum; :meth:`sim_time_at` maps a wall time back to simulated time.

``idle`` is set while the fleet waits for the wall clock: work that can wait (the demo's trace
replay) runs then, so that it never makes the fleet late.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

from infersight.simulator.fleet import TICK_S, Fleet

MAX_LAG_S = 1.0  # real seconds: a hiccup up to a scrape interval is caught up; a longer one holds the clock back


class RealTimeDriver:
    """Advances ``fleet`` so that simulated time ``t`` is reached at wall time ``fleet.wall(t)``."""

    def __init__(self, fleet: Fleet, lock: threading.Lock | None = None) -> None:
        self.fleet = fleet
        self.lock = lock if lock is not None else threading.Lock()
        self.held_s = 0.0  # real seconds the clock was held back because the fleet ran late
        self.holds: list[tuple[float, float]] = []  # (wall time, real seconds) of each hold
        self.idle = threading.Event()
        self._marks: list[tuple[float, float]] = [(fleet.wall(fleet.now), fleet.now)]  # (wall, t) at each hold

    def sim_now(self) -> float:
        """The simulated second the wall clock stands at now."""
        return (time.time() - self.fleet.epoch) * self.fleet.speed

    def sim_time_at(self, wall: float) -> float:
        """The simulated second that stood at Unix time ``wall`` during the run."""
        i = max(0, bisect.bisect_right([w for w, _t in self._marks], wall) - 1)
        w0, t0 = self._marks[i]
        return t0 + max(0.0, wall - w0) * self.fleet.speed

    def run(self, until_s: float, stop: threading.Event | None = None,
            on_step: Callable[[float], None] | None = None) -> bool:
        """Run to simulated second ``until_s``; False when ``stop`` was set first.

        ``on_step(t)`` is called after every tick, outside the lock.
        """
        stop = stop if stop is not None else threading.Event()
        try:
            return self._run(until_s, stop, on_step)
        finally:
            self.idle.set()  # the fleet is done: waiting work may use every moment now

    def _run(self, until_s: float, stop: threading.Event, on_step: Callable[[float], None] | None) -> bool:
        fleet = self.fleet
        while fleet.now + TICK_S <= until_s + 1e-9:
            if stop.is_set():
                return False
            late = self.sim_now() - (fleet.now + TICK_S)
            if late < 0:
                self.idle.set()
                if stop.wait(-late / fleet.speed):
                    return False
                continue
            self.idle.clear()
            if late > MAX_LAG_S * fleet.speed:
                held = late / fleet.speed
                fleet.epoch += held
                self.held_s += held
                self.holds.append((time.time(), held))
                self._marks.append((fleet.wall(fleet.now), fleet.now))
            with self.lock:
                fleet.run_until(fleet.now + TICK_S)
            if on_step is not None:
                on_step(fleet.now)
        return True

    def held_between(self, start: float, end: float) -> float:
        """Real seconds the clock was held back between Unix times ``start`` and ``end``."""
        return sum(held for wall, held in self.holds if start <= wall <= end)
