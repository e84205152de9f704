"""Pipeline alerts: the stack's own health (spool, dropped or refused spans, exporters and engine targets)."""

from __future__ import annotations

import math
from collections.abc import Callable

from infersight.alerts.model import Alert, Case, Expected, Series, Severity, SignalClass
from infersight.alerts.promql import num
from infersight.alerts.rules.common import INSTANCE, PCT, lab, pct, require, val
from infersight.alerts.series import counter, gauge, ramp
from infersight.signals import engine, pipeline, request
from infersight.signals.pipeline import ExportOutcome
from infersight.thresholds import SCRAPE_UP, Thresholds

SIGNAL = SignalClass.PIPELINE
MIB = 1024 * 1024
# Prometheus's own per-target scrape health series: not ours to declare in the catalog, the one
# metric name typed here.


def spool_growing(limits: Thresholds) -> Alert:
    return Alert(
        name="InfersightSpoolGrowing",
        expr=f"{pipeline.SPOOL_BYTES.select()} > 0 and deriv({pipeline.SPOOL_BYTES.select()}[15m]) > 0",
        for_="15m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="The receiver's on-disk spool keeps growing: ClickHouse is not taking writes.",
        description=(f"The spool holds {val(0)} bytes and has grown for 15 minutes: spans are safe on disk but "
                     "not queryable. Check that ClickHouse is up and accepting inserts; the spool replays by "
                     "itself once it is."),
        cases=[
            Case("spool growing 1 MiB a minute", [ramp(pipeline.SPOOL_BYTES, {}, 0, MIB, 40)], 30,
                 [Expected({}, 30 * MIB)]),
            Case("spool holding steady", [gauge(pipeline.SPOOL_BYTES, {}, [(MIB, 40)])], 30),
        ],
    )


def spans_dropped(limits: Thresholds) -> Alert:
    labels = {"service": "gateway"}
    return Alert(
        name="InfersightSpansDropped",
        expr=f"sum by (service) ({request.SPANS_DROPPED.rate()}) > 0",
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="The tracing SDK drops spans before export.",
        description=(f"{lab('service')} drops {val(1)} spans/s before export (its queue is full): the OTLP "
                     "receiver is slow or unreachable. Traces for those requests are lost; metrics are not."),
        cases=[
            Case("dropping a span a second", [counter(request.SPANS_DROPPED, labels, [(60, 20)])], 15,
                 [Expected(labels, 1.0)]),
            Case("dropped long ago, not now", [counter(request.SPANS_DROPPED, labels, [(60, 2), (0, 18)])], 15),
        ],
    )


def _refused_share(limits: Thresholds, *, name: str, refused, total, by: str, labels: dict[str, str],
                   traffic: Callable[[int, int], list[Series]], summary: str, description: str) -> Alert:
    """Share of what a receiver gets that it refuses, per protocol and reason, over the threshold.

    ``refused`` and ``total`` are PromQL rates; ``traffic(refused, per_minute)`` builds the test input.
    """
    t = limits.spans_rejected_ratio
    per_minute = 10_000
    high, near = math.floor(t * per_minute) + 20, round(0.9 * t * per_minute)
    require(high / per_minute > t > near / per_minute, "refused shares must straddle the threshold")
    return Alert(
        name=name,
        expr=(f"sum by (protocol, {by}) ({refused})\n"
              f"/ on (protocol) group_left sum by (protocol) ({total}) > {num(t)}"),
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary=summary,
        description=description.replace("{threshold}", pct(t)),
        cases=[
            Case("refusing over the share", traffic(high, per_minute), 15, [Expected(labels, high / per_minute)]),
            Case("refusing just under the share", traffic(near, per_minute), 15),
        ],
    )


def spans_rejected(limits: Thresholds) -> Alert:
    labels = {"protocol": "grpc", "reason": "invalid_id"}
    return _refused_share(
        limits, name="InfersightSpansRejected", by="reason", labels=labels,
        refused=pipeline.SPANS_REJECTED.rate(), total=pipeline.SPANS_RECEIVED.rate(),
        traffic=lambda refused, total: [counter(pipeline.SPANS_RECEIVED, {"protocol": "grpc"}, [(total, 20)]),
                                        counter(pipeline.SPANS_REJECTED, labels, [(refused, 20)])],
        summary="The OTLP receiver refuses a share of the spans it gets.",
        description=(f"The {lab('protocol')} receiver refuses {PCT} of spans as {lab('reason')} (threshold "
                     "{threshold}). queue_full means overload (scale the receiver or ClickHouse); invalid_id "
                     "means a broken client."))


def export_requests_refused(limits: Thresholds) -> Alert:
    """Whole export requests refused before any span is counted (malformed, too large, unauthorized...)."""
    labels = {"protocol": "http", "outcome": str(ExportOutcome.MALFORMED)}
    ok = {"protocol": "http", "outcome": str(ExportOutcome.OK)}
    return _refused_share(
        limits, name="InfersightExportRequestsRefused", by="outcome", labels=labels,
        refused=pipeline.REQUESTS.rate(outcome=f"!={ExportOutcome.OK}"), total=pipeline.REQUESTS.rate(),
        traffic=lambda refused, total: [counter(pipeline.REQUESTS, ok, [(total - refused, 20)]),
                                        counter(pipeline.REQUESTS, labels, [(refused, 20)])],
        summary="The OTLP receiver refuses a share of whole export requests.",
        description=(f"The {lab('protocol')} receiver answers {PCT} of export requests with {lab('outcome')} "
                     "(threshold {threshold}). malformed, unsupported, too_large or unauthorized means a broken or "
                     "misconfigured client; queue_full or unavailable means overload."))


def exporter_down(limits: Thresholds) -> Alert:
    def up(job: str, value: int, instance: str = "n1:9835") -> Series:
        return Series(f'{SCRAPE_UP}{{job="{job}",instance="{instance}"}}', f"{value}x20")

    sample_job = "infersight-gpu"
    return Alert(
        name="InfersightExporterDown",
        expr=f"{limits.exporter_up} == 0",
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="Prometheus cannot scrape an infersight exporter.",
        description=(f"Prometheus has failed to scrape {lab('instance')} (job {lab('job')}) for 5 minutes: "
                     "the alerts fed by it are blind. Check the exporter process and its listener."),
        cases=[
            Case("our exporter down", [up(sample_job, 0), up("node", 1)], 15,
                 [Expected({"job": sample_job, "instance": "n1:9835"}, 0)]),
            Case("another job down, ours up", [up(sample_job, 1), up("node", 0)], 15),
        ],
    )


def engine_target_down(limits: Thresholds) -> Alert:
    labels = {"instance": INSTANCE, "engine": "vllm"}
    return Alert(
        name="InfersightEngineTargetDown",
        expr=f"{engine.UP.select()} == 0",
        for_="5m",
        severity=Severity.WARNING,
        signal=SIGNAL,
        summary="The engine collector cannot scrape an engine.",
        description=(f"The engine collector has failed to scrape {lab('instance')} ({lab('engine')}) for 5 minutes. "
                     "The engine may be down, or its /metrics too slow or malformed."),
        cases=[
            Case("engine unreachable", [gauge(engine.UP, labels, [(0, 20)])], 15, [Expected(labels, 0)]),
            Case("engine back after 3 minutes down", [gauge(engine.UP, labels, [(0, 3), (1, 17)])], 15),
        ],
    )


def alerts(limits: Thresholds) -> list[Alert]:
    return [spool_growing(limits), spans_dropped(limits), spans_rejected(limits), export_requests_refused(limits),
            exporter_down(limits),
            engine_target_down(limits)]
