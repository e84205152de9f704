"""Pipeline health: the OTLP receiver and ClickHouse writer (``infersight_pipeline_*``) and every exporter's
own health (scrape status, GPU and engine collectors, the tracing SDK's drops)."""

from __future__ import annotations

from infersight.alerts.promql import ratio
from infersight.config import Config
from infersight.dashboards.panels import RATE, Line, Q, dashboard, layout, quantiles, timeseries
from infersight.signals import engine, gateway, gpu, pipeline, request
from infersight.thresholds import Thresholds

UID = "infersight-pipeline"
SPANS_PER_S = "suffix: spans/s"


def _receiver(limits: Thresholds) -> list[dict]:
    received = f"sum by (protocol) ({pipeline.SPANS_RECEIVED.rate(RATE)})"
    accepted = f"sum by (protocol) ({pipeline.SPANS_ACCEPTED.rate(RATE)})"
    rejected = f"sum by (protocol, reason) ({pipeline.SPANS_REJECTED.rate(RATE)})"
    rejected_share = ratio(pipeline.SPANS_REJECTED.rate(RATE), pipeline.SPANS_RECEIVED.rate(RATE), ("protocol",))
    requests = f"sum by (protocol, outcome) ({pipeline.REQUESTS.rate(RATE)})"
    truncated = f"sum({pipeline.ATTRIBUTES_TRUNCATED.rate(RATE)})"
    return [
        timeseries("Spans received and accepted", SPANS_PER_S,
                   [Q(received, "received {{protocol}}"), Q(accepted, "accepted {{protocol}}")],
                   description="Spans arriving over OTLP and spans stored (or spooled).",
                   good="the two lines on top of each other."),
        timeseries("Spans refused", SPANS_PER_S, [Q(rejected, "{{protocol}} {{reason}}")],
                   description="Spans refused, by reason (invalid_id, queue_full, unavailable, refused). Requests "
                               "refused whole (malformed, too large, unauthorized, and 429s while the queue takes "
                               "not one more span, refused unread) have no span count: see Export requests by "
                               "outcome.",
                   good="empty; queue_full means the receiver answered 429 and clients retry."),
        timeseries("Refused share of spans", "percentunit", [Q(rejected_share, "{{protocol}}")],
                   line=Line(limits.spans_rejected_ratio),
                   description="Refused over received; the line is thresholds.spans_rejected_ratio.",
                   good="under the line, ideally 0."),
        timeseries("Export requests by outcome", "reqps", [Q(requests, "{{protocol}} {{outcome}}")], stack=True,
                   width=12, description="OTLP export requests by the receiver's answer.",
                   good="all ok; malformed requests come from a misconfigured SDK, queue_full from overload "
                        "(clients retry)."),
        timeseries("Attributes truncated", "ops", [Q(truncated, "truncated")], width=12,
                   description="Attribute values cut at pipeline.max_attribute_length.",
                   good="0; a steady rate is an instrumentation writing prompts or blobs into attributes."),
    ]


def _writer() -> list[dict]:
    queue = f"sum({pipeline.QUEUE_DEPTH.select()})"
    insert = quantiles(pipeline.INSERT_DURATION, ("table",), {}, "{{table}}", qs=(0.5, 0.99))
    rows = pipeline.BATCH_ROWS.quantile(0.5, ("table",), RATE)
    errors = f"sum by (kind) ({pipeline.INSERT_ERRORS.rate(RATE)})"
    retries = f"sum({pipeline.INSERT_RETRIES.rate(RATE)})"
    return [
        timeseries("Spans queued in memory", "short",
                   [Q(queue, "queued"), Q(f"sum({pipeline.QUEUE_LIMIT.select()})", "admitted at most")],
                   description="Spans accepted and waiting for their insert, and the most the queue admits now "
                               "(what the writer drains in pipeline.queue_max_seconds, capped by "
                               "pipeline.queue_max_spans); queued at the limit means 429s.",
                   good="a sawtooth under pipeline.batch_rows; a rising floor means inserts fall behind."),
        timeseries("Insert latency", "s", insert, description="Duration of one batch insert into ClickHouse.",
                   good="well under pipeline.batch_seconds, so batches never pile up."),
        timeseries("Rows per insert (median)", "short", [Q(rows, "{{table}}")],
                   description="Rows in a typical insert.",
                   good="thousands or more; tiny inserts make many parts and slow ClickHouse's merges."),
        timeseries("Insert errors and retries", "ops", [Q(errors, "errors {{kind}}"), Q(retries, "retries")],
                   width=12, description="Failed inserts by kind, and their retries.",
                   good="0; transient errors that clear on retry are fine, permanent ones go to the spool."),
    ]


