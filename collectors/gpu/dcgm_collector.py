"""The GPU exporter over running dcgm-exporters: each scrape of ours scrapes them, maps, serves.

dcgm-exporter samples DCGM on its own interval and serves its last values, so there is nothing
to sample in the background: one Prometheus scrape of ours fetches every source (concurrently,
each with a deadline and a size limit) and renders only what this scrape fetched. A source that
fails contributes ``gpu_up 0`` for the GPUs it showed before and a counted error, never its old
numbers; a GPU that vanishes from a scrape reads ``gpu_up 0`` the same way.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from infersight.collectors.engine.scrape import ScrapeError, check_url, fetch
from infersight.collectors.exporter import exposition_of
from infersight.collectors.gpu.dcgm import DcgmFormatError, DcgmGPU, parse
from infersight.collectors.gpu.readings import DeviceIdentity
from infersight.collectors.gpu.series import Series, device_labels, reading_series
from infersight.collectors.scrape_pool import ScrapePool
from infersight.signals import gpu
from infersight.signals.catalog import Signal

log = logging.getLogger(__name__)
BACKEND = "dcgm"
MAX_WORKERS = 32


@dataclass(frozen=True)
class DcgmSource:
    url: str
    node: str = ""  # overrides the exporter's hostname label

    def __post_init__(self) -> None:
        check_url(self.url, "http://10.0.0.5:9400/metrics")  # raises TargetError, a ValueError

    @property
    def fallback_node(self) -> str:
        """The node label before (or without) a hostname label: the configured node, else the host."""
        return self.node or (urllib.parse.urlsplit(self.url).hostname or "")


@dataclass
class SourceResult:
    source: DcgmSource
    seconds: float
    gpus: list[DcgmGPU] = field(default_factory=list)
    reason: str | None = None  # down, timeout, too_large, http_status, malformed, unrecognized
    detail: str = ""

    @property
    def up(self) -> bool:
        return self.reason is None


class DcgmCollector(Collector):
    """A prometheus_client collector over one or more dcgm-exporter /metrics URLs."""

    def __init__(self, sources: list[DcgmSource], timeout: float = 2.0, max_bytes: int = 8 * 1024 * 1024,
                 log_changes: bool = True):
        if not sources:
            raise ValueError("no dcgm-exporter source: pass --source URL or set gpus.dcgm.sources")
        urls = [s.url for s in sources]
        if len(set(urls)) != len(urls):
            raise ValueError("a dcgm-exporter source is listed twice")
        self.sources = sources
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._scraping = ScrapePool("dcgm-exporter", log, min(MAX_WORKERS, len(sources)), "dcgm-scrape", log_changes)
        # Per source: every GPU it ever showed, so a GPU (or source) that goes away reads gpu_up 0.
        self._known: dict[str, dict[tuple[str, int], tuple[DeviceIdentity, str]]] = {s.url: {} for s in sources}
        self._nodes: dict[str, str] = {s.url: s.fallback_node for s in sources}
        self._scrapes: dict[str, int] = {}
        self.last: list[SourceResult] = []

    # -- one scrape of every source -----------------------------------------------------------
    def scrape(self) -> list[SourceResult]:
        with self._scraping.lock:
            results = self._scraping.map(self._scrape_one, self.sources)
            for r in results:
                url = r.source.url
                if r.up:
                    self._scrapes[url] = self._scrapes.get(url, 0) + 1
                    if r.gpus:
                        self._nodes[url] = r.gpus[0].node
                    for g in r.gpus:
                        self._known[url][(g.node, g.identity.index)] = (g.identity, g.driver_version)
                self._scraping.record(url, r.reason, r.detail)
            self.last = results
            return results

    def _scrape_one(self, source: DcgmSource) -> SourceResult:
        start = time.monotonic()
        try:
            fetched = fetch(source.url, self.timeout, self.max_bytes)
            gpus = parse(fetched.text, source.node)
        except ScrapeError as exc:
            return SourceResult(source, time.monotonic() - start, reason=exc.reason, detail=str(exc))
        except DcgmFormatError as exc:
            return SourceResult(source, time.monotonic() - start, reason="malformed", detail=str(exc))
        if not gpus:
            return SourceResult(source, time.monotonic() - start, reason="unrecognized",
                                detail="valid exposition but no DCGM_FI_* series with a gpu label "
                                       "(is this dcgm-exporter's /metrics?)")
        return SourceResult(source, time.monotonic() - start, gpus)

    # -- series -------------------------------------------------------------------------------
    def series(self, results: list[SourceResult]) -> Iterator[Series]:
        for r in results:
            url = r.source.url
            seen = {(g.node, g.identity.index) for g in r.gpus}
            for g in r.gpus:
                yield from gpu_series(g)
            for (node, index), (identity, driver) in sorted(self._known[url].items()):
                if (node, index) not in seen:
                    labels = device_labels(node, identity)
                    yield gpu.INFO, (*labels, driver), 1.0
                    yield gpu.UP, labels, 0.0
            node = self._nodes[url]
            yield gpu.COLLECTOR_DEVICES, (node, BACKEND), float(len(r.gpus))
            yield gpu.COLLECTOR_SAMPLES, (node,), float(self._scrapes.get(url, 0))
            yield gpu.COLLECTOR_SAMPLE_DURATION, (node,), r.seconds
            for (error_url, reason), count in sorted(self._scraping.errors.items()):
                if error_url == url:
                    yield gpu.COLLECTOR_ERRORS, (node, "", f"dcgm_scrape_{reason}"), float(count)

    def families(self, results: list[SourceResult]) -> list:
        families: dict[Signal, Any] = {}
        for signal, label_values, value in self.series(results):
            family = families.get(signal)
            if family is None:
                family = families[signal] = signal.family()
            family.add_metric(label_values, value)
        return list(families.values())

    def collect(self):
        return self.families(self.scrape())

    def describe(self) -> list:
        return []  # never scrape the sources at registration

    # -- --once output ------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for r in self.last:
            for g in r.gpus:
                reading = g.reading
                rows.append({"node": g.node, "gpu": g.identity.index, "uuid": g.identity.uuid,
                             "gpu_model": g.identity.name, "up": 1,
                             "bandwidth_utilization": reading.bandwidth_utilization,
                             "bandwidth_source": reading.bandwidth_source, "utilization": reading.utilization,
                             "power_watts": reading.power_watts, "energy_joules": reading.energy_joules,
                             "temperature_celsius": reading.temperature_celsius,
                             "memory_used_bytes": reading.memory_used_bytes, "last_xid": g.last_xid,
                             "pods": ",".join(f"{ns}/{pod}" for ns, pod, _c in sorted(g.pods))})
            if not r.up:
                rows.append({"node": self._nodes[r.source.url], "up": 0, "error": f"{r.reason}: {r.detail}",
                             "source": r.source.url})
        return rows

    def close(self) -> None:
        self._scraping.close()


def gpu_series(g: DcgmGPU) -> Iterator[Series]:
    """The catalog series of one GPU a dcgm-exporter scrape showed (it answered: gpu_up 1)."""
    labels = device_labels(g.node, g.identity)
    yield gpu.INFO, (*labels, g.driver_version), 1.0
    yield gpu.UP, labels, 1.0
    if g.reading is not None:
        yield from reading_series(labels, g.reading)
    if g.last_xid is not None:
        yield from xid_series(labels, g.last_xid)
    for pod in sorted(g.pods):
        yield gpu.POD_INFO, (*labels, *pod), 1.0


def xid_series(labels: tuple[str, ...], last_xid: int) -> Iterator[Series]:
    """dcgm-exporter's last-XID gauge as the catalog's XID counter.

    The known codes (``gpu.KNOWN_XIDS``, the ones the NVML collector also creates at 0) are always
    present, 1 while the GPU's last XID is that code and 0 otherwise; another code shows (at 1)
    while it is the last one. So ``increase()`` counts each time the last XID became that code: a
    first XID 79 (or 13) is a 0 -> 1 step the alerts see. The same code raised again is invisible
    (the last value does not change).
    """
    code = str(last_xid)
    for known in gpu.KNOWN_XIDS:
        yield gpu.XID_ERRORS, (*labels, known), 1.0 if code == known else 0.0
    if last_xid != 0 and code not in gpu.KNOWN_XIDS:
        yield gpu.XID_ERRORS, (*labels, code), 1.0


def build_registry(collector: DcgmCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(collector: DcgmCollector, results: list[SourceResult]) -> str:
    """The exposition of scrape ``results`` already taken (what ``--once`` prints), without scraping again."""
    return exposition_of(collector.families(results))
