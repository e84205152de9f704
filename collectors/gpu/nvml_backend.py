"""The NVML backend: nvidia-ml-py (``import pynvml``), with GPM where the GPU supports it.

Per call, three outcomes:
- a value: converted to base units (mW -> W, mJ -> J, MHz -> Hz, percent -> ratio);
- NOT_SUPPORTED / FUNCTION_NOT_FOUND (or a pynvml without the function): that field is left
  out for this device from now on, and the device stays up;
- any other NVMLError: the device reads as down for this sample (values absent, gpu_up 0),
  the failing call is counted, and the next sample tries again.

The module object is a parameter so that tests can pass a stand-in for ``pynvml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infersight.collectors.gpu.gpm import GPMWindow, gpm_supported
from infersight.collectors.gpu.readings import (
    CLOCK_EVENT_REASONS,
    SOURCE_GPM,
    SOURCE_NVML_BUSY,
    BackendUnavailable,
    DeviceError,
    DeviceIdentity,
    DeviceReading,
    ErrorCounts,
)
from infersight.collectors.gpu.xid_events import XidEventLoop

# Catalog reason -> pynvml bit constant (the "ClocksEvent" names; "ClocksThrottle" are deprecated aliases).
REASON_CONSTANTS = dict(zip(CLOCK_EVENT_REASONS, (
    "nvmlClocksEventReasonGpuIdle",
    "nvmlClocksEventReasonApplicationsClocksSetting",
    "nvmlClocksEventReasonSwPowerCap",
    "nvmlClocksEventReasonHwSlowdown",
    "nvmlClocksEventReasonSyncBoost",
    "nvmlClocksEventReasonSwThermalSlowdown",
    "nvmlClocksEventReasonHwThermalSlowdown",
    "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    "nvmlClocksEventReasonDisplayClockSetting",
), strict=True))


class _Unsupported(Exception):
    """This call (or this variant of it) is not available on this device."""


@dataclass
class _Device:
    identity: DeviceIdentity
    handle: Any
    gpm: GPMWindow | None = None
    unsupported: set[str] = field(default_factory=set)
    supported_reasons: int | None = None  # bit mask; None = all


def _load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise BackendUnavailable("the nvidia-ml-py package is not installed (pip install nvidia-ml-py); "
                                 "or use --backend sim") from exc
    return pynvml


class NVMLBackend:
    name = "nvml"

    def __init__(self, nvml: Any = None, xid_wait_ms: int = 500, use_gpm: bool = True):
        self.nvml = nvml if nvml is not None else _load_pynvml()
        self.errors = ErrorCounts()
        self._unsupported_codes = {self.nvml.NVML_ERROR_NOT_SUPPORTED, self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                   self.nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise BackendUnavailable(self._init_advice(exc)) from None
        try:
            self.driver_version = _text(self.nvml.nvmlSystemGetDriverVersion())
            self._devices = [self._open(index, use_gpm) for index in range(self.nvml.nvmlDeviceGetCount())]
        except self.nvml.NVMLError as exc:
            self.nvml.nvmlShutdown()
            raise BackendUnavailable(f"NVML started but cannot list GPUs: {exc}") from None
        handles = {d.identity.index: d.handle for d in self._devices if d.handle is not None}
        self._events = XidEventLoop(self.nvml, handles, self.errors, wait_ms=xid_wait_ms) if handles else None
        if self._events is not None:
            self._events.start()

    def _init_advice(self, exc: Exception) -> str:
        code = getattr(exc, "value", None)
        if code == self.nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return ("NVML library not found (libnvidia-ml.so.1): this machine has no NVIDIA driver. "
                    "Install the driver, or run the simulated fleet with --backend sim.")
        if code == self.nvml.NVML_ERROR_DRIVER_NOT_LOADED:
            return ("the NVIDIA driver is not loaded (is this a GPU machine? try nvidia-smi). "
                    "Use --backend sim for a simulated fleet.")
        if code == self.nvml.NVML_ERROR_NO_PERMISSION:
            return "no permission to open NVML (check access to /dev/nvidia*); or use --backend sim."
        return f"NVML failed to start: {exc}. Use --backend sim for a simulated fleet."

    def _open(self, index: int, use_gpm: bool) -> _Device:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid, name = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
            identity = DeviceIdentity(index, uuid, name)
        except nvml.NVMLError:
            # Lost before we started: it stays listed (gpu_up 0) so that its absence is visible.
            self.errors.add(index, "nvmlDeviceGetHandleByIndex")
            return _Device(DeviceIdentity(index, "", "unknown"), None)
        device = _Device(identity, handle)
        if use_gpm and gpm_supported(nvml, handle):
            try:
                device.gpm = GPMWindow(nvml, handle)
            except nvml.NVMLError:
                self.errors.add(index, "nvmlGpmSampleAlloc")
        for name in ("nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetSupportedClocksThrottleReasons"):
            try:
                device.supported_reasons = int(self._call(device, name, handle))
                break
            except _Unsupported:
                continue
            except DeviceError:
                break
        return device

    # -- calls ------------------------------------------------------------------------------------
    def _call(self, device: _Device, name: str, *args: Any, key: str | None = None) -> Any:
        """Call ``nvml.<name>(*args)``; raise _Unsupported or DeviceError as described above."""
        key = key or name
        if key in device.unsupported:
            raise _Unsupported(key)
        function = getattr(self.nvml, name, None)
        if function is None:
            device.unsupported.add(key)
            raise _Unsupported(key)
        try:
            return function(*args)
        except self.nvml.NVMLError as exc:
            if exc.value in self._unsupported_codes:
                device.unsupported.add(key)
                raise _Unsupported(key) from None
            self.errors.add(device.identity.index, name)
            raise DeviceError(name, str(exc)) from None

    def _optional(self, device: _Device, name: str, *args: Any, key: str | None = None) -> Any:
        try:
            return self._call(device, name, *args, key=key)
        except _Unsupported:
            return None

    def _first(self, device: _Device, *variants: tuple[str, str, tuple]) -> Any:
        """The first supported variant's answer: (key, function name, args) newest first."""
        for key, name, args in variants:
            try:
                return self._call(device, name, *args, key=key)
            except _Unsupported:
                continue
        return None

    # -- Backend interface ------------------------------------------------------------------------
    def devices(self) -> list[DeviceIdentity]:
        return [d.identity for d in self._devices]

    def sample(self, identity: DeviceIdentity) -> DeviceReading:
        device = self._devices[identity.index]
        if device.handle is None:
            raise DeviceError("nvmlDeviceGetHandleByIndex", "the GPU was not reachable when the collector started")
        try:
            return self._read(device)
        except DeviceError:
            if device.gpm is not None:
                device.gpm.reset()
            raise

    def _read(self, device: _Device) -> DeviceReading:
        nvml, h = self.nvml, device.handle
        reading = DeviceReading(identity=device.identity)
        rates = self._optional(device, "nvmlDeviceGetUtilizationRates", h)
        if rates is not None:
            reading.utilization = rates.gpu / 100.0
            reading.memory_busy = rates.memory / 100.0
        memory = self._first(device, ("memory_v2", "nvmlDeviceGetMemoryInfo", (h, getattr(nvml, "nvmlMemory_v2", 0))),
                             ("memory_v1", "nvmlDeviceGetMemoryInfo", (h,)))
        if memory is not None:
            reading.memory_used_bytes = float(memory.used)
            reading.memory_total_bytes = float(memory.total)
        reading.power_watts = _scaled(self._optional(device, "nvmlDeviceGetPowerUsage", h), 1e-3)
        reading.power_limit_watts = _scaled(self._optional(device, "nvmlDeviceGetEnforcedPowerLimit", h), 1e-3)
        reading.energy_joules = _scaled(self._optional(device, "nvmlDeviceGetTotalEnergyConsumption", h), 1e-3)
        reading.temperature_celsius = _scaled(self._first(
            device,
            ("temperature_v", "nvmlDeviceGetTemperatureV", (h, nvml.NVML_TEMPERATURE_GPU)),
            ("temperature", "nvmlDeviceGetTemperature", (h, nvml.NVML_TEMPERATURE_GPU)),
        ), 1.0)
        reading.sm_clock_hertz = _scaled(self._optional(device, "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM,
                                                        key="clock_sm"), 1e6)
        reading.memory_clock_hertz = _scaled(self._optional(device, "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_MEM,
                                                            key="clock_mem"), 1e6)
        reading.clock_events = self._clock_events(device)
        reading.ecc_errors = self._ecc(device)
        self._bandwidth(device, reading)
        return reading

    def _clock_events(self, device: _Device) -> dict[str, bool] | None:
        mask = self._first(device,
                           ("events", "nvmlDeviceGetCurrentClocksEventReasons", (device.handle,)),
                           ("throttle", "nvmlDeviceGetCurrentClocksThrottleReasons", (device.handle,)))
        if mask is None:
            return None
        events = {}
        for reason, constant in REASON_CONSTANTS.items():
            bit = getattr(self.nvml, constant)
            if device.supported_reasons is None or device.supported_reasons & bit:
                events[reason] = bool(mask & bit)
        return events

    def _ecc(self, device: _Device) -> dict[str, int] | None:
        nvml, counts = self.nvml, {}
        for label, error_type in (("corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                  ("uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            value = self._optional(device, "nvmlDeviceGetTotalEccErrors", device.handle, error_type,
                                   nvml.NVML_VOLATILE_ECC, key=f"ecc_{label}")
            if value is not None:
                counts[label] = int(value)
        return counts or None

    def _bandwidth(self, device: _Device, reading: DeviceReading) -> None:
        """GPM metrics where supported; else bandwidth falls back to the memory-busy share."""
        if device.gpm is None:
            reading.bandwidth_utilization = reading.memory_busy
            reading.bandwidth_source = SOURCE_NVML_BUSY
            return
        try:
            values = device.gpm.take()
        except self.nvml.NVMLError as exc:
            self.errors.add(device.identity.index, "nvmlGpmMetricsGet")
            device.gpm.reset()
            if exc.value in self._unsupported_codes:
                # GPM went away (e.g. MIG enabled since start): fall back for good.
                device.gpm.close()
                device.gpm = None
                self._bandwidth(device, reading)
            return
        # values is None on the first window: bandwidth stays absent rather than flipping source.
        reading.bandwidth_source = SOURCE_GPM
        for (attribute, key), value in (values or {}).items():
            if key is None:
                setattr(reading, attribute, value)
            else:
                pairs = getattr(reading, attribute) or {}
                pairs[key] = value
                setattr(reading, attribute, pairs)

    def xid_counts(self) -> dict[int, dict[int, int]]:
        return self._events.counts() if self._events is not None else {}

    def close(self) -> None:
        if self._events is not None:
            self._events.stop()
        for device in self._devices:
            if device.gpm is not None:
                device.gpm.close()
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else float(value) * factor


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
