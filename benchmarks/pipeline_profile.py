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
``--against REF`` compares this checkout's insert SQL with the one at git REF (e.g. ``main``), side by
side in one server on the same batch, interleaved rounds: ClickHouse's CPU for an insert with an empty
body (query analysis: the fixed cost per insert) into the Null table and into the full schema, and per
span into both, with this/REF ratios (CPU rather than wall time: steadier on a shared machine). ``--nested-share``
puts a nested array attribute (depth 2) on that share of requests (this checkout's writer stores
such a batch in two inserts: the refused one, then the re-encoded one; both are counted here).
``--cpu-stages`` is the same ladder by ClickHouse's process CPU instead of wall time (steadier on a
shared machine), median of three interleaved rounds: an empty insert (the fixed cost), the Null
table, otel_traces alone, the full schema, and the full schema without each of its materialized
views in turn (what each view costs); the gate's share (the Python thread in the ClickHouse process
that checks credentials and streams each body through) is printed beside each.
``--merges`` measures what a row costs after its insert: ClickHouse merges each table's parts again and
again over their life (each pass reads, decompresses, merges and compresses them anew). Per round and
schema variant: ``--parts`` inserts with merges stopped (our insert SQL, the full schema; their CPU per
span), then one merge pass of those parts per table (``OPTIMIZE ... FINAL``; CPU per span of the run and
bytes on disk after it), interleaved rounds, medians. Variants (``MERGE_VARIANTS``): inserts written as
Wide parts (a file per column, ClickHouse's default above 10 MiB, before schema version 11), the schema
as it is (Compact at insert), and the same again as a control (this benchmark's spread).
``--merge-life`` measures the merges of a part's first life: ``--parts`` small inserts (a seventh of a
batch each, ~14,300 spans: what a writer inserts each second at fleet rates) into otel_traces with merges
on, until ClickHouse assigns none for 5 s; printed per variant: the merges' CPU per span (the
``MergeMutate`` threads), the rows-weighted part level (how many generations of merges a row went
through), and the active parts left (what a query then opens). Variants: ``LIFE_VARIANTS``, interleaved.
``--client`` measures the receiver's side of one insert (this process's CPU per span, the batch
already framed) for the same batch, interleaved rounds: the sink's own HTTP POST against
clickhouse-connect's ``command(sql, data=batch)``, which the sink used before (it decodes the whole
body as text to classify the SQL), with their ratio.
``--receiver`` measures the receiver's check of each request (upb parse, id checks, the screen for values
over ``max_attribute_length``; this process's CPU, no ClickHouse), interleaved rounds, median: the
spans' lengths read from the body by one shallow parse (this checkout) against ``ByteSize()`` per
span (before), with the bare upb parse as the floor.
Bounded: one batch per case, three repetitions (--against: seven, medians: CPU time comes in 10 ms ticks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_e2e import (  # noqa: E402
    build_requests,
    children_of,
    cpu_seconds,
    merge_cpu_seconds,
    settle_merges,
    stat_cpu_seconds,
)

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
        traces = ddl.DEFAULT_TABLES.traces
        client.command(f"CREATE TABLE nul.{traces} AS bare.{traces} ENGINE = Null")
        counter = iter(range(1_000_000))

        def insert(database: str, data: bytes):
            return lambda: client.command(ingest_sql.insert_query(database, table=_target(database)), data=data,
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
        tables = ddl.DEFAULT_TABLES
        # before: the per-token table and its view
        for name in (tables.token_events, tables.view(tables.token_timelines)):
            client.command(f"DROP TABLE before.{name}")
        for statement in ddl.per_token_events(SchemaOptions(database="before")):
            client.command(statement)
        for view in (tables.view(tables.token_timelines), tables.timelines_from_intake):
            client.command(f"DROP TABLE none.{view}")
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
                # before: straight into otel_traces, whose per-token view exploded every timeline
                table = tables.traces if db == "before" else tables.trace_intake
                client.command(ingest_sql.insert_query(db, table=table), data=batches[batch],
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


def _target(database: str) -> str:
    """The stage databases (nul, bare) hold only otel_traces; the others the whole schema, intake included."""
    from infersight.pipelines.schema import ddl

    return ddl.DEFAULT_TABLES.traces if database in ("nul", "bare") else ddl.DEFAULT_TABLES.trace_intake


def thread_cpu_seconds(pid: int, tid: int) -> float:
    try:
        return stat_cpu_seconds(Path(f"/proc/{pid}/task/{tid}/stat").read_text())
    except OSError:
        return 0.0


def cpu_stages(traces: int, shares: list[float], rounds: int = 3) -> None:
    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.receiver import ingest_sql
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    spans = traces * 7
    batches = {share: ingest_sql.frame(build_requests(traces, share)) for share in shares}
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        client = server.client(send_receive_timeout=600)
        migrations.migrate(client, SchemaOptions(database="full"))
        client.command("CREATE DATABASE bare")
        for statement in ddl.traces_table(SchemaOptions(database="bare")):
            client.command(statement)
        client.command("CREATE DATABASE nul")
        table = ddl.DEFAULT_TABLES.traces
        client.command(f"CREATE TABLE nul.{table} AS bare.{table} ENGINE = Null")
        views = [row[0] for row in client.query(
            "SELECT name FROM system.tables WHERE database = 'full' AND engine = 'MaterializedView' ORDER BY name"
        ).result_rows if row[0] != ddl.Tables.view(table)]  # without the intake's view to otel_traces nothing is stored
        for index, view in enumerate(views):
            migrations.migrate(client, SchemaOptions(database=f"minus{index}"))
            client.command(f"DROP TABLE minus{index}.{view}")
        pid = server.proc.pid
        pids = [pid, *children_of(pid)]
        cases = [("fixed cost: an empty insert", "nul", False), ("parse + flatten + render (Null table)", "nul", True),
                 ("+ write otel_traces (no views)", "bare", True), ("full schema", "full", True),
                 *((f"full schema without {view}", f"minus{index}", True) for index, view in enumerate(views))]
        counter = iter(range(1_000_000))
        cpu: dict[tuple[float, str], list[tuple[float, float]]] = {}
        for _ in range(rounds):  # interleaved: every case of a round back to back
            for share in shares:
                for label, database, with_body in cases:
                    before, gate = sum(cpu_seconds(p) for p in pids), thread_cpu_seconds(pid, pid)
                    client.command(ingest_sql.insert_query(database, table=_target(database)),
                                   data=batches[share] if with_body else b"",
                                   settings=ingest_sql.settings(f"stages-{next(counter)}"))
                    cpu.setdefault((share, label), []).append(
                        (sum(cpu_seconds(p) for p in pids) - before, thread_cpu_seconds(pid, pid) - gate))
        client.close()
    print(f"\nClickHouse process CPU per span, {spans:,} spans per insert, median of {rounds} rounds "
          f"(CPU comes in 10 ms ticks); load average {os.getloadavg()[0]:.1f}:")
    for share in shares:
        full = statistics.median(c for c, _ in cpu[(share, "full schema")])
        print(f"  timelines on {share:.0%} of request spans{'':<32}"
              f"{'CPU-us/span':>12}{'x full':>8}{'gate us/span':>14}")
        for label, _, _ in cases:
            values = cpu[(share, label)]
            total, gate = statistics.median(c for c, _ in values), statistics.median(g for _, g in values)
            print(f"    {label:<66}{1e6 * total / spans:>12.2f}{total / full:>8.2f}{1e6 * gate / spans:>14.2f}")


def client_cost(traces: int, share: float, rounds: int = 5) -> None:
    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.receiver import ingest_sql
    from infersight.pipelines.receiver.sink import ClickHouseSink
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    spans = traces * 7
    framed = ingest_sql.frame(build_requests(traces, share))
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        migrations.migrate(server.client(), SchemaOptions(database="full"))
        sink = ClickHouseSink(server.dsn("full"))
        client = server.client(send_receive_timeout=600)
        counter = iter(range(1_000_000))

        def post() -> None:
            sink.insert(framed, f"client-{next(counter)}")

        def command() -> None:
            client.command(sink.query, data=framed, settings=ingest_sql.settings(f"client-{next(counter)}",
                                                                                  sink.insert_parallelism))

        cpu: dict[str, list[float]] = {"sink POST (this checkout)": [], "clickhouse-connect command(data=)": []}
        for _ in range(rounds):
            for label, fn in zip(cpu, (post, command), strict=True):
                started = time.process_time()  # this process only: the receiver's side of the insert
                fn()
                cpu[label].append(1e6 * (time.process_time() - started) / spans)
        client.close()
        sink.close()
    base = statistics.median(cpu["clickhouse-connect command(data=)"])
    print(f"\n{spans:,} spans in one batch ({len(framed) / spans:.0f} B/span), timelines on {share:.0%} of request "
          f"spans; receiver CPU per span for one insert, median of {rounds}; load average {os.getloadavg()[0]:.1f}:")
    for label, values in cpu.items():
        print(f"  {label:<40}{statistics.median(values):>8.2f} CPU-us/span   x{statistics.median(values) / base:5.2f}")


def receiver_check(traces: int, share: float, rounds: int = 9) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from infersight.config import Pipeline
    from infersight.pipelines.receiver import otlp

    limit = Pipeline().max_attribute_length
    bodies = build_requests(traces, share)
    spans = traces * 7
    screen = otlp._long_spans

    def check(with_screen: bool) -> None:
        otlp._long_spans = screen if with_screen else (lambda body, max_length: None)  # None: ByteSize per span
        try:
            for body in bodies:
                otlp.decode_protobuf(body, limit)
        finally:
            otlp._long_spans = screen

    cases = {"upb parse alone (floor)": lambda: [ExportTraceServiceRequest.FromString(b) for b in bodies],
             "check, span lengths from the body (this checkout)": lambda: check(True),
             "check, ByteSize() per span (before)": lambda: check(False)}
    cpu: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(rounds):  # interleaved
        for label, fn in cases.items():
            started = time.process_time()
            fn()
            cpu[label].append(1e6 * (time.process_time() - started) / spans)
    before = cpu["check, ByteSize() per span (before)"]
    now = cpu["check, span lengths from the body (this checkout)"]
    ratios = sorted(n / b for n, b in zip(now, before, strict=True))
    print(f"\n{spans:,} spans in {len(bodies)} requests, timelines on {share:.0%} of request spans; receiver check, "
          f"CPU-us per span, median of {rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}:")
    for label, values in cpu.items():
        median = statistics.median(values)
        print(f"  {label:<52}{median:>8.2f}   x{median / statistics.median(before):5.2f}")
    print(f"  this/before per round: min {ratios[0]:.2f}, median {statistics.median(ratios):.2f}, max {ratios[-1]:.2f}")


# Variants for --merges: (name, {table's field in ddl.Tables: ALTER TABLE clauses applied before the inserts}).
# The last is this checkout's schema again, a control: how far two runs of the same schema differ here.
WIDE_AT_INSERT = "MODIFY SETTING min_bytes_for_wide_part = 10485760"  # ClickHouse's default, before version 11
MERGE_VARIANTS = (("Wide parts at insert (before)", {"traces": [WIDE_AT_INSERT], "token_timelines": [WIDE_AT_INSERT]}),
                  ("this checkout's schema (Compact at insert)", {}),
                  ("the same again (control)", {}))


def merges(traces: int, shares: list[float], parts: int, rounds: int = 3) -> None:
    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.receiver import ingest_sql
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    spans = traces * 7
    tables = ddl.DEFAULT_TABLES.deduplicated  # every table an OTLP batch writes
    batches = {share: ingest_sql.frame(build_requests(traces, share)) for share in shares}
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        client = server.client(send_receive_timeout=600)
        pids = [server.proc.pid, *children_of(server.proc.pid)]
        for index, (_, alters) in enumerate(MERGE_VARIANTS):
            migrations.migrate(client, SchemaOptions(database=f"v{index}"))
            for field, clauses in alters.items():
                for clause in clauses:
                    client.command(f"ALTER TABLE v{index}.{getattr(ddl.DEFAULT_TABLES, field)} {clause}")
        counter = iter(range(1_000_000))
        results: dict[tuple[float, str, str], list[float]] = {}
        for _ in range(rounds):  # interleaved: every variant of a round back to back
            for share in shares:
                for index, (variant, _) in enumerate(MERGE_VARIANTS):
                    db = f"v{index}"
                    client.command("SYSTEM STOP MERGES")
                    for table in tables:
                        client.command(f"TRUNCATE TABLE {db}.{table}")
                    before = sum(cpu_seconds(p) for p in pids)
                    for _ in range(parts):
                        client.command(ingest_sql.insert_query(db), data=batches[share],
                                       settings=ingest_sql.settings(f"merges-{next(counter)}", threads=2))
                    inserted = sum(cpu_seconds(p) for p in pids)
                    insert_us = 1e6 * (inserted - before) / (parts * spans)
                    results.setdefault((share, variant, "insert"), []).append(insert_us)
                    for table in tables:
                        before = sum(cpu_seconds(p) for p in pids)
                        client.command(f"SYSTEM START MERGES {db}.{table}")
                        client.command(f"OPTIMIZE TABLE {db}.{table} FINAL")
                        merged = sum(cpu_seconds(p) for p in pids) - before
                        results.setdefault((share, variant, table), []).append(1e6 * merged / (parts * spans))
                        size = client.query("SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND "
                                            "database = {db:String} AND table = {t:String}",
                                            parameters={"db": db, "t": table}).result_rows[0][0]
                        results.setdefault((share, variant, f"{table} bytes"), []).append(size / (parts * spans))
        client.command("SYSTEM START MERGES")
        client.close()
    print(f"\nClickHouse CPU per span: {parts} inserts of {spans:,} spans (merges stopped), then one merge pass of "
          f"their parts per table; median of {rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}")
    for share in shares:
        print(f"  timelines on {share:.0%} of request spans")
        print(f"    {'variant':<40}{'insert':>9}" + "".join(f"{t:>26}" for t in tables) + f"{'merge pass':>12}")
        base = None
        for variant, _ in MERGE_VARIANTS:
            insert = statistics.median(results[(share, variant, "insert")])
            cells, merge = [], 0.0
            for table in tables:
                cpu = statistics.median(results[(share, variant, table)])
                size = statistics.median(results[(share, variant, f"{table} bytes")])
                merge += cpu
                cells.append(f"{cpu:>8.2f} us {size:>7.1f} B/span")
            base = base or (insert, merge)
            print(f"    {variant:<40}{insert:>9.2f}" + "".join(f"{c:>26}" for c in cells)
                  + f"{merge:>12.2f}   x{insert / base[0]:.2f} insert, x{merge / base[1]:.2f} merge")


# Variants for --merge-life: (name, ALTER TABLE otel_traces clauses applied before the inserts).
LIFE_VARIANTS = (
    ("Wide parts at insert (before)", [WIDE_AT_INSERT]),
    ("this checkout's schema (Compact at insert)", []),
)


def merge_life(traces: int, parts: int, rounds: int = 2) -> None:
    import datetime as dt

    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.queries import library
    from infersight.pipelines.receiver import ingest_sql
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    table, slices = ddl.DEFAULT_TABLES.traces, 7
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        client = server.client(send_receive_timeout=600)
        migrations.migrate(client, SchemaOptions(database="source"))
        client.command(ingest_sql.insert_query("source"), data=ingest_sql.frame(build_requests(traces, 0.0)),
                       settings=ingest_sql.settings("merge-life-source"))
        columns = ", ".join(f"`{name}`" for name in ddl.EXPORTER_INSERT_COLUMNS)
        pids = [server.proc.pid, *children_of(server.proc.pid)]
        results: dict[str, list[tuple[float, float, int]]] = {}
        latency: dict[tuple[str, str], list[float]] = {}
        trace_id, at = client.query(f"SELECT TraceId, Timestamp FROM source.{table} WHERE IsRequest LIMIT 1"
                                    ).result_rows[0]
        window = (at - dt.timedelta(minutes=5), at + dt.timedelta(minutes=5))
        reads = {"one trace's spans (ms)": lambda db: library.trace_spans(client, db, trace_id),
                 "slowest 20 in 10 minutes (ms)": lambda db: library.slowest(client, db, *window)}
        for number in range(rounds):
            for index, (variant, clauses) in enumerate(LIFE_VARIANTS):
                db = f"life{number}_{index}"
                migrations.migrate(client, SchemaOptions(database=db))
                for clause in clauses:
                    client.command(f"ALTER TABLE {db}.{table} {clause}")
                before = merge_cpu_seconds(pids)
                for part in range(parts):  # each insert one part (the views' tables get theirs too)
                    client.command(f"INSERT INTO {db}.{table} ({columns}) SELECT {columns} FROM source.{table} "
                                   f"WHERE cityHash64(SpanId) % {slices} = {part % slices}")
                settle_merges(client, timeout=600, quiet=5.0, database=db)
                cpu = merge_cpu_seconds(pids) - before
                rows, level, active = client.query(
                    "SELECT sum(rows), sum(rows * level) / sum(rows), count() FROM system.parts WHERE active AND "
                    "database = {db:String} AND table = {t:String}", parameters={"db": db, "t": table}).result_rows[0]
                results.setdefault(variant, []).append((1e6 * cpu / rows, level, active))
                for name, read in reads.items():  # what the parts left cost a reader: medians of 15
                    times = []
                    for _ in range(15):
                        started = time.perf_counter()
                        read(db)
                        times.append(1000 * (time.perf_counter() - started))
                    latency.setdefault((variant, name), []).append(statistics.median(times))
                client.command(f"DROP DATABASE {db} SYNC")
        client.close()
    print(f"\nMerges of {parts} inserts of ~{traces * 7 // slices:,} spans into otel_traces (merges on, until none was "
          f"assigned for 5 s; its views' tables merge too and are counted); {rounds} interleaved rounds, "
          f"min..max; load average {os.getloadavg()[0]:.1f}:")
    print(f"  {'variant':<48}{'merge CPU-us/span':>20}{'x before':>14}{'part level':>14}{'active parts':>14}"
          + "".join(f"{name:>32}" for name in reads))
    base = [cpu for cpu, _, _ in results[LIFE_VARIANTS[0][0]]]
    for variant, values in results.items():
        cpu, level, active = zip(*values, strict=True)
        ratios = [c / b for c, b in zip(cpu, base, strict=True)]
        print(f"  {variant:<48}{min(cpu):>10.2f}..{max(cpu):<8.2f}{min(ratios):>7.2f}..{max(ratios):<5.2f}"
              f"{min(level):>7.2f}..{max(level):<5.2f}{min(active):>7}..{max(active):<5}"
              + "".join(f"{min(ms):>9.1f}..{max(ms):<6.1f}" for (v, _), ms in latency.items() if v == variant))


def load_ingest_sql(ref: str):
    """ingest_sql.py as it is at git ``ref``, as a module of its own."""
    import subprocess
    import types

    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "show", f"{ref}:pipelines/receiver/ingest_sql.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"ingest_sql_at_{ref}")
    exec(compile(source, f"{ref}:pipelines/receiver/ingest_sql.py", "exec"), module.__dict__)  # noqa: S102
    return module


def against(traces: int, share: float, ref: str, nested_share: float, rounds: int = 7) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.receiver import ingest_sql, otlp
    from infersight.pipelines.receiver.sink import InsertFailed
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    bodies = build_requests(traces, share)
    if nested_share:
        step = max(1, round(1 / nested_share))
        for index in range(0, len(bodies), step):
            req = ExportTraceServiceRequest.FromString(bodies[index])
            value = req.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="llm.deep").value
            value.array_value.values.add().array_value.values.add().int_value = 1
            bodies[index] = req.SerializeToString()
    spans = traces * 7
    framed = ingest_sql.frame(bodies)
    modules = {"this checkout": ingest_sql, ref: load_ingest_sql(ref)}
    with tempfile.TemporaryDirectory(prefix="infersight-profile-") as tmp, ClickHouseServer(tmp) as server:
        client = server.client(send_receive_timeout=600)
        migrations.migrate(client, SchemaOptions(database="full"))
        client.command("CREATE DATABASE bare")
        for statement in ddl.traces_table(SchemaOptions(database="bare")):
            client.command(statement)
        client.command("CREATE DATABASE nul")
        traces = ddl.DEFAULT_TABLES.traces
        client.command(f"CREATE TABLE nul.{traces} AS bare.{traces} ENGINE = Null")
        pids = [server.proc.pid, *children_of(server.proc.pid)]
        counter = iter(range(1_000_000))

        def run(module, database: str, data: bytes) -> tuple[float, float]:
            """Wall seconds and ClickHouse CPU seconds of one insert (two when the first is refused)."""
            cpu, started = sum(cpu_seconds(p) for p in pids), time.perf_counter()
            # The Null table stands in for the trace table itself; the full schema takes the intake, as the writer does.
            query = module.insert_query(database, table=traces) if database == "nul" else module.insert_query(database)
            try:
                client.command(query, data=data, settings=module.settings(f"against-{next(counter)}"))
            except Exception as exc:  # noqa: BLE001 - this checkout's SQL refuses nested values on purpose
                if module is not ingest_sql or "UNKNOWN_ELEMENT_OF_ENUM" not in str(exc):
                    raise InsertFailed(str(exc), True) from None
                again = ingest_sql.frame([otlp.canonical(b) for b in ingest_sql.unframe(data)])
                client.command(query, data=again,
                               settings=module.settings(f"against-{next(counter)}"))
            return time.perf_counter() - started, sum(cpu_seconds(p) for p in pids) - cpu

        cases = [("fixed cost per insert (empty body), CPU ms", "nul", b""),
                 ("fixed cost, full schema (empty body), CPU ms", "full", b""),
                 ("parse + flatten + render (Null table), CPU us/span", "nul", framed),
                 ("+ write + views (full schema), CPU us/span", "full", framed)]
        results: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):  # interleaved: both SQLs run back to back in every round
            for label, database, data in cases:
                for name, module in modules.items():
                    _, cpu = run(module, database, data)
                    value = cpu * 1000 if not data else 1e6 * cpu / spans  # CPU: steadier than wall time
                    results.setdefault((label, name), []).append(value)
        client.close()
    print(f"\n{spans:,} spans in one batch, timelines on {share:.0%} of request spans, nested values on "
          f"{nested_share:.0%} of requests; median of {rounds} rounds, this checkout against {ref}:")
    print(f"  {'case':<56}{'this':>10}{ref:>10}{'this/' + ref:>12}")
    for label, _, _ in cases:
        this, base = statistics.median(results[(label, 'this checkout')]), statistics.median(results[(label, ref)])
        print(f"  {label:<56}{this:>10.2f}{base:>10.2f}{this / base:>12.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=14_300, help="traces in the batch (7 spans each)")
    parser.add_argument("--timeline-share", type=float, nargs="+", default=[0.0, 0.1, 1.0])
    parser.add_argument("--token-shapes", action="store_true",
                        help="instead: compare the token table shapes (before and now) by ClickHouse CPU per span")
    parser.add_argument("--against", metavar="REF", help="instead: compare the insert SQL with the one at git REF")
    parser.add_argument("--nested-share", type=float, default=0.0,
                        help="with --against: share of requests carrying a nested array attribute (default 0)")
    parser.add_argument("--client", action="store_true",
                        help="instead: receiver CPU per span of one insert: its POST vs clickhouse-connect")
    parser.add_argument("--receiver", action="store_true",
                        help="instead: the receiver's check per span: span lengths from the body vs ByteSize()")
    parser.add_argument("--merges", action="store_true",
                        help="instead: ClickHouse's CPU per span for inserts and one merge pass of their parts, "
                             "per table and schema variant")
    parser.add_argument("--rounds", type=int, help="with --merges (default 3) or --merge-life (default 2): "
                                                   "interleaved rounds")
    parser.add_argument("--merge-life", action="store_true",
                        help="instead: merge CPU per span, part levels and active parts after many small inserts, "
                             "against Wide parts at insert (before schema version 11)")
    parser.add_argument("--parts", type=int, help="with --merges: inserts (parts) per round (default 5); with "
                                                  "--merge-life: inserts per variant (default 140)")
    parser.add_argument("--cpu-stages", action="store_true",
                        help="instead: ClickHouse's CPU per span by stage and per materialized view")
    args = parser.parse_args()
    if args.receiver:
        for share in args.timeline_share:
            receiver_check(args.traces, share)
        return 0
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.parts is not None and args.parts < 2:
        parser.error("--parts must be >= 2: a merge needs two parts")
    if args.merges:
        merges(args.traces, args.timeline_share, args.parts or 5, args.rounds or 3)
        return 0
    if args.merge_life:
        merge_life(args.traces, args.parts or 140, args.rounds or 2)
        return 0
    if args.cpu_stages:
        cpu_stages(args.traces, args.timeline_share)
        return 0
    if args.client:
        for share in args.timeline_share:
            client_cost(args.traces, share)
        return 0
    if args.against:
        for share in args.timeline_share:
            against(args.traces, share, args.against, args.nested_share)
        return 0
    if args.token_shapes:
        token_shapes(args.traces)
        return 0
    print(f"baseline: spans to Python rows attribute by attribute ~{BASELINE_PY_ROWS_US:.0f} us/span (40k/s/core)")
    for share in args.timeline_share:
        profile(args.traces, share)
    return 0


if __name__ == "__main__":
    sys.exit(main())
