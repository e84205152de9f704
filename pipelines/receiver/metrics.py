"""The receiver's own health (``infersight_pipeline_*``), registered from the signal catalog."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from infersight.pipelines.schema.ddl import DEFAULT_TABLES
from infersight.signals import pipeline as sig


class PipelineMetrics:
    """One registry per receiver; the receiver serves it on its HTTP listener at ``/metrics``."""

    def __init__(self, registry: CollectorRegistry | None = None, table: str = DEFAULT_TABLES.traces):
        # table: the trace table the writer inserts into (clickhouse.tables.traces), the batches' label
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.received = sig.SPANS_RECEIVED.register(r)
        self.accepted = sig.SPANS_ACCEPTED.register(r)
        self.rejected = sig.SPANS_REJECTED.register(r)
        self.truncated = sig.ATTRIBUTES_TRUNCATED.register(r)
        self.queue_depth = sig.QUEUE_DEPTH.register(r)
        self.queue_limit = sig.QUEUE_LIMIT.register(r)
        self.batch_rows = sig.BATCH_ROWS.register(r).labels(table=table)
        self.insert_duration = sig.INSERT_DURATION.register(r).labels(table=table)
        self.retries = sig.INSERT_RETRIES.register(r)
        self.reencoded = sig.REENCODED_BATCHES.register(r)
        self.spool_bytes = sig.SPOOL_BYTES.register(r)
        self.spool_batches = sig.SPOOL_BATCHES.register(r)
        self.replayed = sig.REPLAYED_BATCHES.register(r)
        self.spooled = sig.SPOOLED_BATCHES.register(r)
        self.spool_discarded = sig.SPOOL_DISCARDED.register(r)
        self.insert_errors = sig.INSERT_ERRORS.register(r)
        self.requests = sig.REQUESTS.register(r)

    def reject(self, protocol: str, reason: str, spans: int) -> None:
        if spans > 0:
            self.rejected.labels(protocol=protocol, reason=reason).inc(spans)
