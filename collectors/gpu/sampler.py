"""The background sampler: reads every GPU at a fixed interval and keeps the last snapshot.

A scrape renders the last snapshot and never waits on the device (NVML calls can block for
tens of milliseconds, GPM needs two samples an interval apart). One device failing makes only
that device read as down; the sampler itself never dies on a device error. A snapshot older
than ``stale_after_seconds`` is not served as data: every GPU then reads as down.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from infersight.collectors.gpu.readings import Backend, DeviceDown, DeviceError, DeviceReading

log = logging.getLogger(__name__)
STALE_AFTER_INTERVALS = 5  # default stale limit, in sampling intervals


@dataclass(frozen=True)
class Snapshot:
    taken_at: float  # time.monotonic() when the pass finished
    duration_seconds: float
    readings: tuple[DeviceReading | DeviceDown, ...]


class Sampler:
    def __init__(self, backend: Backend, interval_seconds: float = 1.0, stale_after_seconds: float | None = None):
        if interval_seconds <= 0:
            raise ValueError(f"sampling interval must be positive, got {interval_seconds}")
        self.backend = backend
        self.interval_seconds = interval_seconds
        self.stale_after_seconds = stale_after_seconds or STALE_AFTER_INTERVALS * interval_seconds
        self.devices = backend.devices()
        self.samples_total = 0
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def is_stale(self, now: float | None = None) -> bool:
        snapshot = self._snapshot
        if snapshot is None:
            return True
        return (now if now is not None else time.monotonic()) - snapshot.taken_at > self.stale_after_seconds

    def sample_once(self) -> Snapshot:
        """Read every device once and publish the result (also what the thread calls)."""
        started = time.monotonic()
        readings: list[DeviceReading | DeviceDown] = []
        for identity in self.devices:
            try:
                readings.append(self.backend.sample(identity))
            except DeviceError as exc:
                readings.append(DeviceDown(identity, exc))
            except Exception as exc:  # noqa: BLE001 - a backend bug must not take the exporter down
                log.exception("unexpected error sampling GPU %d", identity.index)
                self.backend.errors.add(identity.index, "unexpected")
                readings.append(DeviceDown(identity, DeviceError("unexpected", repr(exc))))
        finished = time.monotonic()
        # One reference assignment: a concurrent scrape sees the old or the new snapshot, whole.
        self._snapshot = Snapshot(finished, finished - started, tuple(readings))
        self.samples_total += 1
        return self._snapshot

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Fixed cadence: the next pass is due one interval after the previous one was due, so
        # sampling time does not drift the GPM window. After a start-up pass, wait a full interval
        # first: a window of a few milliseconds would give GPM rates that mean nothing.
        due = time.monotonic() + (self.interval_seconds if self._snapshot is not None else 0.0)
        while True:
            delay = due - time.monotonic()
            if delay < 0:  # fell behind (slow device calls): skip the missed slots
                due, delay = time.monotonic(), 0.0
            if self._stop.wait(delay):
                return
            self.sample_once()
            due += self.interval_seconds

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
