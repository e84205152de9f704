"""A STAND-IN for the ``pynvml`` module (no GPU here): the functions the NVML backend calls.

Only the functions are faked. Constants, error classes (``NVMLError`` and its subclasses) and the
ctypes structures (``c_nvmlGpmMetricsGet_t``, ``c_nvmlEventData_t``, ``c_nvmlDevice_t``) are the
real ones from nvidia-ml-py, so the backend is exercised against the real names and types. A
function the stand-in does not define is absent, like in an older pynvml.

Units follow NVML: milliwatts, millijoules, MHz, percent, MiB/s for GPM throughput.
"""

from __future__ import annotations

import ctypes
import queue
import time
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

NVMLError = real.NVMLError


@dataclass
class FakeDevice:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    gpu_util: int = 0  # percent
    mem_util: int = 0  # percent (memory busy time)
    memory_used: int = 1 << 30
    memory_total: int = 80 << 30
    power_mw: int = 70_000
    power_limit_mw: int = 700_000
    energy_mj: int = 1_000_000
    temperature: int = 35
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    reasons: int = 0  # current clock-event bit mask
    ecc: dict[int, int] | None = field(default_factory=lambda: {0: 0, 1: 0})  # None: ECC not supported
    gpm: bool = True
    gpm_values: dict[int, float] = field(default_factory=dict)  # metric id -> value (missing: not supported)
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code it raises
    fail_all: int | None = None  # every call on this device raises this code (fallen off the bus)


