"""OTLP receivers (HTTP and gRPC) into ClickHouse, with nothing acknowledged ever lost.

    http_server / grpc_server  transports: status codes, body limits, gzip, auth, TLS
    intake                     what both do with a body: check, queue, wait, answer
    otlp                       decode and check a request with upb (ids, truncation, OTLP/JSON)
    ingest_sql                 span-to-row conversion done by ClickHouse from the raw protobuf
    writer                     batching, retries with backoff and jitter, spool fallback and replay
    sink                       one insert through clickhouse-connect, errors sorted transient/permanent
    spool                      the fsync'd, checksummed, bounded on-disk spool
    metrics                    infersight_pipeline_* self-metrics
    service / cli              the assembled receiver; ``infersight receive`` and ``infersight up``
"""
