"""The NVML backend's logic against the stand-in pynvml (tests/collectors/fake_pynvml.py).

No GPU here: the stand-in fakes only the functions; constants, errors and ctypes structures are
the real nvidia-ml-py ones. The real library's absence is tested for real at the end.
"""

from __future__ import annotations

import ctypes.util

import pynvml as real
import pytest

from infersight.collectors.gpu import xid_events
from infersight.collectors.gpu.nvml_backend import NVMLBackend
from infersight.collectors.gpu.readings import BackendUnavailable, DeviceError, DeviceReading, ErrorCounts
from infersight.collectors.gpu.sampler import Sampler
from infersight.collectors.gpu.series import ExporterHealth, all_series
from infersight.collectors.gpu.xid_events import XidEventLoop
from infersight.signals import gpu
from tests.collectors.fake_pynvml import FakeDevice, FakeNVML

GPM_VALUES = {
    real.NVML_GPM_METRIC_DRAM_BW_UTIL: 82.5,
    real.NVML_GPM_METRIC_SM_UTIL: 40.0,
    real.NVML_GPM_METRIC_SM_OCCUPANCY: 25.0,
    real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 30.0,
    real.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 100.0,
    real.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 50.0,
    real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 2000.0,
    real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 1000.0,
}
MIB = 1024 * 1024


@pytest.fixture
def backends():
    opened: list[NVMLBackend] = []

    def open_backend(devices: list[FakeDevice], **kwargs) -> tuple[NVMLBackend, FakeNVML]:
        fake = FakeNVML(devices, **{k: v for k, v in kwargs.items() if k in ("init_error", "memory_v2")})
        backend = NVMLBackend(fake, xid_wait_ms=kwargs.get("xid_wait_ms", 20))
        opened.append(backend)
        return backend, fake

    yield open_backend
    for backend in opened:
        backend.close()


def hopper(uuid: str = "GPU-0", **fields) -> FakeDevice:
    return FakeDevice(uuid, gpm_values=dict(GPM_VALUES), **fields)


def test_readings_are_converted_to_base_units(backends):
    device = hopper(gpu_util=75, mem_util=60, memory_used=10 << 30, power_mw=450_500, power_limit_mw=700_000,
                    energy_mj=123_456_789, temperature=64, sm_mhz=1755, mem_mhz=2619,
                    ecc={0: 7, 1: 1}, reasons=real.nvmlClocksEventReasonSwPowerCap)
    backend, _fake = backends([device])
    (identity,) = backend.devices()
    assert (identity.uuid, identity.name) == ("GPU-0", "NVIDIA H100 80GB HBM3")
    r = backend.sample(identity)
    assert r.utilization == 0.75 and r.memory_busy == 0.6
    assert r.memory_used_bytes == 10 << 30 and r.memory_total_bytes == 80 << 30
    assert r.power_watts == pytest.approx(450.5) and r.power_limit_watts == 700
    assert r.energy_joules == pytest.approx(123_456.789)
    assert r.temperature_celsius == 64
    assert r.sm_clock_hertz == 1755e6 and r.memory_clock_hertz == 2619e6
    assert r.ecc_errors == {"corrected": 7, "uncorrected": 1}
    assert r.clock_events["sw_power_cap"] is True
    assert sum(r.clock_events.values()) == 1 and len(r.clock_events) == 9
    assert backend.driver_version == "570.86.15"


