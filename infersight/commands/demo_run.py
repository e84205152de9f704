"""One demo run: start every part in order, run the scenario against the wall clock, gather what happened.

Every part started is pushed on a stack of stop actions, undone in reverse order by :meth:`stop_all`
(on success, on an error, on Ctrl-C); it is safe to call twice.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from infersight.commands.demo import HEAD_RATIO, LOOKBACK, SCRAPE, SPEED, STEPS, Every, Progress
from infersight.commands.demo_stack import (
    ON_CALL,
    FleetEndpoints,
    StackError,
    Webhook,
    start_alertmanager,
    start_engine_collector,
    start_prometheus,
)
from infersight.config import Config

ENGINE_SCRAPE = "2s"
PAGE_REFRESH_S = 0.5  # the gateway's /metrics page is rendered this often: twice per (1 s) scrape
ENGINE_REFRESH_S = 1.0  # the engines' pages (twice per 2 s engine scrape): rendering twelve costs ~40 ms
TIMELINE_TOKENS = 256  # a kept timeline keeps its last 256 token times: enough to see a stall, light to ship


def _write_atomically(path: Path, text: str) -> None:
    """A reader (Prometheus, the engine collector) must never see half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class DemoRun:
    def __init__(self, config: Config, scenario, minutes: int, out: Path, binaries: dict[str, str],
                 quiet: bool) -> None:
        # absolute: Prometheus and Alertmanager run in folders of their own and read paths under it
        self.config, self.scenario, self.minutes, self.out = config, scenario, minutes, out.resolve()
        self.binaries, self.quiet = binaries, quiet
        self._stops: list[tuple[str, Callable[[], None]]] = []
        self.fleet = None
        self.decode_log = None
        self.trace_ids: dict[int, str] = {}  # simulated request id -> trace id (the replay's)
        self.driver = None
        self.lock = threading.Lock()
        self.gpu_exporters: dict[str, int] = {}  # node -> port
        self._engine_targets = -1
        self.started_at = time.monotonic()

    # -- bookkeeping --------------------------------------------------------------------------------
    def _step(self, n: int, text: str) -> None:
        if not self.quiet:
            print(f"[{n}/{STEPS}] {text}", file=sys.stderr, flush=True)

    def _on_stop(self, name: str, action: Callable[[], None]) -> None:
        self._stops.append((name, action))

    def stop_now(self, name: str) -> None:
        """Stop one part ahead of the others (the receiver, to flush before the questions)."""
        for i, (n, action) in enumerate(self._stops):
            if n == name:
                del self._stops[i]
                action()
                return

    def stop_all(self) -> None:
        while self._stops:
            name, action = self._stops.pop()
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - stop the rest whatever one part does
                print(f"infersight demo: stopping {name}: {exc}", file=sys.stderr)

    def minute(self) -> float:
        return self.fleet.now / 60 if self.fleet is not None else 0.0

    # -- the run --------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from infersight.pipelines.clickhouse_server import ClickHouseServer, ClickHouseServerError
        from infersight.pipelines.receiver.service import Receiver, ReceiverThread, SetupError
        from infersight.pipelines.schema import migrations
        from infersight.pipelines.schema.ddl import SchemaOptions

        out, config = self.out, self.config
        self._step(1, f"embedded ClickHouse in {out / 'clickhouse'}, OTLP receivers")
        server = ClickHouseServer(out / "clickhouse", port=0)
        self._on_stop("ClickHouse", server.stop)  # before start: a Ctrl-C while it starts stops it too
        try:
            server.start()
        except ClickHouseServerError as exc:
            raise StackError(f"embedded ClickHouse did not start: {exc}") from None
        client = server.client()
        migrations.migrate(client, SchemaOptions.from_config(config, "default"))
        client.close()
        try:
            receiver = ReceiverThread(Receiver(config, dsn=server.dsn("default", "writer"), http_listen="127.0.0.1:0",
                                               grpc_listen="127.0.0.1:0", spool_dir=str(out / "spool"))).start()
        except SetupError as exc:
            raise StackError(str(exc)) from None
        self._on_stop("receivers", receiver.stop)

        self._step(2, f"rules on the demo clock ({SPEED:g}x: 5m windows read 5 s), Alertmanager, Prometheus")
        webhook = Webhook().start()
        self._on_stop("webhook", webhook.stop)
        am_config = self._write_rules(webhook)
        alertmanager, am_url = start_alertmanager(self.binaries["prometheus-alertmanager"],
                                                  self._folder("alertmanager"), am_config)
        self._on_stop("Alertmanager", alertmanager.stop)
        alertmanager.wait_ready()
        endpoints = FleetEndpoints()
        self._on_stop("fleet endpoints", endpoints.stop)
        engine_sd = self._folder("engine-collector") / "engines.json"
        engine_sd.write_text("[]")
        collector, engine_port = start_engine_collector(self._folder("engine-collector"), engine_sd)
        self._on_stop("engine collector", collector.stop)
        collector.wait_ready()
        gpu_sd = self._folder("prometheus") / "gpu_targets.json"
        gpu_sd.write_text("[]")
        prom_config = self._prometheus_config(am_url, endpoints, engine_port, receiver, gpu_sd)
        prometheus, prom_url = start_prometheus(self.binaries["prometheus"], self._folder("prometheus"), prom_config,
                                                LOOKBACK)
        self._on_stop("Prometheus", prometheus.stop)
        prometheus.wait_ready()

        self._step(3, f"{self.scenario.name}: {self.scenario.title} (Prometheus pid {prometheus.pid}, Alertmanager "
                      f"pid {alertmanager.pid}, ClickHouse pid {server.proc.pid})")
        from infersight.instrumentation import RequestTracer, TailSampler, setup_tracing
        from infersight.simulator.decode_log import DecodeLog
        from infersight.simulator.fleet import Fleet
        from infersight.simulator.realtime import RealTimeDriver

        from .demo_replay import Replay

        tracing = setup_tracing("demo-gateway", protocol="http/protobuf", endpoint=f"{receiver.http_url}/v1/traces",
                                head_ratio=HEAD_RATIO)
        self._on_stop("tracing", tracing.shutdown)
        epoch = time.time()
        fleet = Fleet(self.scenario, config, epoch=epoch, speed=SPEED)
        self.fleet = fleet
        # The incident's own clock for spans: the scenario ends a minute before the demo started.
        base = epoch - self.minutes * 60 - 60
        decode_log = DecodeLog()  # every engine's decode steps: the token times of the traces, stalls included
        decode_log.record(fleet.engines(), fleet.now)
        self.decode_log = decode_log
        driver = RealTimeDriver(fleet, self.lock)
        self.driver = driver
        # The replay traces requests while the fleet waits for the wall clock (driver.idle): on a busy
        # machine the traces wait for the end, the fleet does not fall behind because of them.
        replay = Replay(lambda clock: RequestTracer(tracer_provider=tracing.provider, provider_name="vllm",
                                                    sampler=TailSampler(random_share=0.01, seed=7), clock=clock,
                                                    max_timeline_tokens=TIMELINE_TOKENS),
                        base, decode_log, gate=driver.idle)
        self._on_stop("replay", lambda: replay.close(10.0))
        self.trace_ids = replay.trace_ids
        fleet.metrics.on_end = replay.ended
        endpoints.fleet = fleet
        endpoints.refresh()
        self._sync_gpu_exporters(gpu_sd)
        self._sync_engine_targets(endpoints, engine_sd)
        progress = Progress(self.minutes, self.scenario.onset_minute, self.quiet)
        refresh, refresh_engines = Every(PAGE_REFRESH_S), Every(ENGINE_REFRESH_S)

        def on_step(t: float) -> None:  # in the fleet's thread, between ticks
            decode_log.record(fleet.engines(), t)
            replay.flush()
            if refresh.due():
                endpoints.refresh(engines=refresh_engines.due())
            self._sync_gpu_exporters(gpu_sd)
            self._sync_engine_targets(endpoints, engine_sd)
            if progress.every.due():
                progress.show(t / 60, sorted({a["labels"].get("alertname", "?") for d in webhook.snapshot()
                                              if d.receiver in ON_CALL for a in d.alerts
                                              if a.get("status") == "firing"}), driver.held_s)

        real_start = time.time()
        driver.run(self.minutes * 60.0, on_step=on_step)
        real_end = time.time()
        progress.show(self.minutes, [])
        progress.done()
        time.sleep(2.0)  # the last evaluation's alerts through Alertmanager's (scaled) group wait
        from .demo_summary import from_clickhouse, from_prometheus

        facts = from_prometheus(self, prom_url, webhook, driver, real_start, time.time())
        self._step(4, "flushing spans into ClickHouse")
        replay.close(120.0)
        tracing.force_flush()
        self.stop_now("receivers")
        self._step(5, "what happened: Prometheus, Alertmanager, ClickHouse, the incident report")
        reader = server.client(role="reader")  # the questions and the report only read (DESIGN 11)
        try:
            facts.update(from_clickhouse(self, reader, base))
        finally:
            reader.close()
        facts.update({"real_seconds": round(real_end - real_start, 1), "held_s": round(driver.held_s, 1),
                      "head_ratio": HEAD_RATIO,
                      "requests_replayed": replay.replayed, "replay_errors": replay.errors,
                      "total_seconds": round(time.monotonic() - self.started_at, 1)})
        return facts

    # -- parts ----------------------------------------------------------------------------------------
    def _folder(self, name: str) -> Path:
        path = self.out / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _write_rules(self, webhook: Webhook) -> Path:
        """The generated rules and routing, scaled to the demo clock, receivers pointed at the webhook."""
        from infersight.alerts.build import render_all
        from infersight.alerts.timescale import scale_alertmanager, scale_rule_file

        am = self.config.alertmanager.model_copy(update={
            "ticket_webhook_url": webhook.url("ticket"), "autoscaler_webhook_url": webhook.url("autoscaler"),
            "gateway_webhook_url": webhook.url("gateway"), "pagerduty_routing_key_file": None,
            "slack_api_url_file": None})
        config = self.config.model_copy(update={"alertmanager": am})
        files = render_all(config)
        rules = self._folder("rules")
        for relative, text in files.items():
            if relative.startswith("rules/"):
                document = scale_rule_file(yaml.safe_load(text), SPEED)
                (rules / relative.split("/", 1)[1]).write_text(
                    f"# The generated rules on the demo's clock: every duration divided by {SPEED:g}.\n"
                    + yaml.safe_dump(document, sort_keys=False, width=1 << 20))
        path = self._folder("alertmanager") / "alertmanager.yml"
        path.write_text(yaml.safe_dump(scale_alertmanager(yaml.safe_load(files["alertmanager.yml"]), SPEED),
                                       sort_keys=False))
        return path

    def _sync_engine_targets(self, endpoints: FleetEndpoints, sd_file: Path) -> None:
        """The fleet's engines as the engine collector's file_sd targets (rewritten when one joins)."""
        engines = self.fleet.engines()
        if len(engines) == self._engine_targets:
            return
        self._engine_targets = len(engines)
        groups = [{"targets": [endpoints.gateway_target],
                   "labels": {"__metrics_path__": endpoints.engine_path(e.instance), "instance": e.instance,
                              "engine": e.kind, "pool": e.pool, "node": e.node, "gpu": str(e.gpu),
                              **({"role": e.role} if e.role else {})}}
                  for e in engines]
        _write_atomically(sd_file, json.dumps(groups))

    def _sync_gpu_exporters(self, sd_file: Path) -> None:
        """A GPU exporter per simulated node (nodes appear when the fleet grows), listed for Prometheus."""
        from infersight.collectors.gpu.app import GPUExporter

        new = False
        for node in list(self.fleet.nodes):
            if node.name not in self.gpu_exporters:
                exporter = GPUExporter(node.gpus, node=node.name, interval_seconds=1.0)  # one sample a scrape
                self.gpu_exporters[node.name] = exporter.start("127.0.0.1:0")
                self._on_stop(f"GPU exporter {node.name}", exporter.stop)
                new = True
        if new:
            targets = [f"127.0.0.1:{port}" for port in self.gpu_exporters.values()]
            _write_atomically(sd_file, json.dumps([{"targets": targets}]))

    def job(self, component: str) -> str:
        from infersight.prometheus_config import job_name

        return job_name(self.config, component)  # the names `prometheus render` gives and the rules watch

    def _prometheus_config(self, am_url: str, endpoints: FleetEndpoints, engine_port: int, receiver,
                           gpu_sd: Path) -> Path:
        from infersight.prometheus_config import RenderError, Scrape, render, to_yaml

        path = self._folder("prometheus") / "prometheus.yml"
        try:
            document, comments = render(
                self.config, ["gateway", "engine", "gpu", "receiver"], rules_dir=str(self.out), out=str(path),
                scrape_interval=SCRAPE, alertmanagers=[am_url.split("://", 1)[1]],
                scrapes={
                    "gateway": Scrape(targets=[endpoints.gateway_target], metrics_path="/gateway/metrics",
                                      reads="the simulated gateway"),
                    # One collection scrapes every engine over HTTP and normalizes it: on a busy machine that
                    # can take a second, so this job scrapes every 2 s (rules' 5 s windows keep 2-3 samples).
                    "engine": Scrape(targets=[f"127.0.0.1:{engine_port}"], interval=ENGINE_SCRAPE,
                                     reads="the simulated fleet's vLLM engines"),
                    "gpu": Scrape(file_sd=str(gpu_sd.resolve()), reads="one simulated GPU exporter per node"),
                    "receiver": Scrape(targets=[receiver.http_url.split("://", 1)[1]]),
                })
        except RenderError as exc:
            raise StackError(f"Prometheus configuration: {exc}") from None
        path.write_text(to_yaml(document, comments, "`infersight demo`"))
        return path
