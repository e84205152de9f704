"""The simulated GPU backend: a small physical model for machines without GPUs.

Its public API is what a simulator drives:

    fleet = SimBackend(count=8, gpu_type="H100-SXM")
    fleet.set_load(0, compute=0.2, bandwidth=0.9)     # decode-heavy: bandwidth-bound
    fleet.gpu(3).fall_off_bus()                       # XID 79, then every call fails
    fleet.gpu(5).inject_thermal_throttle()            # overheats, clocks drop
    fleet.gpu(6).inject_ecc(corrected=3, uncorrected=1)

``compute`` and ``bandwidth`` are the demand as a share (0..1) of the preset's peak FLOP/s and
DRAM bandwidth (``infersight.capacity.GPU_PRESETS``). From them the model derives, consistently:
utilization, bandwidth utilization (GPM on Hopper presets, the memory-busy share on the others),
power between idle and TDP (capped by the power limit), energy as the integral of power,
temperature lagging power, and throttle reasons when hot or capped. Time comes from ``clock``
(wall time by default); pass a :class:`ManualClock` to run in virtual time.

The shape constants below are the model's assumptions, not measurements of a particular card.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from infersight.capacity import GIB, GPU_PRESETS, GPUSpec
from infersight.collectors.gpu.readings import (
    CLOCK_EVENT_REASONS,
    SOURCE_GPM,
    SOURCE_NVML_BUSY,
    DeviceError,
    DeviceIdentity,
    DeviceReading,
    ErrorCounts,
)

AMBIENT_CELSIUS = 30.0
CELSIUS_AT_TDP = 82.0  # steady-state die temperature at full power with working cooling
COOLING_FAILURE_EXTRA_CELSIUS = 40.0  # how much hotter the steady state is while the fan/cooling fault is on
THERMAL_TIME_CONSTANT_S = 30.0  # temperature follows power with this lag
SW_THERMAL_CELSIUS = 87.0  # driver slows clocks from here ...
HW_THERMAL_CELSIUS = 92.0  # ... and the hardware from here
SW_THERMAL_CLOCK_FACTOR = 0.8
HW_THERMAL_CLOCK_FACTOR = 0.5
SM_CLOCK_MAX_HZ = 1980e6
SM_CLOCK_IDLE_HZ = 345e6
MEMORY_CLOCK_HZ = 2619e6
# Power follows delivered work; compute costs more power than moving bytes.
COMPUTE_POWER_WEIGHT = 0.65
BANDWIDTH_POWER_WEIGHT = 0.35
# NVML's memory-busy share saturates before the bandwidth does (it is a time share).
MEMORY_BUSY_PER_BANDWIDTH = 1.25
IDLE_MEMORY_USED_BYTES = 0.5 * GIB  # driver context
PCIE_BYTES_PER_S_AT_FULL_COMPUTE = {"rx": 2e9, "tx": 1e9}  # prompts in, tokens out: small
NVLINK_SHARE_OF_DRAM_BANDWIDTH = 0.05  # tensor-parallel all-reduce traffic
MAX_STEPS_PER_ADVANCE = 600  # bounds the cost of a long virtual-time jump
XID_DBE = 48  # double-bit (uncorrectable) ECC error
XID_FALLEN_OFF_BUS = 79


class ManualClock:
    """A clock that only moves when told: virtual time for tests and the simulator."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.now += seconds


@dataclass(frozen=True)
class Load:
    """Demand on one GPU as a share of its peak: compute (FLOP/s) and DRAM bandwidth, 0..1."""

    compute: float = 0.0
    bandwidth: float = 0.0

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or math.isnan(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"load {name} must be a share between 0 and 1, got {value!r}")


