"""The prometheus_client custom Collector: renders the sampler's last snapshot on each scrape."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from infersight.collectors.gpu.readings import Backend
from infersight.collectors.gpu.sampler import Sampler
from infersight.collectors.gpu.series import ExporterHealth, all_series


class GPUCollector(Collector):
    """Builds metric families from the signal catalog; a scrape only formats, never samples."""

    def __init__(self, sampler: Sampler, backend: Backend, node: str, health: ExporterHealth | None = None):
        self.sampler = sampler
        self.backend = backend
        self.node = node
        self.health = health or ExporterHealth()

    def collect(self):
        started = time.perf_counter()
        families = {}
        for signal, label_values, value in all_series(self.sampler, self.backend, self.node, self.health):
            family = families.get(signal.name)
            if family is None:
                family = families[signal.name] = signal.family()
            family.add_metric(label_values, value)
        # The duration of this rendering shows up in the next scrape (it cannot time itself).
        self.health.last_scrape_seconds = time.perf_counter() - started
        return list(families.values())


def build_registry(sampler: Sampler, backend: Backend, node: str,
                   health: ExporterHealth | None = None) -> tuple[CollectorRegistry, GPUCollector]:
    """A registry holding only the GPU collector (no process/platform collectors: one job)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = GPUCollector(sampler, backend, node, health)
    registry.register(collector)
    return registry, collector
