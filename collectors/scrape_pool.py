"""What the engine, gateway and dcgm-exporter collectors share around each fetch of a cycle.

Each Prometheus scrape of ours fetches every target concurrently (a bounded thread pool; each
fetch has its own deadline, see ``engine.scrape.fetch``), one cycle at a time even when two
Prometheus servers scrape us at once. Failures are counted by (target, reason), and a target's
failure, change of reason and recovery are logged once, not every cycle.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class ScrapePool:
    def __init__(self, noun: str, logger: logging.Logger, max_workers: int, thread_name_prefix: str,
                 log_changes: bool = True):
        self.noun = noun  # "engine target": how the log lines name a target
        self.log = logger
        self.log_changes = log_changes  # warn when a target fails or recovers (off for --once, which prints)
        self.lock = threading.Lock()  # held by the collector for a whole cycle
        self.errors: Counter[tuple[str, str]] = Counter()  # (target name, reason) -> failed scrapes
        self._states: dict[str, str | None] = {}  # target name -> last failure reason (None: up)
        # max_workers 0: scrape in the calling thread (the simulator's cycles in virtual time).
        self._pool = (ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
                      if max_workers > 0 else None)

    def map(self, scrape_one: Callable[[T], R], targets: Iterable[T]) -> list[R]:
        return list((self._pool.map if self._pool else map)(scrape_one, targets))

    def record(self, name: str, reason: str | None, detail: str = "", url: str = "") -> None:
        """One target's outcome this cycle (``reason`` None: it answered): count a failure, log a
        change of state. ``name`` keys the counters; ``url``, when it is not the name, joins it in the log."""
        if reason:
            self.errors[(name, reason)] += 1
        if not self.log_changes:
            return
        previous = self._states.get(name)
        self._states[name] = reason
        if reason and reason != previous:
            where = f"{name} ({url})" if url else name
            self.log.warning("infersight: %s %s failed: %s: %s", self.noun, where, reason, detail)
        elif previous and not reason:
            self.log.warning("infersight: %s %s recovered", self.noun, name)

    def error_counts(self, names: Iterable[str], reasons: Iterable[str]) -> list[tuple[tuple[str, str], int]]:
        """Failed scrapes by (target name, reason), sorted, with every known reason at 0 for every
        target named (DESIGN 8: a first failure is then an increase, not a new series at 1)."""
        reasons = tuple(reasons)
        counts = Counter({(name, reason): 0 for name in names for reason in reasons})
        counts.update(self.errors)
        return sorted(counts.items())

    def forget_all_but(self, live: set[str]) -> None:
        """Drop the counters of targets no longer scraped (removed from a file_sd file)."""
        for key in [k for k in self.errors if k[0] not in live]:
            del self.errors[key]

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(wait=False, cancel_futures=True)
