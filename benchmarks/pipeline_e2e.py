"""End-to-end pipeline benchmark: OTLP/HTTP requests in, rows in ClickHouse's otel_traces out.

    .venv/bin/python benchmarks/pipeline_e2e.py [--traces 100000] [--timeline-share 0 0.1 1] [--concurrency 600]
                                                [--protocol http|grpc]

Everything runs on this machine: the embedded ClickHouse (chdb-core HTTP server) in one process, the
receiver (`infersight receive`) in another, and this script as the load generator, sending
pre-serialized requests (512 spans each, like the OTel SDK's batch processor) from many concurrent
connections, as a fleet of gateways and engines would. The clock runs from the first request
until every span is counted in otel_traces; the token view (llm_token_events) is filled on the way.

The workload is our own trace shape: per request, one request span with the GenAI/llm attributes
(~16) and six child spans (gateway.queue, gateway.route, upstream, engine.queue, engine.prefill,
engine.decode) with 2-4 attributes; a share of request spans carries a 256-token timeline.

Printed: spans/s end to end and as ratios against the goal (100k spans/s) and the baselines measured
here (issue 5): spans turned into Python rows attribute by attribute, ~40k spans/s per core; Arrow
inserts of otel_traces-shaped rows into chdb, ~140k rows/s; the OTel Collector's published ~40k
records/s per core. Also CPU seconds per process (where the time goes) and each process's peak RSS,
and ClickHouse's merges: their CPU during the run, then the CPU until no merge has been assigned for
3 s ("settled"), since a part's merges go on after its spans are counted.
Bounded: a fixed number of spans and a --timeout on the whole run (the settle at most 120 s more).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

GOAL = 100_000
BASELINE_PY_ROWS = 40_000  # per core, attribute-by-attribute Python rows (issue 5)
BASELINE_ARROW_INSERT = 140_000  # otel_traces-shaped Arrow inserts into chdb (issue 5: 120-160k)
BASELINE_COLLECTOR = 40_000  # OTel Collector, records/s per core (published)
SPANS_PER_REQUEST = 511  # 73 traces x 7 spans: close to the SDK's 512 per export
DB = "bench"


def build_requests(traces: int, timeline_share: float, seed: int = 7, encoding: str = "text") -> list[bytes]:
    """Pre-serialized export requests. ``encoding`` is how a kept timeline travels: ``text``, its JSON
    text as our tracer sends it (DESIGN 5), or ``array``, an int array as other SDKs send it."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rng = random.Random(seed)
    models, instances = ["llama-70b", "qwen-32b", "gemma-27b"], [f"i-{n}" for n in range(16)]
    children = ("gateway.queue", "gateway.route", "upstream", "engine.queue", "engine.prefill", "engine.decode")
    requests, req, scope = [], None, None
    now = time.time_ns()
    for t in range(traces):
        if t % (SPANS_PER_REQUEST // 7) == 0:
            if req is not None:
                requests.append(req.SerializeToString())
            req = ExportTraceServiceRequest()
            rs = req.resource_spans.add()
            for key, value in (("service.name", "gateway"), ("host.name", f"node-{t % 8}"),
                               ("service.version", "1.4.2"), ("deployment.environment", "prod")):
                rs.resource.attributes.add(key=key).value.string_value = value
            scope = rs.scope_spans.add()
            scope.scope.name, scope.scope.version = "infersight", "0.1.0"
        trace_id, start = rng.randbytes(16), now + t * 1000
        root = scope.spans.add(trace_id=trace_id, span_id=rng.randbytes(8), name=f"chat {models[t % 3]}", kind=2,
                               start_time_unix_nano=start, end_time_unix_nano=start + 2_400_000_000)
        outputs = rng.randrange(16, 512)
        attributes = (
            ("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "vllm"),
            ("gen_ai.request.model", models[t % 3]), ("gen_ai.response.model", models[t % 3]),
            ("gen_ai.usage.input_tokens", rng.randrange(64, 4096)), ("gen_ai.usage.output_tokens", outputs),
            ("llm.request.outcome", "success"), ("llm.request.id", f"req-{t}"),
            ("llm.ttft_ms", rng.uniform(50, 900)), ("llm.tpot_ms", rng.uniform(8, 40)),
            ("llm.queue_ms", rng.uniform(0, 50)), ("llm.instance", instances[t % 16]),
            ("llm.pool", "stable"), ("llm.routing.strategy", "cache_aware"),
            ("llm.usage.cached_input_tokens", rng.randrange(0, 64)), ("llm.sampling.reason", "not_kept"))
        for key, value in attributes:
            value_field = root.attributes.add(key=key).value
            if isinstance(value, str):
                value_field.string_value = value
            elif isinstance(value, int):
                value_field.int_value = value
            else:
                value_field.double_value = value
        # The timeline summary our tracer puts on every request span (kept timeline or not).
        gaps = [rng.randrange(8_000, 40_000) for _ in range(255)]
        at = rng.randrange(50_000, 900_000)
        stall = max(range(255), key=gaps.__getitem__)
        for key, value in (("llm.token.count", 256), ("llm.token.gap_mean_ms", sum(gaps) / 255 / 1000),
                           ("llm.token.gap_max_ms", gaps[stall] / 1000), ("llm.token.stall_index", stall + 1),
                           ("llm.token.stall_offset_ms", (at + sum(gaps[:stall])) / 1000)):
            value_field = root.attributes.add(key=key).value
            if isinstance(value, int):
                value_field.int_value = value
            else:
                value_field.double_value = value
        if rng.random() < timeline_share:
            offsets = [at]
            for gap in gaps:
                offsets.append(offsets[-1] + gap)
            value_field = root.attributes.add(key="llm.token.offsets_us").value
            if encoding == "text":
                value_field.string_value = json.dumps(offsets, separators=(",", ":"))
            else:
                for offset in offsets:
                    value_field.array_value.values.add().int_value = offset
        for i, name in enumerate(children):
            child = scope.spans.add(trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root.span_id,
                                    name=name, kind=3 if name == "upstream" else 1,
                                    start_time_unix_nano=start + i * 1_000_000,
                                    end_time_unix_nano=start + (i + 1) * 300_000_000)
            child.attributes.add(key="llm.instance").value.string_value = instances[t % 16]
            child.attributes.add(key="llm.retry.attempt").value.int_value = 0
            if name == "engine.prefill":
                child.attributes.add(key="llm.usage.cached_input_tokens").value.int_value = 32
    requests.append(req.SerializeToString())
    return requests


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def stat_cpu_seconds(stat: str) -> float:
    """User + system CPU from the text of a ``/proc/.../stat`` file (the fields after the command's ``)``)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return float("nan")


def gate_cpu_seconds(pid: int) -> float:
    """CPU of the embedded server's main thread: the Python gate in front of clickhouse-local (its asyncio
    loop; ClickHouse's own threads are others)."""
    try:
        return stat_cpu_seconds(Path(f"/proc/{pid}/task/{pid}/stat").read_text())
    except OSError:
        return 0.0


def merge_cpu_seconds(pids: list[int]) -> float:
    """CPU of ClickHouse's background merge threads (named ``MergeMutate``) in these processes."""
    total = 0.0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            if stat[stat.index("(") + 1:stat.rindex(")")].startswith("MergeMutate"):
                total += stat_cpu_seconds(stat)
    return total


def settle_merges(client, timeout: float, quiet: float = 3.0, database: str = DB) -> tuple[float, int]:
    """Wait until ClickHouse has assigned no merge in ``database`` for ``quiet`` seconds (or ``timeout``):
    what the parts written still cost after the last span was counted. Returns (seconds, active parts)."""
    started = time.monotonic()
    calm_since = started
    while time.monotonic() - started < timeout:
        if client.query("SELECT count() FROM system.merges WHERE database = {db:String}",
                        parameters={"db": database}).result_rows[0][0]:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= quiet:
            break
        time.sleep(0.2)
    parts = client.query("SELECT count() FROM system.parts WHERE database = {db:String} AND active",
                         parameters={"db": database}).result_rows[0][0]
    return time.monotonic() - started, parts


def children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def send_all(url: str, bodies: list[bytes], concurrency: int) -> dict:
    import aiohttp

    queue = list(reversed(bodies))
    stats = {"retries_429": 0, "errors": 0, "ack_seconds": []}

    async def worker(session):
        while queue:
            body = queue.pop()
            while True:
                sent = time.perf_counter()
                async with session.post(url, data=body, headers={"Content-Type": "application/x-protobuf"}) as resp:
                    await resp.read()
                    if resp.status == 200:
                        stats["ack_seconds"].append(time.perf_counter() - sent)
                        break
                    if resp.status in (429, 503):
                        stats["retries_429"] += 1
                        await asyncio.sleep(float(resp.headers.get("Retry-After", "1")) * random.uniform(0.5, 1))
                        continue
                    stats["errors"] += 1
                    break

    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return stats


async def send_all_grpc(target: str, bodies: list[bytes], concurrency: int) -> dict:
    """The same over OTLP/gRPC (raw request bytes, as an SDK exporter sends them)."""
    import grpc

    queue = list(reversed(bodies))
    stats = {"retries_429": 0, "errors": 0, "ack_seconds": []}
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")

        async def worker():
            while queue:
                body = queue.pop()
                while True:
                    try:
                        sent = time.perf_counter()
                        await export(body, timeout=120)
                        stats["ack_seconds"].append(time.perf_counter() - sent)
                        break
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                            stats["retries_429"] += 1
                            await asyncio.sleep(random.uniform(0.5, 1))
                            continue
                        stats["errors"] += 1
                        break

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return stats


def store_timelines_twice(client) -> None:
    """The baseline of schema version 7: every timeline kept in otel_traces' SpanAttributes as well as
    in llm_token_timelines, as before version 7 (and as the Collector's own inserts still do)."""
    from infersight.pipelines.schema import ddl

    t = ddl.DEFAULT_TABLES
    client.command(f"DROP VIEW {DB}.{t.timelines_from_intake}")
    client.command(f"DROP VIEW {DB}.{t.view(t.traces)}")
    client.command(f"CREATE MATERIALIZED VIEW {DB}.{t.view(t.traces)} TO {DB}.{t.traces} "
                   f"AS SELECT * FROM {DB}.{t.trace_intake}")


def run_case(traces: int, timeline_share: float, concurrency: int, timeout: float, workdir: Path,
             pipeline: dict, protocol: str = "http", encoding: str = "text", stored: str = "once",
             refusal: str = "unread") -> dict:
    from infersight.pipelines.clickhouse_server import ClickHouseServer
    from infersight.pipelines.schema import ddl, migrations
    from infersight.pipelines.schema.ddl import SchemaOptions

    bodies = build_requests(traces, timeline_share, encoding=encoding)
    spans = traces * 7
    server = ClickHouseServer(workdir / f"clickhouse-{timeline_share}").start()
    receiver = None
    try:
        client = server.client()
        migrations.migrate(client, SchemaOptions(database=DB))
        if stored == "twice":
            store_timelines_twice(client)
        config = workdir / "infersight.yaml"
        config.write_text(yaml.safe_dump({"pipeline": pipeline}))
        ports_file = workdir / "ports.json"
        ports_file.unlink(missing_ok=True)
        receiver = subprocess.Popen(
            [sys.executable, *(("-c", REFUSE_READ) if refusal == "read" else ("-m", "infersight")),
             "--config", str(config), "receive", "--dsn", server.dsn(DB),
             "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(workdir / "spool"),
             "--ports-file", str(ports_file)], stdout=subprocess.DEVNULL)
        while not ports_file.exists():
            time.sleep(0.05)
        ports = json.loads(ports_file.read_text())
        if protocol == "grpc":
            sender = send_all_grpc(f"127.0.0.1:{ports['grpc']}", bodies, concurrency)
        else:
            sender = send_all(f"http://127.0.0.1:{ports['http']}/v1/traces", bodies, concurrency)
        ch_pids = [server.proc.pid, *children_of(server.proc.pid)]
        ch_cpu0 = sum(cpu_seconds(p) for p in ch_pids)
        merge_cpu0 = merge_cpu_seconds(ch_pids)
        gate_cpu0 = gate_cpu_seconds(server.proc.pid)
        rx_cpu0 = cpu_seconds(receiver.pid)
        me_cpu0 = time.process_time()
        started = time.perf_counter()
        stats = asyncio.run(asyncio.wait_for(sender, timeout))
        acked = time.perf_counter() - started
        waits = sorted(stats.pop("ack_seconds"))
        stats.update(ack_p50_s=waits[len(waits) // 2], ack_p99_s=waits[int(len(waits) * 0.99)], ack_max_s=waits[-1])
        if stats["errors"]:
            raise RuntimeError(f"{stats['errors']} requests were refused; the figures would be meaningless")
        deadline = time.monotonic() + timeout
        traces = ddl.DEFAULT_TABLES.traces
        while (stored := client.query(f"SELECT count() FROM {DB}.{traces}").result_rows[0][0]) < spans:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {stored:,} of {spans:,} spans reached ClickHouse in {timeout} s")
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        ch_cpu, merge_cpu = sum(cpu_seconds(p) for p in ch_pids) - ch_cpu0, merge_cpu_seconds(ch_pids) - merge_cpu0
        rx_cpu = cpu_seconds(receiver.pid) - rx_cpu0
        gate_cpu = gate_cpu_seconds(server.proc.pid) - gate_cpu0
        # The merges of this run's parts go on after it: a row is merged again and again over its life, so
        # CPU per span with the merges settled is the figure a fleet pays (counted only up to the settle).
        settle_s, parts = settle_merges(client, min(timeout, 120))
        tail_cpu = sum(cpu_seconds(p) for p in ch_pids) - ch_cpu0 - ch_cpu
        tokens = client.query(f"SELECT count() FROM {DB}.{ddl.DEFAULT_TABLES.token_events}").result_rows[0][0]
        result = {
            "timeline_share": timeline_share, "spans": spans, "seconds": elapsed, "acked_seconds": acked,
            "spans_per_s": spans / elapsed, "token_rows": tokens, "tokens_per_s": tokens / elapsed,
            "cpu_clickhouse_s": ch_cpu, "cpu_merges_s": merge_cpu, "cpu_gate_s": gate_cpu, "cpu_after_s": tail_cpu,
            "settle_s": settle_s, "active_parts": parts, "cpu_receiver_s": rx_cpu,
            "cpu_loadgen_s": time.process_time() - me_cpu0,
            "rss_receiver_mb": peak_rss_mb(receiver.pid),
            "rss_clickhouse_mb": max(peak_rss_mb(p) for p in ch_pids),
            "request_bytes_per_span": sum(map(len, bodies)) / spans, **stats,
        }
        client.close()
        return result
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.wait(30)
        server.stop()


def report(r: dict) -> None:
    cpu = r["cpu_clickhouse_s"] + r["cpu_receiver_s"]
    rate = r["spans_per_s"]
    print(f"\ntimelines on {r['timeline_share']:.0%} of request spans "
          f"({r['request_bytes_per_span']:.0f} B/span on the wire):\n"
          f"  end to end     {rate:>10,.0f} spans/s  ({r['spans']:,} spans in {r['seconds']:.2f} s; all acknowledged "
          f"after {r['acked_seconds']:.2f} s; {r['retries_429']} x 429, {r['errors']} errors)\n"
          f"  one export's wait for its 200: median {r['ack_p50_s']:.2f} s, p99 {r['ack_p99_s']:.2f} s, "
          f"max {r['ack_max_s']:.2f} s (the OTel Collector's exporter gives up at 5 s)\n"
          f"  token rows     {r['tokens_per_s']:>10,.0f} rows/s   ({r['token_rows']:,} rows)\n"
          f"  vs goal 100k/s x{rate / GOAL:.2f};  vs Python rows ~40k/s/core x{rate / BASELINE_PY_ROWS:.2f};  "
          f"vs Arrow insert alone ~140k/s x{rate / BASELINE_ARROW_INSERT:.2f};  "
          f"vs Collector ~40k/s/core x{rate / BASELINE_COLLECTOR:.2f}\n"
          f"  CPU: ClickHouse {r['cpu_clickhouse_s']:.1f} s ({r['cpu_clickhouse_s'] / cpu:.0%}; of it the gate "
          f"{r['cpu_gate_s']:.1f} s, {1e6 * r['cpu_gate_s'] / r['spans']:.2f} us/span), receiver "
          f"{r['cpu_receiver_s']:.1f} s ({r['cpu_receiver_s'] / cpu:.0%}), load generator {r['cpu_loadgen_s']:.1f} s; "
          f"{1e6 * cpu / r['spans']:.1f} CPU-us per span stored; {cpu / r['seconds']:.2f} of 2 cores busy\n"
          f"  merges: {r['cpu_merges_s']:.1f} s of ClickHouse's CPU during the run, then {r['cpu_after_s']:.1f} s more "
          f"until none was assigned for 3 s ({r['settle_s']:.0f} s, {r['active_parts']} active parts left): "
          f"{1e6 * (cpu + r['cpu_after_s']) / r['spans']:.1f} CPU-us per span with the merges settled\n"
          f"  peak RSS: receiver {r['rss_receiver_mb']:.0f} MiB, ClickHouse {r['rss_clickhouse_mb']:.0f} MiB"
          + (f"; load average {r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f}" if "load_average" in r else ""),
          flush=True)


Case = tuple[float, int, str, int | None, str, int | float | None, str]
# A receiver with the refusal before reading turned off: every 429 after reading and decoding the body, as before.
REFUSE_READ = ("from infersight.pipelines.receiver.intake import Intake; Intake.refuse_if_full = lambda *a, **k: None; "
               "import sys; from infersight.cli import main; sys.exit(main())")


def parse_case(text: str) -> Case:
    """``SHARE/PARALLELISM[/ENCODING[/INSERTS[/STORED[/QUEUE[/REFUSAL]]]]]``: timeline share,
    pipeline.insert_parallelism, text|array, pipeline.insert_threads (concurrent inserts; default
    --insert-threads), where a timeline is stored: once (llm_token_timelines, schema version 7) or twice
    (also in otel_traces' SpanAttributes, as before version 7), and the queue's bound: a count of spans
    with no bound by drain time (pipeline.queue_max_spans, as before the drain-time bound), or seconds of
    drain time such as 4s (pipeline.queue_max_seconds); default: the config's bounds; and when a full queue
    refuses: unread (before the body is read or decoded, now) or read (after, as before)."""
    parts = text.split("/")
    try:
        share, parallelism = float(parts[0]), int(parts[1])
        encoding = parts[2] if len(parts) > 2 and parts[2] else "text"
        inserts = int(parts[3]) if len(parts) > 3 and parts[3] else None
        stored = parts[4] if len(parts) > 4 and parts[4] else "once"
        queue = (float(parts[5][:-1]) if parts[5].endswith("s") else int(parts[5])) \
            if len(parts) > 5 and parts[5] else None
        refusal = parts[6] if len(parts) > 6 and parts[6] else "unread"
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError(f"case {text!r}: expected SHARE/PARALLELISM[/text|array[/INSERTS"
                                         "[/once|twice[/QUEUE]]]], e.g. 0/2 or 0/1/text/1 or 1/2/text/2/twice "
                                         "or 0/2////300000 or 0/2////4s or 1/1/text/1//4s/read") from None
    if (not 0 <= share <= 1 or parallelism < 1 or encoding not in ("text", "array") or len(parts) > 7
            or (inserts is not None and inserts < 1) or stored not in ("once", "twice")
            or (queue is not None and queue < 1) or refusal not in ("unread", "read")):
        raise argparse.ArgumentTypeError(f"case {text!r}: share within 0..1, parallelism >= 1, text or array, "
                                         "inserts >= 1, once or twice, queue >= 1, unread or read")
    return share, parallelism, encoding, inserts, stored, queue, refusal


def case_name(case: Case) -> str:
    share, parallelism, encoding, inserts, stored, queue, refusal = case
    timelines = f"{share:.0%} timelines ({encoding}{', stored twice' if stored == 'twice' else ''})" if share \
        else "no timelines"
    name = f"{timelines}, {parallelism} insert thread{'s' if parallelism > 1 else ''}"
    if inserts is not None:
        name += f", {inserts} concurrent insert{'s' if inserts > 1 else ''}"
    if isinstance(queue, float):
        name += f", queue bound at {queue:g} s of drain time"
    elif queue is not None:
        name += f", queue fixed at {queue:,} spans"
    return name if refusal == "unread" else f"{name}, 429 after reading the body"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=50_000, help="traces per case (7 spans each; default 50000)")
    parser.add_argument("--cases", type=parse_case, nargs="+", default=[parse_case(c) for c in ("0/1", "0/2", "1/2")],
                        metavar="SHARE/PARALLELISM[/ENCODING[/INSERTS[/STORED[/QUEUE[/REFUSAL]]]]]",
                        help="cases, run in this order in every round; the first is the baseline the others are "
                             "compared with (default: 0/1 0/2 1/2, i.e. no timelines with one insert thread as "
                             "before issue 18, then two, then every request span with a timeline; a fourth field "
                             "sets the concurrent inserts, e.g. 0/1/text/1 against 0/1/text/2)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all cases, interleaved (default 2)")
    parser.add_argument("--concurrency", type=int, default=600, help="concurrent client connections")
    parser.add_argument("--timeout", type=float, default=180, help="limit per case, seconds")
    parser.add_argument("--batch-rows", type=int, default=100_000, help="pipeline.batch_rows (default 100000)")
    parser.add_argument("--queue-max-spans", type=int, default=None,
                        help="pipeline.queue_max_spans (default: the config's)")
    parser.add_argument("--batch-bytes", type=int, default=None, help="pipeline.batch_bytes (default: the config's)")
    parser.add_argument("--insert-threads", type=int, default=2, help="pipeline.insert_threads")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http", help="OTLP transport (default http)")
    args = parser.parse_args()
    if args.traces < 100 or args.rounds < 1:
        parser.error("--traces must be >= 100 and --rounds >= 1")
    print(f"pipeline end to end on {os.cpu_count()} cores: {args.traces * 7:,} spans per case, "
          f"{args.concurrency} connections, OTLP/{args.protocol} protobuf, {SPANS_PER_REQUEST} spans per request; "
          f"{len(args.cases)} cases x {args.rounds} rounds, interleaved")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="infersight-bench-") as tmp:
        for round_number in range(args.rounds):
            for case in args.cases:
                share, parallelism, encoding, inserts, stored, queue, refusal = case
                pipeline = {"batch_rows": args.batch_rows, "insert_threads": inserts or args.insert_threads,
                            "insert_parallelism": parallelism}
                if isinstance(queue, float):
                    pipeline["queue_max_seconds"] = queue
                elif queue is not None:  # the bound before the drain-time one: a fixed count of spans
                    pipeline.update(queue_max_spans=queue, queue_max_seconds=1e9)
                elif args.queue_max_spans:
                    pipeline["queue_max_spans"] = args.queue_max_spans
                if args.batch_bytes:
                    pipeline["batch_bytes"] = args.batch_bytes
                workdir = Path(tmp) / f"r{round_number}-{'-'.join(map(str, case))}"
                workdir.mkdir()
                print(f"\nround {round_number + 1}: {case_name(case)}", end="", flush=True)
                load_before = os.getloadavg()[0]
                r = run_case(args.traces, share, args.concurrency, args.timeout, workdir, pipeline, args.protocol,
                             encoding, stored, refusal)
                r.update(round=round_number, case=case_name(case), insert_parallelism=parallelism, encoding=encoding,
                         insert_threads=pipeline["insert_threads"], load_average=(load_before, os.getloadavg()[0]))
                rows.append(r)
                report(r)
    summarize(rows, [case_name(c) for c in args.cases])
    print("\n" + json.dumps(rows))
    return 0


def summarize(rows: list[dict], names: list[str]) -> None:
    """Per case: spans/s and CPU-us per stored span (range over rounds), and the ratio to the baseline
    case of the same round (the first case), so that load from other jobs cancels out as far as it can."""
    baseline = names[0]
    print(f"\nsummary (min..max over rounds; ratios against '{baseline}' in the same round)")
    print(f"{'case':<64}{'spans/s':>20}{'x baseline':>16}{'CPU-us/span':>16}{'of it merges':>16}"
          f"{'settled':>16}{'cores busy':>14}{'load avg':>12}{'429s':>14}{'ack p99 s':>14}{'ack max s':>14}")
    for name in names:
        mine = [r for r in rows if r["case"] == name]
        ratios = []
        for r in mine:
            base = next(b for b in rows if b["case"] == baseline and b["round"] == r["round"])
            ratios.append(r["spans_per_s"] / base["spans_per_s"])
        rates = [r["spans_per_s"] for r in mine]
        cpu = [1e6 * (r["cpu_clickhouse_s"] + r["cpu_receiver_s"]) / r["spans"] for r in mine]
        merges = [1e6 * r["cpu_merges_s"] / r["spans"] for r in mine]
        settled = [1e6 * (r["cpu_clickhouse_s"] + r["cpu_after_s"] + r["cpu_receiver_s"]) / r["spans"] for r in mine]
        busy = [(r["cpu_clickhouse_s"] + r["cpu_receiver_s"]) / r["seconds"] for r in mine]
        load = [value for r in mine for value in r["load_average"]]
        bounced = [r["retries_429"] for r in mine]
        p99, worst = [r["ack_p99_s"] for r in mine], [r["ack_max_s"] for r in mine]
        print(f"{name:<64}{min(rates):>10,.0f}..{max(rates):<8,.0f}{min(ratios):>8.2f}..{max(ratios):<6.2f}"
              f"{min(cpu):>8.1f}..{max(cpu):<6.1f}{min(merges):>8.1f}..{max(merges):<6.1f}"
              f"{min(settled):>8.1f}..{max(settled):<6.1f}{min(busy):>7.2f}..{max(busy):<5.2f}{min(load):>6.1f}..{max(load):<5.1f}"
              f"{min(bounced):>7}..{max(bounced):<5}{min(p99):>7.2f}..{max(p99):<5.2f}{min(worst):>7.2f}..{max(worst):<5.2f}")


if __name__ == "__main__":
    sys.exit(main())