class FakeNVML:
    """Use as the ``nvml`` argument of NVMLBackend."""

    def __init__(self, devices: list[FakeDevice], init_error: int | None = None, driver: str = "570.86.15",
                 memory_v2: bool = True):
        self.devices = devices
        self.init_error = init_error
        self.driver = driver
        self.memory_v2 = memory_v2
        self.calls: dict[str, int] = {}
        self.events: queue.Queue[tuple[int, int]] = queue.Queue()
        self.event_waits = 0
        self.event_timeouts = 0
        self.shut_down = False
        self._buffers: list[Any] = []  # keeps the memory behind fake handles and samples alive
        self._handles = [self._pointer(real.c_nvmlDevice_t) for _ in devices]
        self._samples: dict[int, tuple[int, int]] = {}  # sample address -> (device index, sequence)
        self._sequence = 0

    # -- plumbing --------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Constants, structures and error classes come from the real module; functions do not.
        value = getattr(real, name)
        if callable(value) and name.startswith("nvml") and not isinstance(value, type):
            raise AttributeError(f"stand-in pynvml has no {name}")
        return value

    def _pointer(self, pointer_type: Any) -> Any:
        buffer = ctypes.create_string_buffer(16)
        self._buffers.append(buffer)
        return ctypes.cast(buffer, pointer_type)

    def _device(self, handle: Any, function: str) -> tuple[int, FakeDevice]:
        self.calls[function] = self.calls.get(function, 0) + 1
        address = ctypes.cast(handle, ctypes.c_void_p).value
        for index, h in enumerate(self._handles):
            if ctypes.cast(h, ctypes.c_void_p).value == address:
                device = self.devices[index]
                code = device.fail_all if device.fail_all is not None else device.fail.get(function)
                if code is not None:
                    raise NVMLError(code)
                return index, device
        raise NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)

    # -- library ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        device = self.devices[index]
        if device.fail.get("nvmlDeviceGetHandleByIndex") is not None:
            raise NVMLError(device.fail["nvmlDeviceGetHandleByIndex"])
        return self._handles[index]

    # -- device queries --------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle):
        return self._device(handle, "nvmlDeviceGetUUID")[1].uuid

    def nvmlDeviceGetName(self, handle):
        return self._device(handle, "nvmlDeviceGetName")[1].name

    def nvmlDeviceGetUtilizationRates(self, handle):
        device = self._device(handle, "nvmlDeviceGetUtilizationRates")[1]
        return real.c_nvmlUtilization_t(gpu=device.gpu_util, memory=device.mem_util)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        device = self._device(handle, "nvmlDeviceGetMemoryInfo")[1]
        if version and not self.memory_v2:
            raise NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        memory = real.c_nvmlMemory_v2_t() if version else real.c_nvmlMemory_t()
        memory.total, memory.used = device.memory_total, device.memory_used
        memory.free = device.memory_total - device.memory_used
        return memory

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._device(handle, "nvmlDeviceGetPowerUsage")[1].power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._device(handle, "nvmlDeviceGetEnforcedPowerLimit")[1].power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._device(handle, "nvmlDeviceGetTotalEnergyConsumption")[1].energy_mj

    def nvmlDeviceGetTemperatureV(self, handle, sensor, version=real.nvmlTemperature_v1):
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._device(handle, "nvmlDeviceGetTemperatureV")[1].temperature

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._device(handle, "nvmlDeviceGetTemperature")[1].temperature

    def nvmlDeviceGetClockInfo(self, handle, clock_type):
        device = self._device(handle, "nvmlDeviceGetClockInfo")[1]
        return {real.NVML_CLOCK_SM: device.sm_mhz, real.NVML_CLOCK_MEM: device.mem_mhz}[clock_type]

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle):
        self._device(handle, "nvmlDeviceGetSupportedClocksEventReasons")
        return real.nvmlClocksEventReasonAll

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._device(handle, "nvmlDeviceGetCurrentClocksEventReasons")[1].reasons

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        device = self._device(handle, "nvmlDeviceGetTotalEccErrors")[1]
        assert counter_type == real.NVML_VOLATILE_ECC
        if device.ecc is None:
            raise NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return device.ecc[error_type]

    # -- GPM -------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle):
        device = self._device(handle, "nvmlGpmQueryDeviceSupport")[1]
        support = real.c_nvmlGpmSupport_t()
        support.isSupportedDevice = 1 if device.gpm else 0
        return support

    def nvmlGpmSampleAlloc(self):
        return self._pointer(real.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample) -> None:
        self._samples.pop(ctypes.cast(sample, ctypes.c_void_p).value, None)

    def nvmlGpmSampleGet(self, handle, sample):
        index, _device = self._device(handle, "nvmlGpmSampleGet")
        self._sequence += 1
        self._samples[ctypes.cast(sample, ctypes.c_void_p).value] = (index, self._sequence)
        return sample

    def nvmlGpmMetricsGet(self, request):
        self.calls["nvmlGpmMetricsGet"] = self.calls.get("nvmlGpmMetricsGet", 0) + 1
        first = self._samples.get(ctypes.cast(request.sample1, ctypes.c_void_p).value)
        second = self._samples.get(ctypes.cast(request.sample2, ctypes.c_void_p).value)
        # Real GPM needs two samples of the same GPU, the older one first.
        if first is None or second is None or first[0] != second[0] or first[1] >= second[1]:
            raise NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        assert request.version == real.NVML_GPM_METRICS_GET_VERSION
        device = self.devices[second[0]]
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            if metric.metricId in device.gpm_values:
                metric.value = device.gpm_values[metric.metricId]
                metric.nvmlReturn = real.NVML_SUCCESS
            else:
                metric.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return request

    # -- events ----------------------------------------------------------------------------------
    def nvmlEventSetCreate(self):
        return self._pointer(real.c_nvmlEventSet_t)

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set) -> None:
        self._device(handle, "nvmlDeviceRegisterEvents")

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        self.event_waits += 1
        try:
            index, xid = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            self.event_timeouts += 1
            raise NVMLError(real.NVML_ERROR_TIMEOUT) from None
        data = real.c_nvmlEventData_t()
        data.device = self._handles[index]
        data.eventType = real.nvmlEventTypeXidCriticalError
        data.eventData = xid
        return data

    def nvmlEventSetFree(self, event_set) -> None:
        pass

    # -- test helpers ----------------------------------------------------------------------------
    def raise_xid(self, index: int, xid: int) -> None:
        self.events.put((index, xid))

    def wait_for_event_timeouts(self, count: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.event_timeouts < count and time.monotonic() < deadline:
            time.sleep(0.005)
