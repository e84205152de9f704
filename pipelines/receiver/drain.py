"""How fast the writer drains its queue, measured, so that the queue admits only what it can
acknowledge in time.

A client's export has a deadline (the OTel Collector's exporter gives up after 5 s by default, and
then retries the same data, which would be stored twice if the first attempt still lands). So the
queue is bounded by time as well as by memory: a request is admitted while the spans already
waiting, plus its own, drain within ``pipeline.queue_max_seconds`` at the rate the writer has shown.

The rate is spans written (inserted or spooled) per second of wall time in which at least one write
was in progress, so concurrent inserts count once. Only *full* batches are samples: a small batch
costs ClickHouse the same ~70 ms of fixed work as a full one, and would make a quiet receiver look
slow the moment a burst arrives. Until a full batch has been written, the rate is assumed to be one
full batch per ``batch_seconds``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class DrainRate:
    def __init__(self, assumed_rate: float, window: int = 8, clock: Callable[[], float] = time.monotonic):
        self._assumed = assumed_rate
        self._clock = clock
        self._lock = threading.Lock()
        self._writing = 0  # writes in progress
        self._mark = 0.0  # when the busy time was last accumulated
        self._spans = 0  # spans written since the last sample
        self._busy = 0.0  # wall seconds with a write in progress since the last sample
        self._samples: deque[tuple[int, float]] = deque(maxlen=window)  # (spans, busy seconds) of full batches

    def started(self) -> None:
        """A write began (call from the writer thread, before it inserts or spools a batch)."""
        with self._lock:
            self._accumulate(self._clock())
            self._writing += 1

    def finished(self, spans: int, full: bool) -> None:
        """That write ended; ``full``: its batch reached ``batch_rows`` or ``batch_bytes``."""
        with self._lock:
            self._accumulate(self._clock())
            self._writing -= 1
            self._spans += spans
            if full:
                if self._busy > 0:
                    self._samples.append((self._spans, self._busy))
            elif self._writing:
                return  # a small batch beside a full one: its spans and time join the next sample
            # Sampled, or the writer went idle after a small batch: it was not saturated, so the time
            # since the last sample says nothing about its capacity.
            self._spans, self._busy = 0, 0.0

    @property
    def spans_per_second(self) -> float:
        """Spans drained per busy second over the last full batches; the assumed rate before any."""
        with self._lock:
            seconds = sum(s for _, s in self._samples)
            return sum(n for n, _ in self._samples) / seconds if seconds > 0 else self._assumed

    @property
    def measured(self) -> bool:
        with self._lock:
            return bool(self._samples)

    def _accumulate(self, now: float) -> None:
        if self._writing:
            self._busy += now - self._mark
        self._mark = now
