"""Our real exporters, in-process, with a little traffic: what the live dashboard test scrapes.

- the GPU exporter on the simulated backend (two H100s, one fallen off the bus, ECC errors on the other);
- the engine collector over the vLLM fixture (its generated-token counter made to grow), the SGLang
  fixture, a prefill/decode pair (SGLang prefill, vLLM decode) and a target that refuses connections;
- dcgm-exporter and llm-d's EPP as GPU and gateway sources, from their captured text;
- request and gateway metrics from RequestTracer and GatewayHealth, driven by a background thread;
- the receiver's PipelineMetrics and the tracing SDK's drop counters, as the receiver and
  setup_tracing register them.
No engine or GPU can run here: the engines are the fixtures' captured /metrics text, served by the
tests' EngineServer stand-in.
"""

from __future__ import annotations

import re
import threading
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from infersight.collectors.engine.collector import EngineCollector
from infersight.collectors.engine.targets import Target
from infersight.collectors.exporter import serve
from infersight.collectors.gateway.collector import GatewayCollector, GatewayTarget
from infersight.collectors.gpu.app import GPUExporter
from infersight.collectors.gpu.dcgm_collector import DcgmCollector, DcgmSource
from infersight.collectors.gpu.sim import SimBackend
from infersight.instrumentation import GatewayHealth, RequestTracer
from infersight.instrumentation.tracing_setup import DropCountingSpanProcessor
from infersight.pipelines.receiver.metrics import PipelineMetrics
from tests.collectors.engine_server import EngineServer
from tests.conftest import FIXTURES

NODE = "sim"
MODEL = "m1"
POOLS = ("stable", "canary")
GENERATED = re.compile(r"^(vllm:generation_tokens_total\{[^}]*\}) [0-9.e+]+$", re.M)
TTFT = re.compile(r"^(vllm:time_to_first_token_seconds_(?:bucket|count|sum)\{[^}]*\}) ([0-9.e+]+)$", re.M)


class GrowingVLLM:
    """The vLLM fixture, its generated-token counter rising 100 tokens/s (energy per token needs it)
    and its TTFT histogram growing in its own shape (the breaker's engine-side p99 needs a rate)."""

    def __init__(self) -> None:
        self.text = (FIXTURES / "metrics" / "vllm_metrics_sample.txt").read_text()
        self.start = time.monotonic()

    def __call__(self) -> bytes:
        elapsed = time.monotonic() - self.start
        tokens = 1000 + 100 * elapsed
        text = GENERATED.sub(lambda m: f"{m.group(1)} {tokens}", self.text)
        return TTFT.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * (1 + elapsed)}", text).encode()


