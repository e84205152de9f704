"""The real-time clock: a fleet that keeps pace with the wall clock, ``speed`` simulated seconds a second.

Virtual time (:mod:`.run`) advances the fleet as fast as the CPU allows and scrapes it in memory;
here the fleet advances in step with the wall clock, so that real scrapers (Prometheus, the engine
collector, the GPU exporter) read it over HTTP whenever they like. Everything that reads the
fleet's state from another thread takes ``lock``, which the driver holds while it advances.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from infersight.simulator.fleet import TICK_S, Fleet


class RealTimeDriver:
    """Advances ``fleet`` so that simulated time ``t`` is reached at wall time ``fleet.wall(t)``."""

    def __init__(self, fleet: Fleet, lock: threading.Lock | None = None) -> None:
        self.fleet = fleet
        self.lock = lock if lock is not None else threading.Lock()
        self.behind_s = 0.0  # the most simulated seconds the fleet ever lagged the wall clock

    def sim_now(self) -> float:
        """The simulated second the wall clock stands at now."""
        return (time.time() - self.fleet.epoch) * self.fleet.speed

    def run(self, until_s: float, stop: threading.Event | None = None,
            on_step: Callable[[float], None] | None = None) -> bool:
        """Run to simulated second ``until_s``; False when ``stop`` was set first.

        ``on_step(t)`` is called after every advance, outside the lock. When the CPU cannot keep
        up the fleet runs late rather than skipping ticks; ``behind_s`` says by how much.
        """
        stop = stop if stop is not None else threading.Event()
        pause = TICK_S / self.fleet.speed
        while self.fleet.now + TICK_S <= until_s + 1e-9:
            target = min(until_s, self.sim_now())
            if target >= self.fleet.now + TICK_S:
                with self.lock:
                    self.fleet.run_until(target)
                self.behind_s = max(self.behind_s, self.sim_now() - self.fleet.now)
                if on_step is not None:
                    on_step(self.fleet.now)
            if stop.wait(max(0.0, min(pause, self.fleet.wall(self.fleet.now + TICK_S) - time.time()))):
                return False
        return True
