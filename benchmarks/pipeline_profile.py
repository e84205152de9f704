"""Where the pipeline's time goes, per span: receiver checks, and each stage inside ClickHouse.

    .venv/bin/python benchmarks/pipeline_profile.py [--traces 14300] [--timeline-share 0 0.1 1]

Same workload as pipeline_e2e.py (one 100k-span batch by default). Each stage is timed on its own,
best of 3, and printed in microseconds per span, side by side with the baseline of issue 5
(turning spans into Python rows attribute by attribute: ~25 us/span, i.e. ~40k spans/s per core):

- receiver: upb parse alone, then the full check (ids, size test, truncation) that runs per request;
- ClickHouse: a fixed cost per insert (query analysis, with an empty body), then the same batch into
  a Null table (parse + flatten + render), into otel_traces without its views, and into the full
  schema (otel_traces + trace lookup + token events + rollup views). Each of these three lines is a
  whole insert, so it includes the fixed cost and the stages above it.
Bounded: one batch per case, three repetitions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_e2e import build_requests  # noqa: E402

BASELINE_PY_ROWS_US = 1e6 / 40_000


def best_of(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def profile(traces: int, share: float) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.receiver import ingest_sql, otlp
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    bodies = build_requests(traces, share)
    spans = traces * 7
    framed = ingest_sql.frame(bodies)
    per_span = lambda seconds: 1e6 * seconds / spans  # noqa: E731
    rows = [("receiver: upb parse", per_span(best_of(lambda: [ExportTraceServiceRequest.FromString(b)
                                                               for b in bodies]))),
            ("receiver: full check per request", per_span(best_of(lambda: [otlp.decode_protobuf(b, 8192)
                                                                           for b in bodies])))]
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        client = server.client()
        migrations.migrate(client, SchemaOptions(database="full"))
        client.command("CREATE DATABASE bare")
        for statement in ddl.traces_table(SchemaOptions(database="bare")):
            client.command(statement)
        client.command("CREATE DATABASE nul")
        client.command("CREATE TABLE nul.otel_traces AS bare.otel_traces ENGINE = Null")
        counter = iter(range(1_000_000))

        def insert(database: str, data: bytes):
            return lambda: client.command(ingest_sql.insert_query(database), data=data,
                                          settings=ingest_sql.settings(f"profile-{next(counter)}"))

        fixed = best_of(insert("nul", b""))
        rows.append((f"ClickHouse: fixed cost per insert ({fixed * 1000:.0f} ms, spread over the batch)",
                     per_span(fixed)))
        for label, database in (("ClickHouse: parse + flatten + render (Null table)", "nul"),
                                ("ClickHouse: + write otel_traces (no views)", "bare"),
                                ("ClickHouse: + views (full schema)", "full")):
            rows.append((label, per_span(best_of(insert(database, framed)))))
        client.close()
    print(f"\n{spans:,} spans in one batch, timelines on {share:.0%} of request spans "
          f"({len(framed) / spans:.0f} B/span):")
    for label, micros in rows:
        print(f"  {label:<72} {micros:6.2f} us/span   x{BASELINE_PY_ROWS_US / micros:5.1f} vs Python rows")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=14_300, help="traces in the batch (7 spans each)")
    parser.add_argument("--timeline-share", type=float, nargs="+", default=[0.0, 0.1, 1.0])
    args = parser.parse_args()
    print(f"baseline: spans to Python rows attribute by attribute ~{BASELINE_PY_ROWS_US:.0f} us/span (40k/s/core)")
    for share in args.timeline_share:
        profile(args.traces, share)
    return 0


if __name__ == "__main__":
    sys.exit(main())
