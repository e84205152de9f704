"""A real Prometheus (Debian package) scrapes the simulated GPU exporter; catalog PromQL runs on it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from infersight.collectors.engine.collector import EngineCollector
from infersight.collectors.engine.targets import Target
from infersight.collectors.exporter import serve
from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.promql import energy_per_token
from infersight.collectors.gpu.sim import SimBackend
from infersight.signals import engine, gpu
from tests.collectors.engine_server import EngineServer, LiveVLLM

TOKENS_PER_SECOND = 2000.0


def engine_collector(engines: EngineServer, node: str, gpu_index: str):
    """The real engine collector, in-process, over one engine stand-in (no inference engine here)."""
    url = engines.add("/vllm", LiveVLLM(TOKENS_PER_SECOND))
    collector = EngineCollector([Target(url, engine="vllm", node=node, gpu=gpu_index)])
    registry = CollectorRegistry()
    registry.register(collector)
    server, _thread = serve(registry, "127.0.0.1:0")
    return collector, server


@pytest.mark.real
def test_prometheus_scrapes_bandwidth_and_joins_energy_per_token(prometheus_server):
    sim = SimBackend(2, "H100-SXM", node="n1")
    sim.set_load(0, compute=0.3, bandwidth=0.85)
    exporter = GPUExporter(sim, "n1", interval_seconds=0.25)
    engines = EngineServer()
    collector, engine_server = engine_collector(engines, node="n1", gpu_index="0")
    try:
        gpu_port = exporter.start("127.0.0.1:0")
        prom = prometheus_server([f"127.0.0.1:{gpu_port}", f"127.0.0.1:{engine_server.server_port}"])

        bandwidth = prom.wait_for(gpu.MEMORY_BANDWIDTH_UTILIZATION.select(source="gpm", gpu="0"))
        assert float(bandwidth[0]["value"][1]) == pytest.approx(0.85)
        assert bandwidth[0]["metric"]["gpu_model"] == "H100-SXM"
        assert len(prom.query(gpu.UP.select(node="n1"))) == 2

        # Wait until both counters are well older than the 5s window: rate() extrapolates a series
        # younger than its window differently for each counter, and the engine collector's first,
        # slower scrapes are stamped earlier than they read; either would skew the ratio.
        for counter in (gpu.ENERGY.select(gpu="0"), engine.GENERATION_TOKENS.select()):
            prom.wait_for(f"count_over_time({counter}[15s]) >= 13", timeout=40)
        per_gpu = prom.wait_for(energy_per_token(window="5s"), timeout=30)
        assert [(r["metric"]["node"], r["metric"]["gpu"]) for r in per_gpu] == [("n1", "0")]  # GPU 1 runs no engine
        power = sim.gpu(0).read().power_watts
        expected = power / TOKENS_PER_SECOND
        assert float(per_gpu[0]["value"][1]) == pytest.approx(expected, rel=0.3)

        per_node = prom.query(energy_per_token(window="5s", by=("node",)))
        both_gpus = power + sim.gpu(1).read().power_watts
        assert float(per_node[0]["value"][1]) == pytest.approx(both_gpus / TOKENS_PER_SECOND, rel=0.3)
    finally:
        engine_server.shutdown()
        collector.close()
        engines.stop()
        exporter.stop()
