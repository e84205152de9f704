"""GPU exporter cost: scrape time for 8 and 64 simulated GPUs, and the sampler's CPU share at 1 Hz.

    .venv/bin/python benchmarks/gpu_scrape.py [--scrapes 200] [--seconds 10]

Targets (issue 3): under 5 ms per scrape for 8 GPUs, under 1% of a core for sampling at 1 Hz.
Each figure is printed with its ratio to the target, and the scrape next to a baseline run: a plain
prometheus_client registry holding the same series as static Gauges (the library's own floor for
rendering that many series). "render ms" is the in-process rendering alone, without HTTP.
The sampler also runs the NVML backend against the pynvml stand-in from the tests: that shows
this code's overhead per device, not the driver's time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for the tests' pynvml stand-in

from infersight.collectors.exporter import serve  # noqa: E402
from infersight.collectors.gpu.app import GPUExporter  # noqa: E402
from infersight.collectors.gpu.sampler import Sampler  # noqa: E402
from infersight.collectors.gpu.sim import SimBackend  # noqa: E402

SCRAPE_TARGET_MS_8_GPUS = 5.0
SAMPLER_TARGET_CORE_SHARE = 0.01


def http_scrape_ms(url: str, scrapes: int) -> float:
    times = []
    for _ in range(scrapes):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def render_ms(registry: CollectorRegistry, renders: int) -> float:
    """In-process rendering only (no HTTP): where our own code spends its part of a scrape."""
    times = []
    for _ in range(renders):
        started = time.perf_counter()
        generate_latest(registry)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def baseline_registry(text: str) -> CollectorRegistry:
    """The same series, as static Gauges in a plain registry."""
    registry = CollectorRegistry()
    for family in text_string_to_metric_families(text):
        gauges: dict[str, Gauge] = {}
        for sample in family.samples:
            labels = sorted(sample.labels)
            if sample.name not in gauges:
                gauges[sample.name] = Gauge(sample.name, family.documentation or sample.name, labels,
                                            registry=registry)
            gauge = gauges[sample.name]
            (gauge.labels(**sample.labels) if labels else gauge).set(sample.value)
    return registry


def scrape_figures(count: int, scrapes: int) -> dict[str, float]:
    sim = SimBackend(count, "H100-SXM", node="bench")
    sim.set_all_loads(0.3, 0.8)
    exporter = GPUExporter(sim, "bench", interval_seconds=1.0)
    port = exporter.start("127.0.0.1:0")
    try:
        text = exporter.exposition()
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        ours = http_scrape_ms(f"http://127.0.0.1:{port}/metrics", scrapes)
        ours_render = render_ms(exporter.registry, scrapes)
    finally:
        exporter.stop()
    baseline = baseline_registry(text)
    baseline_server, _ = serve(baseline, "127.0.0.1:0")
    try:
        baseline_ms = http_scrape_ms(f"http://127.0.0.1:{baseline_server.server_port}/metrics", scrapes)
    finally:
        baseline_server.shutdown()
        baseline_server.server_close()
    return {"series": series, "ours_ms": ours, "baseline_ms": baseline_ms,
            "ours_render_ms": ours_render, "baseline_render_ms": render_ms(baseline, scrapes)}


def sampler_core_share(backend, seconds: float) -> float:
    """CPU time of the sampler thread over wall time, sampling at 1 Hz."""
    sampler = Sampler(backend, interval_seconds=1.0)
    sampler.start()
    clock = time.pthread_getcpuclockid(sampler._thread.ident)
    cpu_start, wall_start = time.clock_gettime(clock), time.monotonic()
    time.sleep(seconds)
    cpu, wall = time.clock_gettime(clock) - cpu_start, time.monotonic() - wall_start
    sampler.stop()
    return cpu / wall


def nvml_stand_in(count: int):
    import pynvml

    from infersight.collectors.gpu.nvml_backend import NVMLBackend
    from tests.collectors.fake_pynvml import FakeDevice, FakeNVML

    values = {pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 80.0, pynvml.NVML_GPM_METRIC_SM_UTIL: 30.0}
    return NVMLBackend(FakeNVML([FakeDevice(f"GPU-{i}", gpm_values=dict(values)) for i in range(count)]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200, help="HTTP scrapes per fleet size (median taken)")
    parser.add_argument("--seconds", type=float, default=10.0, help="wall time per sampler CPU measurement")
    args = parser.parse_args()

    print(f"scrape cost: median of {args.scrapes} HTTP scrapes of /metrics (sim backend, 127.0.0.1)")
    print(f"{'GPUs':>5} {'series':>7} {'ms/scrape':>10} {'baseline ms':>12} {'vs baseline':>12} "
          f"{'vs 5 ms target':>15} {'render ms':>10} {'baseline render':>16}")
    for count in (8, 64):
        f = scrape_figures(count, args.scrapes)
        target = SCRAPE_TARGET_MS_8_GPUS * count / 8  # the target scales per GPU beyond 8
        print(f"{count:>5} {f['series']:>7} {f['ours_ms']:>10.2f} {f['baseline_ms']:>12.2f} "
              f"{f['ours_ms'] / f['baseline_ms']:>11.2f}x {f['ours_ms'] / SCRAPE_TARGET_MS_8_GPUS:>14.2f}x "
              f"{f['ours_render_ms']:>10.2f} {f['baseline_render_ms']:>16.2f}"
              + ("" if count == 8 else f"  (per-GPU target {target:.0f} ms: {f['ours_ms'] / target:.2f}x)"))

    print(f"\nsampler CPU at 1 Hz over {args.seconds:.0f} s (share of one core; target < 1%)")
    print(f"{'backend':<34} {'GPUs':>5} {'core share':>11} {'vs 1% target':>13}")
    for label, make, count in (("sim", lambda n: SimBackend(n), 8), ("sim", lambda n: SimBackend(n), 64),
                               ("nvml (pynvml stand-in, no driver)", nvml_stand_in, 8)):
        backend = make(count)
        try:
            share = sampler_core_share(backend, args.seconds)
        finally:
            backend.close()
        print(f"{label:<34} {count:>5} {share * 100:>10.3f}% {share / SAMPLER_TARGET_CORE_SHARE:>12.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