class SimulatedGPU:
    """One simulated device. Thread-safe: a simulator sets load while the sampler reads."""

    def __init__(self, index: int, spec: GPUSpec, clock: Callable[[], float], uuid_text: str):
        self.identity = DeviceIdentity(index=index, uuid=uuid_text, name=spec.name)
        self.spec = spec
        self._clock = clock
        self._lock = threading.Lock()
        self._last_time = clock()
        self._load = Load()
        self._memory_used = IDLE_MEMORY_USED_BYTES
        self._power_limit = spec.tdp_watts
        self._temperature = AMBIENT_CELSIUS + (CELSIUS_AT_TDP - AMBIENT_CELSIUS) * spec.idle_watts / spec.tdp_watts
        self._energy = 0.0
        self._cooling_failed = False
        self._lost = False
        self._ecc = {"corrected": 0, "uncorrected": 0}
        self._xids: dict[int, int] = {}

    # -- load input (the simulator's API) ------------------------------------------------------
    def set_load(self, compute: float, bandwidth: float, memory_used_bytes: float | None = None) -> None:
        load = Load(compute, bandwidth)
        if memory_used_bytes is not None and not 0 <= memory_used_bytes <= self.spec.memory_bytes:
            raise ValueError(f"memory_used_bytes must be between 0 and {self.spec.memory_bytes:.0f}")
        with self._lock:
            self._advance_locked()
            self._load = load
            if memory_used_bytes is not None:
                self._memory_used = memory_used_bytes

    def set_power_limit(self, watts: float) -> None:
        if not self.spec.idle_watts < watts <= self.spec.tdp_watts:
            raise ValueError(f"power limit must be above idle ({self.spec.idle_watts} W) and at most TDP "
                             f"({self.spec.tdp_watts} W), got {watts}")
        with self._lock:
            self._advance_locked()
            self._power_limit = watts

    # -- fault injection ---------------------------------------------------------------------------
    def fall_off_bus(self) -> None:
        """XID 79: the GPU is gone; every later call on it fails until :meth:`reset`."""
        with self._lock:
            self._advance_locked()
            self._lost = True
            self._xids[XID_FALLEN_OFF_BUS] = self._xids.get(XID_FALLEN_OFF_BUS, 0) + 1

    def reset(self) -> None:
        """A GPU reset: it answers again (XID counts stay, as they do in the collector)."""
        with self._lock:
            self._last_time = self._clock()
            self._lost = False

    def inject_thermal_throttle(self, on: bool = True) -> None:
        """A cooling failure: the die jumps past the hardware slowdown point and stays hot while on."""
        with self._lock:
            self._advance_locked()
            self._cooling_failed = on
            if on:
                self._temperature = max(self._temperature, HW_THERMAL_CELSIUS + 1.0)

    def inject_ecc(self, corrected: int = 0, uncorrected: int = 0) -> None:
        """Add ECC errors; an uncorrected one also raises XID 48 (double-bit error)."""
        if corrected < 0 or uncorrected < 0:
            raise ValueError("ECC error counts cannot be negative")
        with self._lock:
            self._ecc["corrected"] += corrected
            self._ecc["uncorrected"] += uncorrected
            if uncorrected:
                self._xids[XID_DBE] = self._xids.get(XID_DBE, 0) + uncorrected

    def xids(self) -> dict[int, int]:
        with self._lock:
            return dict(self._xids)

    # -- the physics -----------------------------------------------------------------------------
    def _throttle(self) -> tuple[float, set[str]]:
        """Clock factor (0..1] and active throttle reasons for the current state."""
        reasons: set[str] = set()
        factor = 1.0
        if self._temperature >= HW_THERMAL_CELSIUS:
            reasons.add("hw_thermal")
            factor = HW_THERMAL_CLOCK_FACTOR
        elif self._temperature >= SW_THERMAL_CELSIUS:
            reasons.add("sw_thermal")
            factor = SW_THERMAL_CLOCK_FACTOR
        wanted = self._power_at(factor)
        if wanted > self._power_limit:
            reasons.add("sw_power_cap")
            # Scale delivered work so that power lands exactly on the limit.
            factor *= (self._power_limit - self.spec.idle_watts) / (wanted - self.spec.idle_watts)
        if self._load.compute == 0 and self._load.bandwidth == 0:
            reasons.add("gpu_idle")
        return factor, reasons

    def _power_at(self, factor: float) -> float:
        activity = factor * (COMPUTE_POWER_WEIGHT * self._load.compute + BANDWIDTH_POWER_WEIGHT * self._load.bandwidth)
        return self.spec.idle_watts + (self.spec.tdp_watts - self.spec.idle_watts) * activity

    def _steady_temperature(self, power: float) -> float:
        target = AMBIENT_CELSIUS + (CELSIUS_AT_TDP - AMBIENT_CELSIUS) * power / self.spec.tdp_watts
        return target + (COOLING_FAILURE_EXTRA_CELSIUS if self._cooling_failed else 0.0)

    def _advance_locked(self) -> None:
        now = self._clock()
        elapsed = now - self._last_time
        self._last_time = now
        if elapsed <= 0 or self._lost:
            return
        steps = min(MAX_STEPS_PER_ADVANCE, max(1, math.ceil(elapsed)))
        dt = elapsed / steps
        decay = 1.0 - math.exp(-dt / THERMAL_TIME_CONSTANT_S)
        for _ in range(steps):
            factor, _reasons = self._throttle()
            power = self._power_at(factor)
            self._energy += power * dt
            self._temperature += (self._steady_temperature(power) - self._temperature) * decay

    def read(self) -> DeviceReading:
        """The device's state now, as NVML (and GPM on Hopper presets) would report it."""
        with self._lock:
            if self._lost:
                raise DeviceError("sim.read", "GPU is lost (fallen off the bus)")
            self._advance_locked()
            factor, reasons = self._throttle()
            compute = self._load.compute * factor
            bandwidth = self._load.bandwidth * factor
            busy = max(self._load.compute, self._load.bandwidth)
            memory_busy = min(1.0, MEMORY_BUSY_PER_BANDWIDTH * bandwidth)
            reading = DeviceReading(
                identity=self.identity,
                utilization=min(1.0, busy),
                memory_busy=memory_busy,
                bandwidth_utilization=bandwidth if self.spec.gpm else memory_busy,
                bandwidth_source=SOURCE_GPM if self.spec.gpm else SOURCE_NVML_BUSY,
                memory_used_bytes=self._memory_used,
                memory_total_bytes=self.spec.memory_bytes,
                power_watts=self._power_at(factor),
                power_limit_watts=self._power_limit,
                energy_joules=self._energy,
                temperature_celsius=self._temperature,
                sm_clock_hertz=SM_CLOCK_IDLE_HZ if "gpu_idle" in reasons else SM_CLOCK_MAX_HZ * factor,
                memory_clock_hertz=MEMORY_CLOCK_HZ,
                clock_events={reason: reason in reasons for reason in CLOCK_EVENT_REASONS},
                ecc_errors=dict(self._ecc),
            )
            if self.spec.gpm:
                reading.sm_activity = compute
                reading.sm_occupancy = 0.6 * max(compute, bandwidth)
                reading.tensor_activity = 0.9 * compute
                reading.pcie_bytes_per_second = {d: v * compute for d, v in PCIE_BYTES_PER_S_AT_FULL_COMPUTE.items()}
                nvlink = NVLINK_SHARE_OF_DRAM_BANDWIDTH * self.spec.bandwidth_bytes_per_s * bandwidth
                reading.nvlink_bytes_per_second = {"rx": nvlink, "tx": nvlink}
            return reading


