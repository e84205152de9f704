"""Request metrics over OTLP, under the OpenTelemetry GenAI metric names.

The tracer's request metrics live in a prometheus_client registry (``llm_*`` names, what Prometheus
scrapes). :class:`RequestMetricsPush` reads that registry every ``interval_seconds`` and exports the
same numbers over OTLP, renamed where the GenAI conventions define the metric
(``open-telemetry/semantic-conventions-genai``, ``model/gen-ai/metrics.yaml`` and
``usage-metrics.yaml``): histograms as histograms with their buckets, counters as cumulative sums,
gauges as gauges. The hot path is untouched: nothing is recorded twice, the conversion runs in the
push thread.

GenAI-named metrics carry the conventions' attributes: ``gen_ai.operation.name`` and
``gen_ai.provider.name`` (the service's, given here: the Prometheus series carry no operation, so
one push names one), ``gen_ai.request.model`` (the ``model`` label), ``server.address`` and
``server.port`` (the ``instance`` label split, DESIGN 10), plus ``llm.pool`` and
``llm.routing.strategy``. Metrics without a convention keep their catalog name and labels.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry

from infersight import attributes as attr
from infersight.instances import split_instance
from infersight.signals import request
from infersight.signals.catalog import CATALOG, Kind

log = logging.getLogger(__name__)
SCOPE = InstrumentationScope("infersight.instrumentation")
UCUM = {"seconds": "s", "tokens": "{token}", "ratio": "1", "": "1"}

# catalog signal name -> the GenAI convention's metric name.
GENAI_NAMES: dict[str, str] = {
    request.TTFT.name: "gen_ai.server.time_to_first_token",
    request.TPOT.name: "gen_ai.server.time_per_output_token",
    request.E2E.name: "gen_ai.server.request.duration",
    request.INPUT_TOKENS.name: "gen_ai.client.inference.usage.detailed.input_tokens",
    request.OUTPUT_TOKENS.name: "gen_ai.client.inference.usage.detailed.output_tokens",
    request.CACHED_INPUT_TOKENS.name: "gen_ai.client.inference.usage.detailed.cache_read.input_tokens",
}
TOKEN_METRICS = {request.INPUT_TOKENS.name, request.OUTPUT_TOKENS.name, request.CACHED_INPUT_TOKENS.name}
# Catalog label -> GenAI attribute, for the GenAI-named metrics.
GENAI_ATTRIBUTES = {"model": attr.GEN_AI_REQUEST_MODEL, "pool": attr.POOL, "strategy": attr.ROUTING_STRATEGY}


def _attributes(labels: Mapping[str, str], genai: bool, service: Mapping[str, str]) -> dict[str, Any]:
    if not genai:
        return {k: v for k, v in labels.items() if v != ""}
    out: dict[str, Any] = dict(service)
    for label, value in labels.items():
        if label == "instance":
            address = split_instance(value) if value else None
            if address is not None:
                out[attr.SERVER_ADDRESS], out[attr.SERVER_PORT] = address
            elif value:
                out[attr.INSTANCE] = value
        elif value and label in GENAI_ATTRIBUTES:
            out[GENAI_ATTRIBUTES[label]] = value
        elif value:
            out[f"llm.{label}"] = value
    return out


def convert(registry: CollectorRegistry, *, operation: str, provider: str | None, start_unix_nano: int,
            now_unix_nano: int | None = None) -> list[Metric]:
    """The registry's catalog metrics as OTLP metrics (cumulative since ``start_unix_nano``)."""
    now = now_unix_nano or time.time_ns()
    service = {attr.GEN_AI_OPERATION_NAME: operation}
    if provider:
        service[attr.GEN_AI_PROVIDER_NAME] = provider
    metrics: list[Metric] = []
    for family in registry.collect():
        signal = CATALOG.get(family.name) or CATALOG.get(family.name + "_total")
        if signal is None:
            continue
        genai = signal.name in GENAI_NAMES
        name = GENAI_NAMES.get(signal.name, signal.name)
        unit = UCUM.get(signal.unit, signal.unit)
        extra = {"gen_ai.token.modality": "text"} if signal.name in TOKEN_METRICS else {}
        if signal.kind is Kind.HISTOGRAM:
            points = _histogram_points(family, genai, {**service, **extra}, start_unix_nano, now)
            data: Any = Histogram(points, AggregationTemporality.CUMULATIVE)
        else:
            points = [NumberDataPoint({**_attributes(s.labels, genai, {**service, **extra})}, start_unix_nano, now,
                                      s.value)
                      for s in family.samples if s.name == signal.name]
            if signal.kind is Kind.COUNTER:
                data = Sum(points, AggregationTemporality.CUMULATIVE, is_monotonic=True)
            else:
                data = Gauge(points)
        if points:
            metrics.append(Metric(name, signal.help, unit, data))
    return metrics