def test_gpm_needs_a_window_then_gives_bandwidth_with_source_gpm(backends):
    backend, fake = backends([hopper()])
    (identity,) = backend.devices()
    first = backend.sample(identity)
    # First sample: no window yet, so no bandwidth at all (not a flip to the fallback source).
    assert first.bandwidth_utilization is None and first.sm_activity is None
    second = backend.sample(identity)
    assert second.bandwidth_source == "gpm"
    assert second.bandwidth_utilization == pytest.approx(0.825)
    assert second.sm_activity == pytest.approx(0.40) and second.sm_occupancy == pytest.approx(0.25)
    assert second.tensor_activity == pytest.approx(0.30)
    assert second.pcie_bytes_per_second == {"rx": 100 * MIB, "tx": 50 * MIB}
    assert second.nvlink_bytes_per_second == {"rx": 2000 * MIB, "tx": 1000 * MIB}
    backend.sample(identity)  # the window slides: the stand-in rejects samples in the wrong order
    assert fake.calls["nvmlGpmMetricsGet"] == 2


def test_gpm_unsupported_falls_back_to_memory_busy(backends):
    backend, fake = backends([FakeDevice("GPU-a100", name="NVIDIA A100-SXM4-80GB", gpm=False, mem_util=55)])
    (identity,) = backend.devices()
    for _ in range(2):
        reading = backend.sample(identity)
        assert reading.bandwidth_source == "nvml_busy"
        assert reading.bandwidth_utilization == pytest.approx(0.55)
        assert reading.sm_activity is None
    assert "nvmlGpmSampleGet" not in fake.calls


def test_one_unsupported_gpm_metric_leaves_only_itself_out(backends):
    values = dict(GPM_VALUES)
    del values[real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC], values[real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC]
    backend, _fake = backends([FakeDevice("GPU-pcie", gpm_values=values)])
    (identity,) = backend.devices()
    backend.sample(identity)
    reading = backend.sample(identity)
    assert reading.nvlink_bytes_per_second is None
    assert reading.bandwidth_utilization == pytest.approx(0.825)


def test_nvml_error_on_one_device_marks_only_that_device_down(backends):
    devices = [hopper("GPU-0"), hopper("GPU-1"), hopper("GPU-2")]
    backend, _fake = backends(devices)
    sampler = Sampler(backend, interval_seconds=60)
    sampler.sample_once()
    devices[1].fail["nvmlDeviceGetPowerUsage"] = real.NVML_ERROR_UNKNOWN
    snapshot = sampler.sample_once()
    assert [isinstance(r, DeviceReading) for r in snapshot.readings] == [True, False, True]
    assert snapshot.readings[1].error.call == "nvmlDeviceGetPowerUsage"
    assert backend.errors.counts == {("1", "nvmlDeviceGetPowerUsage"): 1}

    series = list(all_series(sampler, backend, "n1", ExporterHealth()))
    up = {labels[1]: value for signal, labels, value in series if signal is gpu.UP}
    assert up == {"0": 1.0, "1": 0.0, "2": 1.0}
    powered = {labels[1] for signal, labels, _ in series if signal is gpu.POWER}
    assert powered == {"0", "2"}  # no stale number for GPU 1
    errors = [(labels, value) for signal, labels, value in series if signal is gpu.COLLECTOR_ERRORS]
    assert errors == [(("n1", "1", "nvmlDeviceGetPowerUsage"), 1.0)]

    del devices[1].fail["nvmlDeviceGetPowerUsage"]  # the device answers again
    assert all(isinstance(r, DeviceReading) for r in sampler.sample_once().readings)


def test_a_device_error_restarts_the_gpm_window(backends):
    device = hopper()
    backend, _fake = backends([device])
    (identity,) = backend.devices()
    backend.sample(identity)
    device.fail_all = real.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(DeviceError, match="GPU is lost"):
        backend.sample(identity)
    device.fail_all = None
    assert backend.sample(identity).bandwidth_utilization is None  # a window across the outage would lie
    assert backend.sample(identity).bandwidth_utilization == pytest.approx(0.825)


def test_not_supported_fields_are_absent_and_the_device_stays_up(backends):
    device = hopper(ecc=None)
    device.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVML_ERROR_NOT_SUPPORTED
    backend, fake = backends([device])
    (identity,) = backend.devices()
    for _ in range(3):
        reading = backend.sample(identity)
    assert reading.ecc_errors is None and reading.energy_joules is None
    assert reading.power_watts == 70
    assert backend.errors.counts == {}
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # not asked again


