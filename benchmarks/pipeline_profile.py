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

``--token-shapes`` compares, side by side in one server, ClickHouse's CPU per span (its own
process CPU, steadier than wall time on a shared machine) for the same batch with every request
span carrying a 256-token timeline, into: the schema before issue 18 (one stored row per token,
exploded at insert), today's schema (the timeline's text stored once per request span, expanded by
the llm_token_events view when read), and no token table at all; each with the timeline sent as
JSON text (our tracer) and as an int array (other SDKs, the Collector).
Bounded: one batch per case, three repetitions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_e2e import build_requests, children_of, cpu_seconds  # noqa: E402

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
        client.command(f"CREATE TABLE nul.{ddl.TRACES} AS bare.{ddl.TRACES} ENGINE = Null")
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


def token_shapes(traces: int, rounds: int = 3) -> None:
    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.receiver import ingest_sql
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    spans = traces * 7
    batches = {encoding: ingest_sql.frame(build_requests(traces, 1.0, encoding=encoding))
               for encoding in ("text", "array")}
    batches["none"] = ingest_sql.frame(build_requests(traces, 0.0))
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        client = server.client(send_receive_timeout=600)
        for db in ("now", "before", "none"):
            migrations.migrate(client, SchemaOptions(database=db))
        for name in (ddl.TOKENS, ddl.TOKEN_TIMELINES + "_mv"):  # before: the per-token table and its view
            client.command(f"DROP TABLE before.{name}")
        for statement in ddl.per_token_events(SchemaOptions(database="before")):
            client.command(statement)
        client.command(f"DROP TABLE none.{ddl.TOKEN_TIMELINES}_mv")
        pids = [server.proc.pid, *children_of(server.proc.pid)]
        cases = [("no timelines (same schema)", "now", "none"),
                 ("before: per-token rows, JSON text", "before", "text"),
                 ("before: per-token rows, int array", "before", "array"),
                 ("now: text once per request, JSON text", "now", "text"),
                 ("now: text once per request, int array", "now", "array"),
                 ("no token table, JSON text", "none", "text")]
        counter = iter(range(1_000_000))
        cpu: dict[str, list[float]] = {label: [] for label, _, _ in cases}
        for _ in range(rounds):  # interleaved: the cases of a round run back to back
            for label, db, batch in cases:
                before = sum(cpu_seconds(p) for p in pids)
                client.command(ingest_sql.insert_query(db), data=batches[batch],
                               settings=ingest_sql.settings(f"shape-{next(counter)}"))
                cpu[label].append(1e6 * (sum(cpu_seconds(p) for p in pids) - before) / spans)
        client.close()
    base = min(cpu["no timelines (same schema)"])
    before = min(cpu["before: per-token rows, int array"])
    print(f"\nClickHouse CPU per span, {spans:,} spans per insert, every request span with 256 tokens "
          f"(best of {rounds}; ratios of the best):")
    print(f"  {'case':<42}{'CPU-us/span':>12}{'x no timelines':>16}{'before/this':>13}")
    for label, values in cpu.items():
        print(f"  {label:<42}{min(values):>12.2f}{min(values) / base:>16.2f}{before / min(values):>13.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=14_300, help="traces in the batch (7 spans each)")
    parser.add_argument("--timeline-share", type=float, nargs="+", default=[0.0, 0.1, 1.0])
    parser.add_argument("--token-shapes", action="store_true",
                        help="instead: compare the token table shapes (before and now) by ClickHouse CPU per span")
    args = parser.parse_args()
    if args.token_shapes:
        token_shapes(args.traces)
        return 0
    print(f"baseline: spans to Python rows attribute by attribute ~{BASELINE_PY_ROWS_US:.0f} us/span (40k/s/core)")
    for share in args.timeline_share:
        profile(args.traces, share)
    return 0


if __name__ == "__main__":
    sys.exit(main())
