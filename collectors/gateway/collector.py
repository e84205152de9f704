"""The gateway-source collector: each Prometheus scrape of ours scrapes every gateway, maps, serves.

Gateways keep their own counters and histograms, so there is nothing to sample in between. A
target that fails contributes ``infersight_gateway_source_up 0`` and a counted error, never its
old numbers.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from infersight.collectors.engine.scrape import ScrapeError, TargetError, check_url, fetch
from infersight.collectors.scrape_pool import ScrapePool
from infersight.signals import gateway as gw
from infersight.signals.catalog import Signal
from infersight.signals.engine import SCRAPE_ERROR_REASONS

from .normalize import Normalized, TargetLabels, normalize
from .products import SOURCES

log = logging.getLogger(__name__)
KINDS = ("auto", *SOURCES)
MAX_WORKERS = 32


@dataclass(frozen=True)
class GatewayTarget:
    url: str
    kind: str = "auto"
    name: str = ""  # the `source` label of the health series; default host:port
    pool: str = ""
    strategy: str = ""
    model: str = ""

    def __post_init__(self) -> None:
        check_url(self.url, "http://epp:9090/metrics")
        if self.kind not in KINDS:
            raise TargetError(f"unknown gateway kind {self.kind!r} for {self.url}; expected one of {', '.join(KINDS)}")
        if not self.name:  # host:port, plus the path when it is not /metrics (two sources on one host)
            parts = urllib.parse.urlsplit(self.url)
            path = parts.path if parts.path not in ("", "/", "/metrics") else ""
            object.__setattr__(self, "name", parts.netloc + path)

    @property
    def fixed_kind(self) -> str | None:
        return None if self.kind == "auto" else self.kind


def parse_target_arg(spec: str) -> GatewayTarget:
    """``--target [KIND=]URL``, e.g. ``epp=http://epp.llm-d:9090/metrics``."""
    kind, sep, url = spec.partition("=")
    if not sep or "://" in kind:
        kind, url = "auto", spec
    return GatewayTarget(url=url, kind=kind.strip().lower())


def from_config(gateways_config) -> list[GatewayTarget]:
    targets = []
    for i, t in enumerate(gateways_config.targets):
        try:
            targets.append(GatewayTarget(url=t.url, kind=t.kind, name=t.name or "", pool=t.pool or "",
                                         strategy=t.strategy or "", model=t.model or ""))
        except TargetError as exc:
            raise TargetError(f"gateways.targets.{i}: {exc}") from None
    return targets


@dataclass
class TargetResult:
    target: GatewayTarget
    kind: str
    seconds: float
    normalized: Normalized | None = None
    reason: str | None = None
    detail: str = ""

    @property
    def up(self) -> bool:
        return self.normalized is not None

    def row(self) -> dict:
        return {"source": self.target.name, "kind": self.kind, "up": int(self.up),
                "series": self.normalized.series_count() if self.normalized else 0,
                "seconds": round(self.seconds, 4), "error": self.reason or "", "detail": self.detail}


class GatewayCollector(Collector):
    def __init__(self, targets: Iterable[GatewayTarget], timeout: float = 2.0, max_bytes: int = 8 * 1024 * 1024,
                 log_changes: bool = True):
        self.targets = list(targets)
        if not self.targets:
            raise TargetError("no gateway targets: pass --target [KIND=]URL or set gateways.targets in infersight.yaml")
        names: dict[str, str] = {}
        for t in self.targets:
            if t.name in names:
                raise TargetError(f"two gateway targets named {t.name!r} ({names[t.name]} and {t.url}); give one "
                                  "a distinct `name`")
            names[t.name] = t.url
        self.timeout, self.max_bytes = timeout, max_bytes
        self._scraping = ScrapePool("gateway source", log, min(MAX_WORKERS, len(self.targets)), "gateway-scrape",
                                    log_changes)
        self._kinds: dict[str, str] = {}

    def scrape(self) -> list[TargetResult]:
        with self._scraping.lock:
            results = self._scraping.map(self._scrape_one, self.targets)
            for r in results:
                self._scraping.record(r.target.name, r.reason, r.detail, r.target.url)
            return results

    def _scrape_one(self, target: GatewayTarget) -> TargetResult:
        start = time.monotonic()
        kind = target.fixed_kind or self._kinds.get(target.name, "unknown")
        try:
            fetched = fetch(target.url, self.timeout, self.max_bytes)
            normalized = normalize(fetched.text, TargetLabels(target.pool, target.strategy, target.model),
                                   target.fixed_kind)
        except ScrapeError as exc:  # a failed fetch, or a GatewayFormatError
            return TargetResult(target, kind, time.monotonic() - start, reason=exc.reason, detail=str(exc))
        self._kinds[target.name] = normalized.kind
        return TargetResult(target, normalized.kind, time.monotonic() - start, normalized)

    def families(self, results: list[TargetResult]) -> list:
        # Two gateways (EPP replicas, LiteLLM pods) can write the same series: each counted its own
        # requests and holds its own queue, so they add up; a backend's state is the worst one seen.
        by_signal: dict[Signal, dict[tuple, object]] = {}
        for r in results:
            if r.normalized:
                for signal, samples in r.normalized.samples.items():
                    merged = by_signal.setdefault(signal, {})
                    for sample in samples:
                        key = (sample.name, *sample.labels.items())
                        previous = merged.get(key)
                        if previous is None:
                            merged[key] = sample
                        elif signal is gw.INSTANCE_STATE:
                            merged[key] = previous._replace(value=max(previous.value, sample.value))
                        else:
                            merged[key] = previous._replace(value=previous.value + sample.value)
        families = []
        for signal, samples in by_signal.items():
            family = signal.family()
            family.samples = list(samples.values())
            families.append(family)
        up, duration = gw.SOURCE_UP.family(), gw.SOURCE_SCRAPE_DURATION.family()
        errors = gw.SOURCE_SCRAPE_ERRORS.family()
        for r in results:
            up.add_metric([r.target.name, r.kind], 1.0 if r.up else 0.0)
            duration.add_metric([r.target.name, r.kind], r.seconds)
        # Every known reason at 0 for every source, so a first failure is an increase. The reasons are
        # the engine collector's: the same fetch and the same format checks fail the same ways.
        for (source, reason), count in self._scraping.error_counts((r.target.name for r in results),
                                                                   SCRAPE_ERROR_REASONS):
            errors.add_metric([source, reason], count)
        return [*families, up, duration, errors]

    def collect(self):
        return self.families(self.scrape())

    def describe(self) -> list:
        return []

    def close(self) -> None:
        self._scraping.close()


def build_registry(collector: GatewayCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
