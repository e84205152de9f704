"""A real Prometheus (Debian package) scrapes the simulated GPU exporter; catalog PromQL runs on it."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from infersight.collectors.exporter import serve
from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.promql import energy_per_token
from infersight.collectors.gpu.sim import SimBackend
from infersight.signals import engine, gpu

TOKENS_PER_SECOND = 2000.0


class EngineTokensStandIn:
    """STAND-IN for the engine collector's output (no inference engine here): only the generated-token
    counter, registered from the catalog and labelled as the engine collector labels it (node, gpu).

    The count is computed from the clock at each scrape, so its rate is exact however late threads
    run on a loaded machine (a ticking thread fell behind and skewed joules per token).
    """

    def __init__(self, node: str, gpu_index: str):
        self.labels = ["127.0.0.1:8000", "vllm", "gemma-27b", "stable", node, gpu_index, "0"]
        self.started = time.monotonic()
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self):
        family = engine.GENERATION_TOKENS.family()
        family.add_metric(self.labels, (time.monotonic() - self.started) * TOKENS_PER_SECOND)
        yield family

    def start(self) -> int:
        self.server, _ = serve(self.registry, "127.0.0.1:0")
        return self.server.server_port

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.real
def test_prometheus_scrapes_bandwidth_and_joins_energy_per_token(prometheus_server):
    sim = SimBackend(2, "H100-SXM", node="n1")
    sim.set_load(0, compute=0.3, bandwidth=0.85)
    exporter = GPUExporter(sim, "n1", interval_seconds=0.25)
    tokens = EngineTokensStandIn(node="n1", gpu_index="0")
    try:
        gpu_port = exporter.start("127.0.0.1:0")
        engine_port = tokens.start()
        prom = prometheus_server([f"127.0.0.1:{gpu_port}", f"127.0.0.1:{engine_port}"])

        bandwidth = prom.wait_for(gpu.MEMORY_BANDWIDTH_UTILIZATION.select(source="gpm", gpu="0"))
        assert float(bandwidth[0]["value"][1]) == pytest.approx(0.85)
        assert bandwidth[0]["metric"]["gpu_model"] == "H100-SXM"
        assert len(prom.query(gpu.UP.select(node="n1"))) == 2

        # Wait until both counters fill the 5s window: rate() extrapolates a series younger than its
        # window toward zero differently for each counter, which skews their ratio.
        for counter in (gpu.ENERGY.select(gpu="0"), engine.GENERATION_TOKENS.select()):
            prom.wait_for(f"count_over_time({counter}[5s]) >= 5", timeout=30)
        per_gpu = prom.wait_for(energy_per_token(window="5s"), timeout=30)
        assert [(r["metric"]["node"], r["metric"]["gpu"]) for r in per_gpu] == [("n1", "0")]  # GPU 1 runs no engine
        power = sim.gpu(0).read().power_watts
        expected = power / TOKENS_PER_SECOND
        assert float(per_gpu[0]["value"][1]) == pytest.approx(expected, rel=0.3)

        per_node = prom.query(energy_per_token(window="5s", by=("node",)))
        both_gpus = power + sim.gpu(1).read().power_watts
        assert float(per_node[0]["value"][1]) == pytest.approx(both_gpus / TOKENS_PER_SECOND, rel=0.3)
    finally:
        tokens.stop()
        exporter.stop()
