"""The sim-backed exporter end to end: served on 127.0.0.1, scraped over HTTP, parsed by prometheus_client."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.sim import HW_THERMAL_CELSIUS, SimBackend
from infersight.signals import all_signals, gpu


@pytest.fixture
def running():
    started: list[GPUExporter] = []

    def start(count: int = 4, gpu_type: str = "H100-SXM", interval: float = 0.05, **kwargs):
        sim = SimBackend(count, gpu_type, node="n1")
        exporter = GPUExporter(sim, "n1", interval, **kwargs)
        port = exporter.start("127.0.0.1:0")
        started.append(exporter)
        return sim, exporter, f"http://127.0.0.1:{port}/metrics"

    yield start
    for exporter in started:
        exporter.stop()


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """{series name: {sorted label items: value}} from one HTTP scrape."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    series: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return series


def value(series, name: str, **labels: str) -> float | None:
    """The value of the one series of ``name`` whose labels include ``labels``."""
    found = [v for key, v in series.get(name, {}).items() if labels.items() <= dict(key).items()]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} series"
    return found[0] if found else None


def wait_until(url: str, check, timeout: float = 30.0):
    """The first scrape for which ``check`` holds; fails after a generous ``timeout`` (a loaded machine is slow)."""
    deadline = time.monotonic() + timeout
    while True:
        series = scrape(url)
        if check(series):
            return series
        assert time.monotonic() < deadline, f"the condition did not hold within {timeout}s"
        time.sleep(0.05)


SAMPLES = "infersight_gpu_collector_samples_total"


def after_samples(url: str, first, count: int):
    """A scrape taken once the sampler made ``count`` more passes than at ``first``: an event, not a sleep."""
    return wait_until(url, lambda s: value(s, SAMPLES) >= value(first, SAMPLES) + count)


def test_every_series_is_a_catalog_signal_with_its_labels(running):
    sim, _exporter, url = running()
    sim.gpu(0).inject_ecc(corrected=1, uncorrected=1)
    series = wait_until(url, lambda s: value(s, "gpu_xid_errors_total", gpu="0", xid="48") == 1)
    catalog = {s.name: s for s in all_signals()}
    assert series
    for name, samples in series.items():
        signal = catalog[name]
        assert signal.producer == gpu.PRODUCER
        for key in samples:
            assert tuple(sorted(dict(key))) == tuple(sorted(signal.labels)), name


def test_values_follow_the_injected_load(running):
    sim, _exporter, url = running(count=2)
    sim.set_load(0, compute=0.3, bandwidth=0.85)
    series = wait_until(url, lambda s: value(s, "gpu_memory_bandwidth_utilization_ratio", gpu="0") == 0.85)
    assert value(series, "gpu_memory_bandwidth_utilization_ratio", gpu="0", source="gpm") == pytest.approx(0.85)
    assert value(series, "gpu_memory_bandwidth_utilization_ratio", gpu="1", source="gpm") == 0
    assert value(series, "gpu_sm_activity_ratio", gpu="0") == pytest.approx(0.3)
    busy, idle = value(series, "gpu_power_watts", gpu="0"), value(series, "gpu_power_watts", gpu="1")
    assert idle == pytest.approx(70) and 70 < busy < 700
    assert value(series, "gpu_clock_event_active", gpu="1", reason="gpu_idle") == 1
    assert value(series, "gpu_clock_event_active", gpu="0", reason="gpu_idle") == 0
    assert value(series, "gpu_up", gpu="0", gpu_model="H100-SXM", node="n1") == 1
    assert value(series, "gpu_info", gpu="0", driver_version="sim") == 1
    # Energy is a counter that grows with power: the busy GPU gains more.
    first = scrape(url)
    second = after_samples(url, first, 6)
    gained = {g: value(second, "gpu_energy_joules_total", gpu=g) - value(first, "gpu_energy_joules_total", gpu=g)
              for g in ("0", "1")}
    assert gained["0"] > gained["1"] > 0
    assert gained["0"] / gained["1"] == pytest.approx(busy / idle, rel=0.25)