class LiveFleet:
    def __init__(self) -> None:
        self.servers = []
        self.stopping = threading.Event()
        self.gpus = self._gpus()
        self.engines = EngineServer()
        self.engine_port = self._engine_collector()
        self.sources_port = self._sources()
        self.registry = CollectorRegistry()
        self.health = GatewayHealth(self.registry)
        self.tracer = self._tracer()
        self._pipeline()
        server, _ = serve(self.registry, "127.0.0.1:0")
        self.servers.append(server)
        self.app_port = server.server_port
        for pool in POOLS:
            self.health.instance_started(f"i-{pool}", model=MODEL, pool=pool)
            self.health.set_state(f"i-{pool}", "healthy", model=MODEL, pool=pool)
        self.health.set_state("i-canary", "ejected", model=MODEL, pool="canary")  # the first ejection
        # A third instance whose breaker is half-open (slow p99): the breaker dashboard lists it.
        self.health.instance_started("i-slow", model=MODEL, pool="stable")
        self.health.set_state("i-slow", "half_open", model=MODEL, pool="stable")
        self.traffic = threading.Thread(target=self._traffic, daemon=True)
        self.traffic.start()

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in (self.gpu_port, self.engine_port, self.app_port, self.sources_port)]

    def _sources(self) -> int:
        """dcgm-exporter and llm-d's EPP as sources (their captured text): the GPU and gateway sources' series."""
        dcgm = (FIXTURES / "metrics" / "dcgm_exporter_metrics_rendered.txt").read_text()
        epp = (FIXTURES / "gateways" / "llm_d_epp_dual_emission_rendered.txt").read_text()
        self.dcgm = DcgmCollector([DcgmSource(self.engines.add("/dcgm", dcgm))], timeout=1.0, log_changes=False)
        self.gateways = GatewayCollector([GatewayTarget(self.engines.add("/epp", epp))], timeout=1.0,
                                         log_changes=False)
        registry = CollectorRegistry()
        registry.register(self.dcgm)
        registry.register(self.gateways)
        server, _ = serve(registry, "127.0.0.1:0")
        self.servers.append(server)
        return server.server_port

    def _gpus(self) -> GPUExporter:
        backend = SimBackend(count=2, node=NODE)
        backend.set_all_loads(compute=0.4, bandwidth=0.8)
        backend.gpu(0).inject_ecc(corrected=2, uncorrected=1)
        exporter = GPUExporter(backend, node=NODE, interval_seconds=0.5)
        self.gpu_port = exporter.start("127.0.0.1:0")
        backend.gpu(1).fall_off_bus()
        return exporter

    def _engine_collector(self) -> int:
        sglang = (FIXTURES / "metrics" / "sglang_metrics_sample.txt").read_text()
        sglang_prefill = (FIXTURES / "metrics" / "sglang_pd_current_source.txt").read_text()
        # the decode side of the same model as the prefill fixture
        vllm_decode = (FIXTURES / "metrics" / "vllm_0_32_pd_sleep_source.txt").read_text().replace(
            'model_name="qwen3-32b"', 'model_name="deepseek-v3"')
        # The engines' instance names are the ones the gateway routes to (i-stable, i-canary), as in
        # production where both are the endpoint host:port: the instance drill-down joins them.
        targets = [Target(url=self.engines.add("/vllm", GrowingVLLM()), engine="vllm", pool="stable", node=NODE,
                          gpu="0", instance="i-stable"),
                   # Two peers of i-stable (same model, pool and role): the breaker judges an instance
                   # against the median of at least three (alerts/rules: instance_p99 peers), so a model on
                   # fewer instances draws no peer or breaker line.
                   *(Target(url=self.engines.add(f"/vllm-{peer}", GrowingVLLM()), engine="vllm", pool="stable",
                            node=NODE, instance=f"i-stable-{peer}") for peer in (2, 3)),
                   Target(url=self.engines.add("/sglang", sglang), engine="sglang", pool="canary", node=NODE,
                          gpu="1", instance="i-canary"),
                   # A prefill/decode pair of one model (SGLang says engine_type=prefill; the vLLM decode
                   # instance's role comes from its target config, as in production).
                   Target(url=self.engines.add("/sglang-prefill", sglang_prefill), engine="sglang", pool="stable",
                          node=NODE, instance="i-prefill"),
                   Target(url=self.engines.add("/vllm-decode", vllm_decode), engine="vllm", pool="stable",
                          node=NODE, instance="i-decode", role="decode"),
                   Target(url="http://127.0.0.1:1/metrics", engine="vllm", instance="refused:1")]
        self.collector = EngineCollector(targets, timeout=1.0, log_changes=False)
        registry = CollectorRegistry()
        registry.register(self.collector)
        server, _ = serve(registry, "127.0.0.1:0")
        self.servers.append(server)
        return server.server_port

    def _tracer(self) -> RequestTracer:
        provider = TracerProvider()
        self.processor = DropCountingSpanProcessor(InMemorySpanExporter(), service="gateway", registry=self.registry,
                                                   max_queue_size=2048, schedule_delay_millis=200,
                                                   max_export_batch_size=512)
        provider.add_span_processor(self.processor)
        self.provider = provider
        return RequestTracer(registry=self.registry, tracer_provider=provider, provider_name="vllm")

    def _pipeline(self) -> None:
        metrics = PipelineMetrics(self.registry)
        for protocol in ("grpc", "http"):
            metrics.received.labels(protocol).inc(1000)
            metrics.accepted.labels(protocol).inc(990)
            metrics.requests.labels(protocol, "ok").inc(10)
        metrics.reject("grpc", "invalid_id", 10)
        metrics.requests.labels("http", "malformed").inc()
        metrics.truncated.inc()
        metrics.batch_rows.observe(1000)
        metrics.insert_duration.observe(0.05)
        metrics.retries.inc()
        metrics.insert_errors.labels("transient").inc()
        metrics.spooled.inc()
        metrics.replayed.inc()
        metrics.spool_discarded.labels("corrupt").inc()
        metrics.spool_bytes.set(4096)
        metrics.spool_batches.set(1)
        metrics.queue_depth.set(12)
        self.pipeline = metrics

    def _traffic(self) -> None:
        """A request per pool every 50 ms: most succeed, some retry, a few are rejected or time out; the gateway
        health-checks the instance of each routed request."""
        n = 0
        while not self.stopping.is_set():
            for pool in POOLS:
                n += 1
                with self.tracer.start(MODEL, pool=pool, strategy="least_loaded") as req:
                    req.queued()
                    if n % 7 == 0:
                        req.reject("overloaded")
                        continue
                    req.routed(f"i-{pool}")
                    # health checks, every third one failing (the failure counter appears at its first event)
                    self.health.health_check(f"i-{pool}", n % 3 != 0, model=MODEL, pool=pool)
                    if n % 9 == 0:
                        req.timeout("ttft")
                        continue
                    if n % 5 == 0:
                        req.retry(backoff_s=0.001)
                        req.routed(f"i-{pool}")
                    for _ in range(4):
                        req.token()
                        time.sleep(0.001)
                    req.finish("stop", input_tokens=100, output_tokens=4, cached_input_tokens=50)
            self.stopping.wait(0.05)

    def eject_again(self) -> None:
        """A second ejection, once Prometheus has seen the first: increase() over 5m is then > 0."""
        self.health.set_state("i-canary", "healthy", model=MODEL, pool="canary")
        self.health.set_state("i-canary", "ejected", model=MODEL, pool="canary")

    def stop(self) -> None:
        self.stopping.set()
        self.traffic.join(timeout=5)
        self.gpus.stop()
        self.collector.close()
        self.dcgm.close()
        self.gateways.close()
        for server in self.servers:
            server.shutdown()
        self.engines.stop()
        self.provider.shutdown()
