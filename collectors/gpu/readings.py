"""What every GPU backend returns: device identities, one reading per device, and the interface.

A reading is in base units (bytes, watts, joules, hertz, ratios 0..1) so that the exporter only
renames and never converts. A field is ``None`` when the device does not support it (NVML
answered NOT_SUPPORTED, or GPM is absent): the exporter then leaves that series out rather
than inventing a value.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

# The NVML clock-event (throttle) reasons the catalog exposes, in NVML's bit order.
CLOCK_EVENT_REASONS = (
    "gpu_idle",
    "applications_clocks",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
)

# Values of the `source` label on gpu_memory_bandwidth_utilization_ratio.
SOURCE_GPM = "gpm"
SOURCE_NVML_BUSY = "nvml_busy"
SOURCE_DCGM = "dcgm"  # dcgm-exporter's DCGM_FI_PROF_DRAM_ACTIVE (collectors/gpu/dcgm.py)


class DeviceError(Exception):
    """One call on one device failed; the device reads as down until a later sample succeeds."""

    def __init__(self, call: str, message: str):
        super().__init__(f"{call}: {message}")
        self.call = call


class BackendUnavailable(Exception):
    """The backend cannot start at all (no NVML library, no driver); the message says what to do."""


@dataclass(frozen=True)
class DeviceIdentity:
    index: int
    uuid: str
    name: str


@dataclass
class DeviceReading:
    """One sample of one GPU. ``None`` means "not supported here", never "zero"."""

    identity: DeviceIdentity
    utilization: float | None = None  # share of time a kernel ran, 0..1
    memory_busy: float | None = None  # share of time memory was read or written, 0..1
    bandwidth_utilization: float | None = None  # 0..1, see bandwidth_source
    bandwidth_source: str = SOURCE_NVML_BUSY
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    clock_events: dict[str, bool] | None = None  # reason -> active
    ecc_errors: dict[str, int] | None = None  # "corrected"/"uncorrected" -> count
    sm_activity: float | None = None  # GPM, 0..1
    sm_occupancy: float | None = None  # GPM, 0..1
    tensor_activity: float | None = None  # GPM, 0..1
    pcie_bytes_per_second: dict[str, float] | None = None  # "rx"/"tx" -> bytes/s, GPM
    nvlink_bytes_per_second: dict[str, float] | None = None  # "rx"/"tx" -> bytes/s, GPM


@dataclass
class DeviceDown:
    """A device whose sample failed: only its identity and the failing call are kept."""

    identity: DeviceIdentity
    error: DeviceError


class ErrorCounts:
    """Failed calls by (gpu index or "", call name); the exporter's errors counter.

    The sampler and the XID thread add while a scrape reads: a lock keeps both whole.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, gpu: int | None, call: str) -> None:
        key = ("" if gpu is None else str(gpu), call)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    @property
    def counts(self) -> dict[tuple[str, str], int]:
        """A copy: {(gpu, call): count}."""
        with self._lock:
            return dict(self._counts)


class Backend(Protocol):
    """The small interface every device backend implements (``nvml``, ``sim``)."""

    name: str
    driver_version: str
    errors: ErrorCounts

    def devices(self) -> list[DeviceIdentity]:
        """The GPUs found at start, in index order."""

    def sample(self, identity: DeviceIdentity) -> DeviceReading:
        """Read one device now; raise :class:`DeviceError` when it does not answer."""

    def xid_counts(self) -> dict[int, dict[int, int]]:
        """XID errors seen so far: device index -> {xid: count}."""

    def close(self) -> None:
        """Stop background threads and release the library."""
