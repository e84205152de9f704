"""The engine collector: one collection cycle per Prometheus scrape of our /metrics.

Each cycle scrapes every target concurrently (bounded thread pool, per-target deadline and size
limit) and exposes only what this cycle fetched. A failed target therefore contributes no
series at all, only ``llm_engine_up 0`` and a counted error: never stale data shown as fresh.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.registry import Collector

from infersight.signals import engine as sig
from infersight.signals.catalog import Signal

from ..scrape_pool import ScrapePool
from .normalize import Normalized, NormalizeError, normalize
from .scrape import ScrapeError, fetch
from .targets import FileSD, Target, check_unique

log = logging.getLogger(__name__)
MAX_WORKERS = 128  # bounds a cycle to ~timeout x ceil(targets / 128) when every target hangs


@dataclass
class TargetResult:
    target: Target
    engine: str  # detected or configured; "unknown" before the first successful detection
    seconds: float
    normalized: Normalized | None = None
    reason: str | None = None  # scrape-error reason when the target failed
    detail: str = ""

    @property
    def up(self) -> bool:
        return self.normalized is not None

    def row(self) -> dict:
        return {"instance": self.target.instance, "engine": self.engine, "up": int(self.up),
                "series": self.normalized.series_count() if self.normalized else 0,
                "seconds": round(self.seconds, 4), "error": self.reason or "", "detail": self.detail}


@dataclass
class CycleResult:
    results: list[TargetResult]
    seconds: float
    file_sd_error: str | None = None
    families: list = field(default_factory=list)


class EngineCollector(Collector):
    """A prometheus_client collector; register it in a CollectorRegistry and serve that."""

    def __init__(self, static_targets: Iterable[Target] = (), file_sd: str | None = None,
                 timeout: float = 2.0, max_bytes: int = 8 * 1024 * 1024, max_workers: int = MAX_WORKERS,
                 log_changes: bool = True):
        self.static_targets = list(static_targets)
        check_unique(self.static_targets)
        self.file_sd = FileSD(file_sd) if file_sd else None
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.log_changes = log_changes  # warn on stderr when a target fails or recovers, and on a bad file_sd
        # max_workers 0: scrape in the calling thread.
        self._scraping = ScrapePool("engine target", log, max_workers, "engine-scrape", log_changes)
        self._file_sd_reloads: Counter[str] = Counter()
        self._engines: dict[str, str] = {}  # instance -> last detected engine, for a stable `up` label

    # -- targets ------------------------------------------------------------------------------
    def targets(self) -> list[Target]:
        """Static targets plus the file_sd ones (reloaded if the file changed); static names win."""
        if self.file_sd is None:
            return list(self.static_targets)
        outcome = self.file_sd.poll()
        if outcome:
            self._file_sd_reloads[outcome] += 1
            if outcome == "error" and self.log_changes:
                log.warning("infersight: file_sd: %s (keeping the last good targets)", self.file_sd.last_error)
        names = {t.instance for t in self.static_targets}
        return self.static_targets + [t for t in self.file_sd.targets if t.instance not in names]

    # -- one cycle ----------------------------------------------------------------------------
    def run_cycle(self) -> CycleResult:
        with self._scraping.lock:
            start = time.monotonic()
            targets = self.targets()
            results = self._scraping.map(self._scrape, targets)
            # A target removed from file_sd takes its counters with it.
            self._scraping.forget_all_but({t.instance for t in targets})
            for r in results:
                self._scraping.record(r.target.instance, r.reason, r.detail, r.target.url)
            cycle = CycleResult(results, time.monotonic() - start,
                                self.file_sd.last_error if self.file_sd else None)
            cycle.families = self._families(cycle)
            return cycle

    def _scrape(self, target: Target) -> TargetResult:
        start = time.monotonic()
        engine = target.fixed_engine or self._engines.get(target.instance, "unknown")
        try:
            fetched = fetch(target.url, self.timeout, self.max_bytes)
            normalized = normalize(fetched.text, target.labels(), target.fixed_engine)
        except (ScrapeError, NormalizeError) as exc:
            return TargetResult(target, engine, time.monotonic() - start, reason=exc.reason, detail=str(exc))
        self._engines[target.instance] = normalized.engine
        return TargetResult(target, normalized.engine, time.monotonic() - start, normalized)

    # -- exposition ---------------------------------------------------------------------------
    def describe(self) -> list:
        return []  # families depend on what targets answer; never scrape at registration

    def collect(self) -> Iterator:
        yield from self.run_cycle().families

    def _families(self, cycle: CycleResult) -> list:
        by_signal: dict[Signal, list] = {}
        for r in cycle.results:
            if r.normalized:
                for signal, samples in r.normalized.samples.items():
                    by_signal.setdefault(signal, []).extend(samples)
        families = []
        for signal, samples in by_signal.items():
            family = signal.family()
            family.samples = samples
            families.append(family)

        up, duration, gpus = sig.UP.family(), sig.SCRAPE_DURATION.family(), sig.GPU_INFO.family()
        for r in cycle.results:
            up.add_metric([r.target.instance, r.engine], 1.0 if r.up else 0.0)
            duration.add_metric([r.target.instance, r.engine], r.seconds)
            t = r.target
            if r.normalized and t.node and t.gpu:
                for index in filter(None, (g.strip() for g in t.gpu.split(","))):
                    gpus.add_metric([t.instance, r.engine, r.normalized.model, t.pool, t.node, index], 1.0)
        if gpus.samples:
            families.append(gpus)
        errors = sig.SCRAPE_ERRORS.family()
        # Every known reason at 0 for every target, so a first failure is an increase.
        counts = self._scraping.error_counts((r.target.instance for r in cycle.results), sig.SCRAPE_ERROR_REASONS)
        for (instance, reason), count in counts:
            errors.add_metric([instance, reason], count)
        targets = sig.TARGETS.family()
        targets.add_metric([], len(cycle.results))
        cycle_seconds = sig.COLLECTION_DURATION.family()
        cycle_seconds.add_metric([], cycle.seconds)
        families += [up, duration, errors, targets, cycle_seconds]
        if self.file_sd is not None:
            reloads = sig.FILE_SD_RELOADS.family()
            for result in ("success", "error"):
                reloads.add_metric([result], self._file_sd_reloads[result])
            families.append(reloads)
        return families

    def close(self) -> None:
        self._scraping.close()