class SimBackend:
    """N simulated GPUs of one preset type, behind the same interface as the NVML backend."""

    name = "sim"
    driver_version = "sim"

    def __init__(self, count: int = 8, gpu_type: str = "H100-SXM", clock: Callable[[], float] = time.monotonic,
                 node: str = "sim"):
        if count < 1:
            raise ValueError(f"need at least one simulated GPU, got {count}")
        if gpu_type not in GPU_PRESETS:
            raise ValueError(f"unknown GPU type {gpu_type!r}; expected one of {', '.join(GPU_PRESETS)}")
        self.clock = clock
        self.errors = ErrorCounts()
        spec = GPU_PRESETS[gpu_type]
        # Stable UUIDs: the same node and index give the same UUID on every run.
        self._gpus = [
            SimulatedGPU(i, spec, clock, f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.{gpu_type}.{i}.sim')}")
            for i in range(count)
        ]

    def gpu(self, index: int) -> SimulatedGPU:
        if not 0 <= index < len(self._gpus):
            raise IndexError(f"no simulated GPU {index}; this fleet has GPUs 0..{len(self._gpus) - 1}")
        return self._gpus[index]

    def set_load(self, index: int, compute: float, bandwidth: float, memory_used_bytes: float | None = None) -> None:
        """Set one GPU's demand: the simulator's main input."""
        self.gpu(index).set_load(compute, bandwidth, memory_used_bytes)

    def set_all_loads(self, compute: float, bandwidth: float) -> None:
        for gpu in self._gpus:
            gpu.set_load(compute, bandwidth)

    # -- Backend interface ------------------------------------------------------------------------
    def devices(self) -> list[DeviceIdentity]:
        return [gpu.identity for gpu in self._gpus]

    def sample(self, identity: DeviceIdentity) -> DeviceReading:
        try:
            return self._gpus[identity.index].read()
        except DeviceError as exc:
            self.errors.add(identity.index, exc.call)
            raise

    def xid_counts(self) -> dict[int, dict[int, int]]:
        return {gpu.identity.index: xids for gpu in self._gpus if (xids := gpu.xids())}

    def close(self) -> None:
        pass
