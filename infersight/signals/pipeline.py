"""Pipeline health signals (``infersight_pipeline_*``), produced by ``pipelines/``."""

import enum

from infersight.signals.catalog import Kind, declare

PRODUCER = "pipelines"


class ExportOutcome(enum.StrEnum):
    """How the receivers answered an export request: the ``outcome`` label of ``REQUESTS``."""

    OK = "ok"  # stored (ClickHouse or spool); maybe with per-span rejections
    MALFORMED = "malformed"  # not OTLP
    UNSUPPORTED = "unsupported"  # content type or encoding
    TOO_LARGE = "too_large"
    UNAUTHORIZED = "unauthorized"
    QUEUE_FULL = "queue_full"
    UNAVAILABLE = "unavailable"  # neither ClickHouse nor the spool took it
    REFUSED = "refused"  # ClickHouse refuses the data itself


BATCH_ROW_BUCKETS = (1, 10, 100, 1000, 5000, 10000, 25000, 50000, 100000)
INSERT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

SPANS_RECEIVED = declare("infersight_pipeline_spans_received_total", Kind.COUNTER, "", ("protocol",),
                         "Spans received by the OTLP receivers (protocol grpc or http).", PRODUCER)
SPANS_ACCEPTED = declare("infersight_pipeline_spans_accepted_total", Kind.COUNTER, "", ("protocol",),
                         "Spans acknowledged (in ClickHouse or in the spool).", PRODUCER)
SPANS_REJECTED = declare("infersight_pipeline_spans_rejected_total", Kind.COUNTER, "", ("protocol", "reason"),
                         "Spans refused, by reason (invalid_id, queue_full, unavailable, refused). A request refused "
                         "whole before decoding (malformed, too_large, unauthorized, unsupported, and queue_full "
                         "while the queue takes not one more span) has no span count: see "
                         "infersight_pipeline_requests_total.",
                         PRODUCER)
ATTRIBUTES_TRUNCATED = declare("infersight_pipeline_attributes_truncated_total", Kind.COUNTER, "", (),
                               "Attribute values cut to the configured maximum length.", PRODUCER)
QUEUE_DEPTH = declare("infersight_pipeline_queue_spans", Kind.GAUGE, "", (),
                      "Spans waiting in memory for the writer.", PRODUCER)
QUEUE_LIMIT = declare("infersight_pipeline_queue_limit_spans", Kind.GAUGE, "", (),
                      "Spans the queue admits now: the lesser of pipeline.queue_max_spans and what the writer "
                      "drains in pipeline.queue_max_seconds at its measured rate.", PRODUCER)
BATCH_ROWS = declare("infersight_pipeline_batch_rows", Kind.HISTOGRAM, "", ("table",),
                     "Rows per insert batch.", PRODUCER, BATCH_ROW_BUCKETS)
INSERT_DURATION = declare("infersight_pipeline_insert_duration_seconds", Kind.HISTOGRAM, "seconds", ("table",),
                          "ClickHouse insert latency per batch.", PRODUCER, INSERT_BUCKETS)
INSERT_RETRIES = declare("infersight_pipeline_insert_retries_total", Kind.COUNTER, "", (),
                         "Insert attempts retried after a failure.", PRODUCER)
REENCODED_BATCHES = declare("infersight_pipeline_reencoded_batches_total", Kind.COUNTER, "", (),
                            "Batches ClickHouse refused once and took re-encoded, their array and map values "
                            "rendered in Python (nested arrays or maps, fields upb tolerated).",
                            PRODUCER)
SPOOL_BYTES = declare("infersight_pipeline_spool_bytes", Kind.GAUGE, "bytes", (),
                      "Bytes in the on-disk spool awaiting replay.", PRODUCER)
SPOOL_BATCHES = declare("infersight_pipeline_spool_batches", Kind.GAUGE, "", (),
                        "Batches in the on-disk spool awaiting replay.", PRODUCER)
REPLAYED_BATCHES = declare("infersight_pipeline_replayed_batches_total", Kind.COUNTER, "", (),
                           "Spooled batches written to ClickHouse after it came back.", PRODUCER)
SPOOLED_BATCHES = declare("infersight_pipeline_spooled_batches_total", Kind.COUNTER, "", (),
                          "Batches written to the on-disk spool because ClickHouse could not take them.", PRODUCER)
SPOOL_DISCARDED = declare("infersight_pipeline_spool_discarded_batches_total", Kind.COUNTER, "", ("reason",),
                          "Spooled batches set aside instead of replayed (corrupt: failed checksum; "
                          "refused: ClickHouse rejects the data itself).", PRODUCER)
INSERT_ERRORS = declare("infersight_pipeline_insert_errors_total", Kind.COUNTER, "", ("kind",),
                        "Failed insert attempts (kind transient: worth retrying; permanent: the data is refused).",
                        PRODUCER)
REQUESTS = declare("infersight_pipeline_requests_total", Kind.COUNTER, "", ("protocol", "outcome"),
                   f"OTLP export requests answered, by outcome ({', '.join(ExportOutcome)}).", PRODUCER)
