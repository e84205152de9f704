"""The simulated GPU model, in virtual time: values consistent with the load, faults as specified."""

from __future__ import annotations

import pytest

from infersight.capacity import GPU_PRESETS
from infersight.collectors.gpu.readings import DeviceError
from infersight.collectors.gpu.sim import (
    HW_THERMAL_CELSIUS,
    SM_CLOCK_MAX_HZ,
    ManualClock,
    SimBackend,
)

H100 = GPU_PRESETS["H100-SXM"]


def fleet(count: int = 2, gpu_type: str = "H100-SXM") -> tuple[SimBackend, ManualClock]:
    clock = ManualClock()
    return SimBackend(count, gpu_type, clock=clock), clock


def test_idle_gpu_draws_idle_power_and_reports_gpu_idle():
    sim, clock = fleet()
    clock.advance(10)
    reading = sim.gpu(0).read()
    assert reading.power_watts == pytest.approx(H100.idle_watts)
    assert reading.utilization == 0 and reading.bandwidth_utilization == 0
    assert reading.clock_events["gpu_idle"] is True
    assert reading.memory_total_bytes == H100.memory_bytes


def test_bandwidth_demand_shows_as_gpm_bandwidth_and_raises_power():
    sim, clock = fleet()
    sim.set_load(0, compute=0.2, bandwidth=0.9)
    clock.advance(5)
    busy, idle = sim.gpu(0).read(), sim.gpu(1).read()
    assert busy.bandwidth_utilization == pytest.approx(0.9)
    assert busy.bandwidth_source == "gpm"
    assert busy.sm_activity == pytest.approx(0.2)
    assert H100.idle_watts < busy.power_watts < H100.tdp_watts
    assert busy.power_watts > idle.power_watts
    assert busy.clock_events["gpu_idle"] is False
    assert busy.nvlink_bytes_per_second["rx"] > 0 and idle.nvlink_bytes_per_second["rx"] == 0


def test_full_load_reaches_tdp():
    sim, clock = fleet()
    sim.set_load(0, compute=1.0, bandwidth=1.0)
    clock.advance(1)
    assert sim.gpu(0).read().power_watts == pytest.approx(H100.tdp_watts)


def test_energy_is_the_integral_of_power():
    sim, clock = fleet()
    sim.set_load(0, compute=0.5, bandwidth=0.5)
    start = sim.gpu(0).read()
    clock.advance(100)
    end = sim.gpu(0).read()
    assert end.energy_joules - start.energy_joules == pytest.approx(end.power_watts * 100, rel=1e-6)


def test_temperature_lags_power():
    sim, clock = fleet()
    cold = sim.gpu(0).read().temperature_celsius
    sim.set_load(0, compute=1.0, bandwidth=1.0)
    clock.advance(5)
    warming = sim.gpu(0).read().temperature_celsius
    clock.advance(300)
    settled = sim.gpu(0).read().temperature_celsius
    assert cold < warming < settled
    assert settled - warming > warming - cold  # most of the rise comes later: a lag, not a step


def test_power_limit_caps_power_and_sets_sw_power_cap():
    sim, clock = fleet()
    sim.gpu(0).set_power_limit(400)
    sim.set_load(0, compute=1.0, bandwidth=1.0)
    clock.advance(1)
    reading = sim.gpu(0).read()
    assert reading.power_watts == pytest.approx(400)
    assert reading.clock_events["sw_power_cap"] is True
    assert reading.sm_clock_hertz < SM_CLOCK_MAX_HZ
    assert reading.bandwidth_utilization < 1.0


def test_thermal_throttle_fault_sets_hw_thermal_and_drops_clocks():
    sim, clock = fleet()
    sim.set_load(0, compute=0.8, bandwidth=0.8)
    clock.advance(1)
    before = sim.gpu(0).read()
    sim.gpu(0).inject_thermal_throttle()
    clock.advance(1)
    hot = sim.gpu(0).read()
    assert hot.temperature_celsius >= HW_THERMAL_CELSIUS
    assert hot.clock_events["hw_thermal"] is True
    assert hot.sm_clock_hertz < before.sm_clock_hertz
    assert hot.power_watts < before.power_watts  # slower clocks, less work, less power
    sim.gpu(0).inject_thermal_throttle(on=False)
    clock.advance(600)
    assert sim.gpu(0).read().clock_events["hw_thermal"] is False