def _spool() -> list[dict]:
    spooled = f"sum({pipeline.SPOOLED_BATCHES.rate(RATE)})"
    replayed = f"sum({pipeline.REPLAYED_BATCHES.rate(RATE)})"
    discarded = f"sum by (reason) ({pipeline.SPOOL_DISCARDED.rate(RATE)})"
    return [
        timeseries("Spool size", "bytes", [Q(f"sum({pipeline.SPOOL_BYTES.select()})", "bytes")],
                   description="Bytes on disk waiting for ClickHouse; growing means ClickHouse refuses writes.",
                   good="0; it fills only while ClickHouse is away and drains after."),
        timeseries("Spool batches", "short", [Q(f"sum({pipeline.SPOOL_BATCHES.select()})", "batches")],
                   description="Batches on disk waiting for replay.", good="0."),
        timeseries("Batches spooled, replayed, discarded", "ops",
                   [Q(spooled, "spooled"), Q(replayed, "replayed"), Q(discarded, "discarded {{reason}}")],
                   description="Batches written to the spool, replayed from it, and discarded.",
                   good="replayed matches spooled; discarded is data lost (a corrupt file or a full spool)."),
    ]


def _exporters(limits: Thresholds) -> list[dict]:
    scrape_up = limits.exporter_up
    sample_age = f"max by (node) ({gpu.COLLECTOR_SAMPLE_AGE.select()})"
    gpu_errors = f"sum by (node, call) ({gpu.COLLECTOR_ERRORS.rate(RATE)})"
    engine_errors = f"sum by (instance, reason) ({engine.SCRAPE_ERRORS.rate(RATE)})"
    cycle = f"max({engine.COLLECTION_DURATION.select()})"
    dropped = f"sum by (service, reason) ({request.SPANS_DROPPED.rate(RATE)})"
    items = f"sum by (service, item) ({request.SPAN_ITEMS_DROPPED.rate(RATE)})"
    timelines = f"sum by (reason) ({request.TIMELINES_KEPT.rate(RATE)})"
    return [
        timeseries("Exporters scraped by Prometheus", "short", [Q(scrape_up, "{{job}} {{instance}}")], max_value=1,
                   description=f"Prometheus's up for the jobs matching thresholds.exporter_jobs "
                               f"({limits.exporter_jobs}).", good="1 for every exporter."),
        timeseries("GPU collector: sample age", "s", [Q(sample_age, "{{node}}")],
                   description="Seconds since the GPU collector last sampled.",
                   good="about gpus.sample_interval_seconds; growing means the sampler is stuck."),
        timeseries("GPU collector: failed device calls", "ops", [Q(gpu_errors, "{{node}} {{call}}")],
                   description="NVML (or dcgm, sim) calls that failed, by call.",
                   good="0; one call failing on every sample is a field this GPU does not support."),
        timeseries("Engine collector: scrape errors", "ops", [Q(engine_errors, "{{instance}} {{reason}}")],
                   description="Failed engine scrapes by instance and reason.",
                   good="0; down or timeout on one instance matches its Targets up = 0 on Engines."),
        timeseries("Gateway sources up", "short",
                   [Q(gateway.SOURCE_UP.select(), "{{source}} ({{kind}})")], max_value=1,
                   description="The gateway-source collector's scrapes of llm-d, production-stack, LiteLLM...",
                   good="1 for every source; 0 means the gateway's own series are absent, not zero."),
        timeseries("Engine collector: collection cycle", "s", [Q(cycle, "cycle")],
                   description="One pass over every engine target.", good="well under the scrape interval."),
        timeseries("Tracing SDK: spans dropped before export", SPANS_PER_S, [Q(dropped, "{{service}} {{reason}}")],
                   description="Spans the SDK lost: queue_full in a burst, export_failed after its retries.",
                   good="0."),
        timeseries("Tracing SDK: span items evicted", "ops", [Q(items, "{{service}} {{item}}")], width=12,
                   description="Events, attributes or links cut by the SDK's span limits.", good="0."),
        timeseries("Token timelines by sampling decision", "ops", [Q(timelines, "{{reason}}")], width=12,
                   description="Token timelines by tail-sampling reason, and not_kept.",
                   good="slow, error and timeout follow incidents; random stays near tracing.random_timeline_share."),
    ]


def build(config: Config, limits: Thresholds) -> dict:
    rows = [("OTLP receiver", _receiver(limits)), ("ClickHouse writer", _writer()), ("Spool", _spool()),
            ("Exporter health", _exporters(limits))]
    return dashboard(UID, "infersight / Pipeline health",
                     "The trace pipeline's own metrics and the health of every infersight exporter.", layout(rows))
