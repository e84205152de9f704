"""``infersight demo``: the main job, end to end, on the embedded default; no GPU, no engine.

1. start the embedded ClickHouse (chdb-core) and apply the schema;
2. start the OTLP receivers into it;
3. start the GPU exporter on simulated GPUs;
4. serve demo traffic (``demo_fleet``, a stand-in for the simulator) through the real request
   tracer, which exports spans and kept token timelines over OTLP/HTTP to the receiver;
5. answer the post-incident questions from ClickHouse and write the incident report.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

from infersight import attributes
from infersight.commands.output import OutputError, output_folder, render
from infersight.config import Config

STEPS = 6
# The staged stall lasts ~580 ms; ordinary token gaps are ~4 ms. 200 ms stays clear of both, even on a
# loaded machine where a thread wakes late.
STALL_MS = 200


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="run the whole stack on this machine: ClickHouse, receivers, simulated GPUs, traffic, report",
        description="Start the embedded stack, push a few seconds of demo traffic with an incident through the "
                    "real tracer and receiver, and answer the post-incident questions from ClickHouse. "
                    "Everything binds 127.0.0.1 on free ports and stops at the end.")
    p.add_argument("--out", default=".infersight/demo", help="folder for data and the report (default: %(default)s)")
    p.add_argument("--requests", type=int, default=160, help="requests to serve (default: %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep the previous demo data instead of starting afresh")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table for people, json for scripts (a summary object)")
    p.set_defaults(func=run_demo)


def _step(n: int, text: str, quiet: bool) -> None:
    if not quiet:
        print(f"[{n}/{STEPS}] {text}", flush=True)


def run_demo(args, config: Config) -> int:
    from infersight.collectors.gpu.app import GPUExporter
    from infersight.collectors.gpu.sim import SimBackend
    from infersight.commands.demo_fleet import STALLED_INSTANCE, run_traffic
    from infersight.instrumentation import RequestTracer, TailSampler, setup_tracing
    from infersight.pipelines.clickhouse_server import ClickHouseServer, ClickHouseServerError
    from infersight.pipelines.queries import library
    from infersight.pipelines.queries.report import Settings, write_report
    from infersight.pipelines.queries.window import Window
    from infersight.pipelines.receiver.service import Receiver, ReceiverThread, SetupError
    from infersight.pipelines.schema import migrations
    from infersight.pipelines.schema.ddl import TOKENS, TRACES, SchemaOptions

    if args.requests < 10:
        print("infersight demo: --requests must be at least 10", file=sys.stderr)
        return 2
    quiet = args.format == "json"
    try:
        out = _demo_folder(Path(args.out), keep=args.keep)
    except OutputError as exc:
        print(f"infersight demo: {exc}", file=sys.stderr)
        return 2

    _step(1, f"embedded ClickHouse in {out / 'clickhouse'}", quiet)
    server = ClickHouseServer(out / "clickhouse", port=0)
    try:
        server.start()
    except ClickHouseServerError as exc:
        print(f"infersight demo: embedded ClickHouse did not start: {exc}", file=sys.stderr)
        return 1
    receiver = gpus = tracing = None
    try:
        client = server.client()
        migrations.migrate(client, SchemaOptions(database="default", retention=config.clickhouse.retention))
        client.close()
        client = server.client(role="reader")  # the questions and the report only read (DESIGN 11)

        _step(2, "OTLP receivers (HTTP and gRPC) on free ports", quiet)
        try:
            receiver = ReceiverThread(Receiver(config, dsn=server.dsn("default", "writer"), http_listen="127.0.0.1:0",
                                               grpc_listen="127.0.0.1:0", spool_dir=str(out / "spool"))).start()
        except SetupError as exc:
            print(f"infersight demo: {exc}", file=sys.stderr)
            return 1

        _step(3, "GPU exporter on 4 simulated H100s", quiet)
        backend = SimBackend(count=4, gpu_type="H100-SXM")
        gpus = GPUExporter(backend, node="demo-node", interval_seconds=0.5)
        gpu_port = gpus.start("127.0.0.1:0")
        backend.set_all_loads(compute=0.35, bandwidth=0.55)
        backend.set_load(2, compute=0.95, bandwidth=0.93)  # the GPU behind the instance that stalls

        _step(4, f"{args.requests} requests through the request tracer, exported over OTLP/HTTP", quiet)
        tracing = setup_tracing("demo-gateway", protocol="http/protobuf", endpoint=f"{receiver.http_url}/v1/traces")
        # A short run: judge "slow" after 20 requests (not the default 100); seeded for repeatable runs.
        sampler = TailSampler(random_share=0.05, min_samples=20, seed=7)
        tracer = RequestTracer(tracer_provider=tracing.provider, sampler=sampler,
                               provider_name="vllm")
        started = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(seconds=1)
        run_traffic(tracer, requests=args.requests, on_progress=None if quiet else _progress(args.requests))
        tracing.force_flush()
        ended = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=1)

        _step(5, "flushing the receiver into ClickHouse", quiet)
        receiver.stop()
        receiver = None

        _step(6, "post-incident questions, answered from ClickHouse", quiet)
        window = Window(started, ended)
        slowest = library.slowest(client, "default", started, ended, by="gap", limit=5)
        stalls = library.window_stalls(client, "default", started, ended, min_gap_ms=STALL_MS)
        pools = library.compare_pools(client, "default", started, ended)
        time.sleep(0.6)  # one more GPU sample under load
        gpu_rows = gpus.rows()
        report = write_report(client, "default", window, out / "report", min_gap_ms=STALL_MS, prometheus_url=None,
                              settings=Settings.from_config(config))
        stored = client.query(f"SELECT count() FROM {TRACES}").result_rows[0][0]
        tokens = client.query(f"SELECT count() FROM {TOKENS}").result_rows[0][0]
        reasons = dict(client.query(f"SELECT SpanAttributes[{{key:String}}] AS reason, count() FROM {TRACES} "
                                    "WHERE IsRequest GROUP BY reason ORDER BY reason",
                                    parameters={"key": attributes.SAMPLING_REASON}).result_rows)
        summary = {
            "spans_stored": stored, "token_rows": tokens, "stalled_instance_expected": STALLED_INSTANCE,
            "timelines_by_sampling_reason": reasons,
            "slowest_by_gap": slowest, "stalls": stalls, "pools": pools, "gpus": gpu_rows,
            "gpu_metrics": f"http://127.0.0.1:{gpu_port}/metrics (while the demo runs)",
            "report": [str(p) for p in report],
        }
        if quiet:
            print(json.dumps(summary, indent=2, default=str))
            return 0
        print(f"\n{stored} spans in {TRACES}, {tokens} token rows in {TOKENS}")
        kept = ", ".join(f"{reason}: {count}" for reason, count in reasons.items())
        print(f"tail sampling ({attributes.SAMPLING_REASON}): {kept}\n")
        print("Requests with the longest token stall (infersight traces slowest --by gap):")
        print(render(slowest, "table", ["trace_id", "instance", "pool", "ttft_ms", "e2e_ms", "max_gap_ms",
                                        "input_tokens"]))
        print(f"\nStalls over {STALL_MS} ms by instance and minute (infersight traces stalls):")
        print(render(stalls, "table", ["instance", "minute", "requests", "max_gap_ms", "mean_gap_ms"]))
        print("\nCanary vs stable (infersight traces compare):")
        print(render(pools, "table"))
        print("\nSimulated GPUs (infersight collect gpu --backend sim --once):")
        print(render(gpu_rows, "table", ["gpu", "gpu_model", "bandwidth_utilization", "bandwidth_source",
                                         "utilization", "power_watts", "temperature_celsius"]))
        print(f"\nIncident report: {report.headline.sentence}\n  {report.html}")
        return 0
    finally:
        if tracing is not None:
            tracing.shutdown()
        if receiver is not None:
            receiver.stop()
        if gpus is not None:
            gpus.stop()
        server.stop()


# Written into every demo folder: only a folder holding it is ever deleted for a fresh start.
DEMO_MARKER = ".infersight-demo"


def _demo_folder(out: Path, keep: bool) -> Path:
    """The demo's folder, emptied unless ``keep``; refuses to delete a folder the demo did not make."""
    if out.is_dir() and not keep and any(out.iterdir()):
        # An older demo's folder (before the marker) is known by its embedded ClickHouse data.
        if not (out / DEMO_MARKER).is_file() and not (out / "clickhouse").is_dir():
            raise OutputError(f"--out {out}: the folder holds files the demo did not write; "
                              "give an empty or new folder (the demo deletes its folder's contents)")
        shutil.rmtree(out)
    folder = output_folder(out)
    try:
        (folder / DEMO_MARKER).write_text("written by infersight demo; the next demo run may delete this folder\n")
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot write into the folder ({exc.strerror or exc})") from None
    return folder


def _progress(total: int):
    """A progress bar on a terminal; a line per quarter in a log."""
    tty = sys.stdout.isatty()

    def show(done: int) -> None:
        if tty:
            filled = 30 * done // total
            end = "\n" if done == total else ""
            print(f"\r      [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} requests", end=end, flush=True)
        elif done == total or done % max(1, total // 4) == 0:
            print(f"      {done}/{total} requests", flush=True)

    return show