def test_fall_off_bus_raises_xid_79_then_every_call_fails():
    sim, clock = fleet()
    sim.gpu(1).fall_off_bus()
    with pytest.raises(DeviceError, match="fallen off the bus"):
        sim.sample(sim.devices()[1])
    with pytest.raises(DeviceError):
        sim.sample(sim.devices()[1])
    assert sim.xid_counts() == {1: {79: 1}}
    assert sim.errors.counts == {("1", "sim.read"): 2}
    assert sim.sample(sim.devices()[0]).power_watts > 0  # the others carry on
    sim.gpu(1).reset()
    assert sim.sample(sim.devices()[1]).power_watts > 0


def test_ecc_errors_accumulate_and_uncorrected_raise_xid_48():
    sim, _clock = fleet()
    sim.gpu(0).inject_ecc(corrected=3)
    sim.gpu(0).inject_ecc(corrected=1, uncorrected=2)
    assert sim.gpu(0).read().ecc_errors == {"corrected": 4, "uncorrected": 2}
    assert sim.xid_counts() == {0: {48: 2}}


def test_pre_hopper_preset_has_no_gpm_and_falls_back_to_memory_busy():
    sim, clock = fleet(gpu_type="A100-80G")
    sim.set_load(0, compute=0.2, bandwidth=0.5)
    clock.advance(1)
    reading = sim.gpu(0).read()
    assert reading.bandwidth_source == "nvml_busy"
    assert reading.bandwidth_utilization == reading.memory_busy
    assert reading.sm_activity is None and reading.nvlink_bytes_per_second is None


def test_memory_used_follows_the_load_input():
    sim, _clock = fleet()
    sim.set_load(0, compute=0.1, bandwidth=0.1, memory_used_bytes=60e9)
    assert sim.gpu(0).read().memory_used_bytes == 60e9


@pytest.mark.parametrize("call, message", [
    (lambda s: s.set_load(0, compute=1.5, bandwidth=0), "compute must be a share between 0 and 1"),
    (lambda s: s.set_load(0, compute=0, bandwidth=float("nan")), "bandwidth must be a share"),
    (lambda s: s.set_load(0, compute=0, bandwidth=0, memory_used_bytes=1e15), "memory_used_bytes"),
    (lambda s: s.gpu(0).set_power_limit(10_000), "power limit"),
    (lambda s: s.gpu(0).inject_ecc(corrected=-1), "cannot be negative"),
])
def test_bad_load_input_is_a_clear_error_and_changes_nothing(call, message):
    sim, clock = fleet()
    sim.set_load(0, compute=0.3, bandwidth=0.4)
    with pytest.raises(ValueError, match=message):
        call(sim)
    clock.advance(1)
    reading = sim.gpu(0).read()
    assert reading.sm_activity == pytest.approx(0.3) and reading.power_limit_watts == H100.tdp_watts
    assert reading.ecc_errors == {"corrected": 0, "uncorrected": 0}


def test_bad_fleet_arguments():
    with pytest.raises(ValueError, match="unknown GPU type 'B300'"):
        SimBackend(2, "B300")
    with pytest.raises(ValueError, match="at least one"):
        SimBackend(0)
    with pytest.raises(IndexError, match="GPUs 0..1"):
        SimBackend(2).gpu(5)


def test_long_virtual_time_jump_is_bounded_and_consistent():
    sim, clock = fleet()
    sim.set_load(0, compute=0.5, bandwidth=0.5)
    clock.advance(24 * 3600)
    reading = sim.gpu(0).read()
    assert reading.energy_joules == pytest.approx(reading.power_watts * 24 * 3600, rel=1e-3)


def test_uuids_are_stable_and_distinct():
    a, b = SimBackend(4, node="n1"), SimBackend(4, node="n1")
    assert [d.uuid for d in a.devices()] == [d.uuid for d in b.devices()]
    assert len({d.uuid for d in a.devices()}) == 4
    assert SimBackend(1, node="n2").devices()[0].uuid != a.devices()[0].uuid