def _histogram_points(family, genai: bool, service: Mapping[str, str], start: int, now: int) -> list:
    series: dict[tuple, dict[str, Any]] = {}
    for sample in family.samples:
        labels = {k: v for k, v in sample.labels.items() if k != "le"}
        entry = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "buckets": [], "sum": 0.0,
                                                                 "count": 0})
        if sample.name.endswith("_bucket"):
            entry["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_sum"):
            entry["sum"] = sample.value
        elif sample.name.endswith("_count"):
            entry["count"] = int(sample.value)
    points = []
    for entry in series.values():
        cumulative = sorted(entry["buckets"])
        bounds = [bound for bound, _ in cumulative if bound != float("inf")]
        counts, previous = [], 0.0
        for _bound, count in cumulative:  # Prometheus buckets are cumulative, OTLP's are per bucket
            counts.append(int(count - previous))
            previous = count
        points.append(HistogramDataPoint(_attributes(entry["labels"], genai, service), start, now, entry["count"],
                                         entry["sum"], counts, bounds, min=None, max=None))
    return points


class RequestMetricsPush:
    """Exports the registry every ``interval_seconds`` until :meth:`shutdown` (one last export then)."""

    def __init__(self, registry: CollectorRegistry, exporter: MetricExporter, *, service_name: str,
                 operation: str = "chat", provider: str | None = None, interval_seconds: float = 10.0):
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be positive, got {interval_seconds}")
        self.registry, self.exporter = registry, exporter
        self.operation, self.provider = operation, provider
        self.interval_seconds = interval_seconds
        self.resource = Resource.create({"service.name": service_name})
        self.started_unix_nano = time.time_ns()
        self.results: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="request-metrics-otlp", daemon=True)
        self._thread.start()

    def export_once(self) -> MetricExportResult:
        metrics = convert(self.registry, operation=self.operation, provider=self.provider,
                          start_unix_nano=self.started_unix_nano)
        data = MetricsData([ResourceMetrics(self.resource, [ScopeMetrics(SCOPE, metrics, "")], "")])
        try:
            result = self.exporter.export(data, timeout_millis=10_000)
        except Exception:  # noqa: BLE001 - an exporter bug must not end the push thread; it is counted
            log.exception("OTLP request-metrics export failed")
            result = MetricExportResult.FAILURE
        key = "success" if result is MetricExportResult.SUCCESS else "failure"
        self.results[key] = self.results.get(key, 0) + 1
        return result

    def _run(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            self.export_once()

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_seconds + 15)
        self.export_once()
        self.exporter.shutdown()


def push_from_config(tracing_config, registry: CollectorRegistry, service_name: str,
                     provider: str | None = None, operation: str = "chat") -> RequestMetricsPush | None:
    """The push the ``tracing`` section asks for (``metrics_otlp_endpoint``), else None."""
    endpoint = tracing_config.metrics_otlp_endpoint
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    url = endpoint.rstrip("/")
    if not url.endswith("/v1/metrics"):
        url += "/v1/metrics"
    return RequestMetricsPush(registry, OTLPMetricExporter(endpoint=url), service_name=service_name,
                              operation=operation, provider=provider,
                              interval_seconds=tracing_config.metrics_interval_seconds)
