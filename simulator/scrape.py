"""One Prometheus scrape of the simulated fleet, through the real producers.

- gateway: the request metrics and instance health registry (:mod:`.gateway_metrics`);
- engines: the real engine collector's cycle (up, scrape errors, GPU info, normalized series),
  fed each simulated engine's vLLM families in memory instead of over HTTP;
- GPUs: the real GPU exporter's registry over each node's simulated backend.

Samples come back as Prometheus would store them: ``_created`` series dropped, ``job`` added,
``instance`` set to the scrape target unless the series carries its own (``honor_labels``, as the
engine collector is scraped), and Prometheus's own ``up`` per target.

The producers time their own work on the wall clock (a collection cycle, a GPU sampling pass, the
age of the last sample). In virtual time that work takes no simulated time, and the wall-clock
figures would make two runs of one scenario differ: they are written as the simulated fetch time
(``SIMULATED_FETCH_S``, what the engine targets report) and a sample age of 0 (the simulated GPUs
are sampled at every scrape).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry

from infersight.collectors.engine.collector import EngineCollector, TargetResult
from infersight.collectors.engine.engines import ENGINES
from infersight.collectors.engine.normalize import normalize_families
from infersight.collectors.engine.rules import EngineSpec
from infersight.collectors.engine.targets import Target
from infersight.collectors.gpu.collector import build_registry
from infersight.collectors.gpu.sampler import Sampler
from infersight.signals import engine as engine_signals
from infersight.signals import gpu as gpu_signals
from infersight.signals.engine import KV_CACHE_CAPACITY
from infersight.simulator import formats
from infersight.simulator.engine import SimEngine

Sample = tuple[str, dict[str, str], float]
GATEWAY_JOB, ENGINES_JOB, GPU_JOB = "infersight-gateway", "infersight-engines", "infersight-gpu"
GATEWAY_TARGET, COLLECTOR_TARGET = "sim-gateway:9100", "sim-collector:9836"
GPU_EXPORTER_PORT = 9835
SIMULATED_FETCH_S = 0.002
# wall-clock measurements of the producers' own work -> their value in virtual time
VIRTUAL_TIME_VALUES = {engine_signals.COLLECTION_DURATION.name: SIMULATED_FETCH_S,
                       gpu_signals.COLLECTOR_SAMPLE_DURATION.name: SIMULATED_FETCH_S,
                       gpu_signals.COLLECTOR_SCRAPE_DURATION.name: SIMULATED_FETCH_S,
                       gpu_signals.COLLECTOR_SAMPLE_AGE.name: 0.0}


class SimEngineCollector(EngineCollector):
    """The real engine collector, reading simulated engines from memory rather than over HTTP."""

    def __init__(self, engines: dict[str, SimEngine], keep: Callable[[str], bool] | None = None):
        self.sim_engines = engines
        self.keep = keep
        self.wanted: dict[str, set[str] | None] = {}  # per engine format
        # The cycle as the collector runs it, without threads (max_workers 0): nothing here waits.
        super().__init__(log_changes=False, max_workers=0)

    def sync_targets(self) -> None:
        self.static_targets = [Target(url=f"http://{e.instance}/metrics", engine=e.kind, pool=e.pool, node=e.node,
                                      gpu=str(e.gpu), role=e.role) for e in self.sim_engines.values()]

    def _scrape(self, target: Target) -> TargetResult:
        engine = next(e for e in self.sim_engines.values() if target.url == f"http://{e.instance}/metrics")
        if not engine.up:
            return TargetResult(target, engine.kind, SIMULATED_FETCH_S, reason="down", detail="connection refused")
        families = formats.families(engine)
        if engine.kind not in self.wanted:
            self.wanted[engine.kind] = _wanted_families(ENGINES[engine.kind], self.keep)
        wanted = self.wanted[engine.kind]
        if wanted is not None:
            families = {k: v for k, v in families.items() if k in wanted}
        normalized = normalize_families(families, target.labels(), engine.kind)
        return TargetResult(target, engine.kind, SIMULATED_FETCH_S, normalized)


def _wanted_families(spec: EngineSpec, keep: Callable[[str], bool] | None) -> set[str] | None:
    """The engine's families whose normalized series ``keep`` wants (None: all of them)."""
    if keep is None:
        return None
    wanted = set()
    for rule in spec.rules:
        if any(keep(name) for name in rule.signal.series_names()):
            wanted.update(rule.sources)
            wanted.update(name for name in (rule.requires, rule.unless_family) if name)
    if any(keep(name) for name in KV_CACHE_CAPACITY.series_names()):
        wanted.update(spec.derive_sources)
    return wanted


class FleetScraper:
    """Scrapes every producer of the fleet; ``keep`` drops series by name (the quality test keeps
    only what some rule reads: other series cannot change a rule's result)."""

    def __init__(self, fleet, keep: Callable[[str], bool] | None = None) -> None:
        self.fleet = fleet
        self.keep = keep
        self.engine_collector = SimEngineCollector(fleet.gateway.engines, keep)
        self.gpu_exporters: dict[str, tuple[Sampler, CollectorRegistry]] = {}

    def _gpu_registry(self, node) -> tuple[Sampler, CollectorRegistry]:
        if node.name not in self.gpu_exporters:
            sampler = Sampler(node.gpus, interval_seconds=15.0)
            registry, _collector = build_registry(sampler, node.gpus, node.name)
            self.gpu_exporters[node.name] = (sampler, registry)
        return self.gpu_exporters[node.name]

    def scrape(self) -> Iterator[Sample]:
        if self.keep is None:
            yield from self._scrape()
        else:
            yield from (s for s in self._scrape() if self.keep(s[0]))

    def _scrape(self) -> Iterator[Sample]:
        yield from _registry(self.fleet.metrics.registry, GATEWAY_JOB, GATEWAY_TARGET)
        self.engine_collector.sim_engines = {e.instance: e for e in self.fleet.engines()}  # prefill ones too
        self.engine_collector.sync_targets()
        cycle = self.engine_collector.run_cycle()
        yield from _families(cycle.families, ENGINES_JOB, COLLECTOR_TARGET)
        yield ("up", {"job": ENGINES_JOB, "instance": COLLECTOR_TARGET}, 1.0)
        for node in self.fleet.nodes:
            sampler, registry = self._gpu_registry(node)
            sampler.sample_once()
            yield from _registry(registry, GPU_JOB, f"{node.name}:{GPU_EXPORTER_PORT}")

    def close(self) -> None:
        self.engine_collector.close()


def _registry(registry: CollectorRegistry, job: str, target: str) -> Iterator[Sample]:
    yield from _families(registry.collect(), job, target)
    yield ("up", {"job": job, "instance": target}, 1.0)


def _families(families, job: str, target: str) -> Iterator[Sample]:
    for family in families:
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            labels = dict(s.labels)
            labels.setdefault("instance", target)
            labels["job"] = job
            yield s.name, labels, VIRTUAL_TIME_VALUES.get(s.name, float(s.value))