def test_gpu_falling_off_the_bus(running):
    sim, _exporter, url = running(count=3)
    sim.set_all_loads(0.5, 0.5)
    sim.gpu(1).fall_off_bus()
    series = wait_until(url, lambda s: value(s, "gpu_up", gpu="1") == 0)
    assert value(series, "gpu_up", gpu="1") == 0
    assert value(series, "gpu_xid_errors_total", gpu="1", xid="79") == 1
    # The paging XIDs exist at 0 on every GPU before their first event (DESIGN 8), so the
    # first one is an increase() and not a series that appears at 1.
    for xid in gpu.PAGING_XIDS:
        assert value(series, "gpu_xid_errors_total", gpu="0", xid=str(xid)) == 0
    assert value(series, "gpu_xid_errors_total", gpu="1", xid="48") == 0
    for name in ("gpu_power_watts", "gpu_energy_joules_total", "gpu_memory_bandwidth_utilization_ratio"):
        assert value(series, name, gpu="1") is None, f"{name} still reported for a lost GPU"
    assert value(series, "gpu_up", gpu="0") == value(series, "gpu_up", gpu="2") == 1
    assert value(series, "gpu_power_watts", gpu="2") > 70
    assert value(series, "infersight_gpu_collector_errors_total", gpu="1", call="sim.read") >= 1


def test_thermal_throttle_and_ecc_faults(running):
    sim, _exporter, url = running(count=2)
    sim.set_all_loads(0.8, 0.8)
    sim.gpu(0).inject_thermal_throttle()
    sim.gpu(1).inject_ecc(corrected=5, uncorrected=1)
    series = wait_until(url, lambda s: value(s, "gpu_clock_event_active", gpu="0", reason="hw_thermal") == 1)
    assert value(series, "gpu_clock_event_active", gpu="0", reason="hw_thermal") == 1
    assert value(series, "gpu_temperature_celsius", gpu="0") >= HW_THERMAL_CELSIUS
    assert value(series, "gpu_sm_clock_hertz", gpu="0") < value(series, "gpu_sm_clock_hertz", gpu="1")
    assert value(series, "gpu_clock_event_active", gpu="1", reason="hw_thermal") == 0
    assert value(series, "gpu_ecc_errors_total", gpu="1", type="corrected") == 5
    assert value(series, "gpu_ecc_errors_total", gpu="1", type="uncorrected") == 1
    assert value(series, "gpu_xid_errors_total", gpu="1", xid="48") == 1


def test_pre_hopper_gpus_label_the_fallback_source(running):
    sim, _exporter, url = running(count=1, gpu_type="A100-80G")
    sim.set_load(0, compute=0.1, bandwidth=0.4)
    series = wait_until(url, lambda s: (value(s, "gpu_memory_bandwidth_utilization_ratio", gpu="0") or 0) > 0)
    assert value(series, "gpu_memory_bandwidth_utilization_ratio", source="nvml_busy") == pytest.approx(0.5)
    assert "gpu_sm_activity_ratio" not in series


def test_stale_samples_are_not_served_as_data(running):
    _sim, exporter, url = running(count=2, interval=0.05, stale_after_seconds=0.2)
    exporter.sampler.stop()  # a hung sampler: the snapshot ages
    series = wait_until(url, lambda s: value(s, "gpu_up", gpu="0") == 0)
    assert value(series, "gpu_up", gpu="0") == value(series, "gpu_up", gpu="1") == 0
    assert "gpu_power_watts" not in series
    assert value(series, "infersight_gpu_collector_sample_age_seconds") > 0.2


def test_health_series(running):
    _sim, _exporter, url = running(count=3)
    first = scrape(url)
    series = after_samples(url, first, 1)
    assert value(series, "infersight_gpu_collector_devices", backend="sim", node="n1") == 3
    assert value(series, "infersight_gpu_collector_scrape_duration_seconds") > 0
    assert value(series, "infersight_gpu_collector_sample_duration_seconds") > 0


def test_a_scrape_does_not_wait_for_a_slow_sampler(running):
    sim, exporter, url = running(count=2, interval=0.05, stale_after_seconds=30)
    real_sample = sim.sample
    inside, release = threading.Event(), threading.Event()

    def stuck_sample(identity):
        inside.set()
        release.wait(60)
        return real_sample(identity)

    sim.sample = stuck_sample  # the next pass blocks until the scrape is done
    try:
        assert inside.wait(30), "the sampler never started a pass"
        # A scrape that waited for the sampler would hang here until scrape()'s 5 s timeout fails it.
        series = scrape(url)
        assert not release.is_set() and inside.is_set()
        assert value(series, "gpu_up", gpu="0") == 1
    finally:
        release.set()
