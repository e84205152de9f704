"""Optional OTLP metrics push (``--otlp-endpoint``) through the OpenTelemetry SDK.

Every catalog signal of the GPU collector becomes an observable instrument (gauges as observable
gauges, counters as observable counters, cumulative) whose callback reads the same snapshot as
the Prometheus exposition, so both outputs always agree. Export results are counted in
``infersight_gpu_collector_otlp_exports_total``.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from infersight.collectors.gpu.readings import Backend
from infersight.collectors.gpu.sampler import Sampler
from infersight.collectors.gpu.series import ExporterHealth, Series, all_series
from infersight.signals import all_signals, gpu
from infersight.signals.catalog import Kind, Signal

# Catalog units -> UCUM, as OTLP expects.
UCUM = {"seconds": "s", "bytes": "By", "ratio": "1", "joules": "J", "watts": "W", "celsius": "Cel", "hertz": "Hz"}
SERIES_CACHE_SECONDS = 1.0  # one export cycle calls every callback; compute the series once per cycle


def metrics_url(endpoint: str, protocol: str) -> str:
    """For HTTP, ``http://host:4318`` means ``http://host:4318/v1/metrics`` (as the OTel env var does)."""
    if protocol == "http" and urllib.parse.urlparse(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/metrics"
    return endpoint


def make_exporter(endpoint: str, protocol: str) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        parsed = urllib.parse.urlparse(endpoint)
        return GrpcExporter(endpoint=parsed.netloc or endpoint, insecure=parsed.scheme != "https")
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

        return HttpExporter(endpoint=metrics_url(endpoint, protocol))
    raise ValueError(f"OTLP protocol must be http or grpc, got {protocol!r}")


class CountingExporter(MetricExporter):
    """Passes exports to the real OTLP exporter and counts each result for the health series."""

    def __init__(self, inner: MetricExporter, health: ExporterHealth):
        super().__init__(preferred_temporality=inner._preferred_temporality,
                         preferred_aggregation=inner._preferred_aggregation)
        self.inner = inner
        self.health = health

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        key = "success" if result is MetricExportResult.SUCCESS else "failure"
        self.health.otlp_exports[key] = self.health.otlp_exports.get(key, 0) + 1
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


class _SeriesCache:
    def __init__(self, produce: Callable[[], Iterable[Series]]):
        self._produce = produce
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._by_name: dict[str, list[Series]] = {}

    def for_signal(self, signal: Signal) -> list[Series]:
        with self._lock:
            now = time.monotonic()
            if now - self._at > SERIES_CACHE_SECONDS:
                grouped: dict[str, list[Series]] = {}
                for series in self._produce():
                    grouped.setdefault(series[0].name, []).append(series)
                self._by_name, self._at = grouped, now
            return self._by_name.get(signal.name, [])


class OTLPPush:
    """Pushes the GPU collector's series every ``interval_seconds`` until :meth:`shutdown`."""

    def __init__(self, sampler: Sampler, backend: Backend, node: str, health: ExporterHealth,
                 exporter: MetricExporter, interval_seconds: float = 10.0):
        self._cache = _SeriesCache(lambda: all_series(sampler, backend, node, health))
        reader = PeriodicExportingMetricReader(CountingExporter(exporter, health),
                                               export_interval_millis=interval_seconds * 1000)
        resource = Resource.create({"service.name": "infersight-gpu-collector", "host.name": node})
        self.provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = self.provider.get_meter("infersight.collectors.gpu")
        for signal in all_signals():
            if signal.producer != gpu.PRODUCER:
                continue
            create = meter.create_observable_counter if signal.kind is Kind.COUNTER else meter.create_observable_gauge
            create(signal.name, callbacks=[self._callback(signal)], unit=UCUM.get(signal.unit, ""),
                   description=signal.help)

    def _callback(self, signal: Signal):
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, dict(zip(signal.labels, labels, strict=True)))
                    for _signal, labels, value in self._cache.for_signal(signal)]
        return observe

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.provider.shutdown()