def test_older_driver_without_memory_v2_or_temperature_v_uses_the_v1_calls(backends):
    device = hopper(temperature=51)
    device.fail["nvmlDeviceGetTemperatureV"] = real.NVML_ERROR_FUNCTION_NOT_FOUND
    backend, fake = backends([device], memory_v2=False)
    (identity,) = backend.devices()
    reading = backend.sample(identity)
    assert reading.memory_used_bytes == 1 << 30
    assert reading.temperature_celsius == 51
    assert fake.calls["nvmlDeviceGetTemperature"] == 1


def test_xid_events_are_counted_per_device_and_timeouts_are_normal(backends):
    backend, fake = backends([hopper("GPU-0"), hopper("GPU-1")])
    fake.wait_for_event_timeouts(3)  # the loop keeps waiting through timeouts
    assert fake.event_timeouts >= 3 and backend.xid_counts() == {}
    fake.raise_xid(1, 79)
    fake.raise_xid(1, 79)
    fake.raise_xid(0, 13)
    fake.wait_for_event_timeouts(fake.event_timeouts + 2)
    assert backend.xid_counts() == {0: {13: 1}, 1: {79: 2}}
    assert backend.errors.counts == {}


def test_event_loop_survives_wait_errors(monkeypatch):
    fake = FakeNVML([hopper()])
    errors = ErrorCounts()
    loop = XidEventLoop(fake, {0: fake.nvmlDeviceGetHandleByIndex(0)}, errors, wait_ms=1)  # thread not started
    monkeypatch.setattr(xid_events, "RETRY_PAUSE_SECONDS", 0)

    def broken_wait(event_set, timeout_ms):
        raise real.NVMLError(real.NVML_ERROR_UNKNOWN)

    with monkeypatch.context() as patch:
        patch.setattr(fake, "nvmlEventSetWait_v2", broken_wait)
        loop.poll_once()
    assert errors.counts == {("", "nvmlEventSetWait"): 1}
    fake.raise_xid(0, 94)
    loop.poll_once()
    assert loop.counts() == {0: {94: 1}}
    loop.stop()


def test_device_lost_before_start_stays_listed_as_down(backends):
    devices = [hopper("GPU-0"), hopper("GPU-1")]
    devices[1].fail["nvmlDeviceGetHandleByIndex"] = real.NVML_ERROR_GPU_IS_LOST
    backend, _fake = backends(devices)
    assert [d.uuid for d in backend.devices()] == ["GPU-0", ""]
    snapshot = Sampler(backend).sample_once()
    assert isinstance(snapshot.readings[0], DeviceReading)
    assert snapshot.readings[1].error.call == "nvmlDeviceGetHandleByIndex"


@pytest.mark.parametrize("code, advice", [
    (real.NVML_ERROR_LIBRARY_NOT_FOUND, "--backend sim"),
    (real.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
    (real.NVML_ERROR_NO_PERMISSION, "/dev/nvidia"),
])
def test_nvml_init_failure_is_backend_unavailable_with_advice(code, advice):
    with pytest.raises(BackendUnavailable, match=advice):
        NVMLBackend(FakeNVML([], init_error=code))


def test_close_stops_the_event_thread_and_shuts_nvml_down(backends):
    backend, fake = backends([hopper()])
    thread = backend._events._thread
    backend.close()
    assert not thread.is_alive() and fake.shut_down


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_driver_says_use_sim(capsys):
    """The real nvidia-ml-py on a machine without libnvidia-ml: exit 2 and a hint, no traceback."""
    from infersight.cli import main

    assert main(["collect", "gpu", "--backend", "nvml", "--once"]) == 2
    err = capsys.readouterr().err
    assert "NVML library not found" in err and "--backend sim" in err
    assert "Traceback" not in err
